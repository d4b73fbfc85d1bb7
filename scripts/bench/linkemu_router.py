#!/usr/bin/env python3
"""Benchmark the linkemu router on the software testbed; prints JSON.

Measures: testbed build time, router start time (process spawn -> bridge joined),
time to configure the router for N clients through REST, ping RTT client -> server
through the router against client -> edge router (no OVS), and a short TCP goodput.
Uses its own names (lerb*), state dir and loopback ports, so it never touches a
user's testbed. Run as root: .venv/bin/python scripts/bench/linkemu_router.py
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from linkemu import router, router_plan, testbed
from nestednet.adapters import netns_exec
from nestednet.capabilities.nodes import ovs_datapath


def _ns(namespace: str, *argv: str, timeout: float = 60) -> str:
    done = netns_exec.run(namespace, argv, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} in {namespace} failed: {done.stdout}{done.stderr}")
    return done.stdout


def _ping(namespace: str, target: str, count: int) -> dict:
    """RTT statistics; the first reply is reported apart because a fresh path may go
    through the controller (rest_router learns a host's MAC on its first packet)."""
    out = _ns(namespace, "ping", "-n", "-c", str(count), "-i", "0.05", "-W", "2", target)
    times = [float(t) for t in re.findall(r"time=([\d.]+) ms", out)]
    loss = float(re.search(r"([\d.]+)% packet loss", out).group(1))
    rest = sorted(times[1:]) or [float("nan")]
    return {"count": count, "loss_pct": loss, "first_ms": times[0] if times else None,
            "rest_min_ms": rest[0], "rest_median_ms": statistics.median(rest),
            "rest_p90_ms": rest[int(0.9 * (len(rest) - 1))], "rest_max_ms": rest[-1]}


def _goodput(layout: testbed.Layout, seconds: int) -> float | str | None:
    """iperf3 TCP goodput C1 -> server in Mbit/s; the error text if the run failed."""
    if shutil.which("iperf3") is None:
        return None
    server = netns_exec.popen(layout.server_ns, ["iperf3", "-s", "-1", "-p", "35201"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):  # the server may take long to listen (software-emulated VM)
            probe = netns_exec.run(layout.server_ns, ["ss", "-Hltn", "sport = :35201"],
                                   timeout=60)
            if probe.stdout.strip():
                break
            time.sleep(0.1)
        out = _ns(layout.client_ns(1), "iperf3", "-J", "-c", str(layout.SERVER.ip), "-p",
                  "35201", "-t", str(seconds), timeout=seconds + 120)
        return round(json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6, 1)
    except (RuntimeError, subprocess.TimeoutExpired, KeyError, ValueError) as exc:
        return f"failed: {str(exc)[:200]}"
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[2, 10, 50],
                        help="testbed sizes to configure (default: 2 10 50)")
    parser.add_argument("--restarts", type=int, default=3, help="router start repetitions")
    parser.add_argument("--pings", type=int, default=50)
    args = parser.parse_args()

    result: dict = {"datapath": ovs_datapath(), "sizes": []}
    for n in args.clients:
        where = tempfile.mkdtemp(prefix="lerb-state-")
        layout = testbed.Layout(clients=n, prefix="lerb")
        try:
            built = testbed.up(layout, directory=where)
            plan = router_plan.plan(layout.link_table())
            entry: dict = {"clients": n, "testbed_up_s": built.timings["total"],
                           "rest_requests": len(plan.requests()),
                           "configure_s": built.timings["router_configure"]}
            if n == args.clients[0]:
                starts = [built.router.start_seconds]
                for _ in range(args.restarts - 1):
                    router.stop(where)
                    starts.append(router.start(layout.bridge, directory=where).start_seconds)
                    router.configure(plan, where)
                entry["router_start_s"] = starts
                entry["router_start_median_s"] = statistics.median(starts)
                entry["ping_client_to_server_via_router"] = _ping(
                    layout.client_ns(1), str(layout.SERVER.ip), args.pings)
                entry["ping_client_to_edge_no_ovs"] = _ping(
                    layout.client_ns(1), str(layout.edge_client_ip(1).ip), args.pings)
                entry["tcp_goodput_mbit_s"] = _goodput(layout, 3)
            # from scratch again: REST round trips, then until each route's gateway answered
            rs = router.running_state(where)
            rs.api().delete_all(rs.dpid)
            again = router.configure(plan, where)
            entry["reconfigure_s"] = again["seconds"]
            entry["reconfigure_until_routes_resolved_s"] = again["resolved_seconds"]
            result["sizes"].append(entry)
        finally:
            testbed.down(where)
            shutil.rmtree(where, ignore_errors=True)
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
