#!/usr/bin/env python3
"""Benchmark linkemu's shaping: configured vs observed goodput and RTT, and change latency.

Like the thesis's Tables 4.1/4.2: iperf3 TCP goodput for configured rates, ping
RTT for configured delays, plus how long one in-place `set` takes (median of
repeats), plus the head-of-line measurement for both shapers (link A 1 ms, link B
200 ms on one port; B saturated by TCP or UDP; A's RTT idle vs loaded). Builds
its own `les*` namespaces (tests/kernel/lestopo.py), needs root and sch_netem, so
on our machines it runs in the full-kernel VM:

    scripts/kernel-vm .venv/bin/python scripts/bench/linkemu.py --png results/linkemu.png

Prints one JSON document; writes a PNG with both curves.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kernel"))

import lestopo  # noqa: E402

from linkemu import linksfile, shaping  # noqa: E402
from nestednet import capabilities  # noqa: E402


def links(topo: lestopo.Topology, rate: str, delay: str) -> dict:
    def link(client: str) -> dict:
        return {"router": "R1", "client": client, "client_ip": topo.client_ip(client),
                "server_ip": topo.server_ip, "forward": {"rate": rate, "delay": delay},
                "backward": {"rate": "1Gbit"}}

    return {"emulator": {"bridge": "les-br", "client_port": topo.client_port,
                         "server_port": topo.server_port, "netns": topo.emu},
            "links": [link("C1"), link("C2")]}


def hol_links(topo: lestopo.Topology, b_delay: str = "200ms") -> dict:
    """Head-of-line set-up: C1 1 ms and C2 ``b_delay`` on the same port, 10 Mbit/s each."""
    doc = links(topo, "10Mbit", "1ms")
    doc["links"][1]["forward"]["delay"] = b_delay
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1,2,5,10,20,50,100", help="Mbit/s, comma separated")
    parser.add_argument("--delays", default="0,1,2,5,10,15", help="ms added one way (forward)")
    parser.add_argument("--seconds", type=int, default=4, help="iperf3 duration per rate")
    parser.add_argument("--pings", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=20, help="timed `set` changes")
    parser.add_argument("--shaper", default=shaping.DEFAULT_SHAPER)
    parser.add_argument("--hol-repeats", type=int, default=2,
                        help="head-of-line runs per shaper and load (0: skip)")
    parser.add_argument("--png", default=str(ROOT / "results" / "linkemu-bench.png"))
    args = parser.parse_args()

    os.environ.setdefault(shaping.STATE_DIR_ENV, tempfile.mkdtemp(prefix="les-bench-"))
    qdiscs = capabilities.available_qdiscs()
    topo = lestopo.build()
    out: dict = {"shaper": args.shaper, "in_vm": bool(os.environ.get("NESTEDNET_IN_VM")),
                 "kernel": os.uname().release, "goodput": [], "rtt": []}
    try:
        for mbit in [float(x) for x in args.rates.split(",")]:
            rate = f"{int(mbit * 1000)}kbit"
            table = linksfile.parse(links(topo, rate, "1ms"))
            shaping.execute(shaping.plan_apply(table, args.shaper, qdiscs))
            got = lestopo.iperf3("C1", topo, seconds=args.seconds)["bps"]
            out["goodput"].append({"configured_mbit": mbit, "observed_mbit": round(got / 1e6, 3),
                                   "ratio": round(got / (mbit * 1e6), 3)})
            print(json.dumps(out["goodput"][-1]), file=sys.stderr)
        table = linksfile.parse(links(topo, "100Mbit", "0"))
        shaping.execute(shaping.plan_apply(table, args.shaper, qdiscs))
        base = None
        for ms in [float(x) for x in args.delays.split(",")]:
            shaping.set_link("R1-C1", "forward", {"delay_us": int(ms * 1000)})
            rtt = lestopo.ping("les-c1", topo.server_ip, count=args.pings, interval=0.05)
            if base is None:
                base = rtt.median_ms
            out["rtt"].append({"configured_ms": ms, "median_ms": round(rtt.median_ms, 3),
                               "min_ms": min(rtt.rtts_ms), "max_ms": max(rtt.rtts_ms),
                               "added_ms": round(rtt.median_ms - base, 3)})
            print(json.dumps(out["rtt"][-1]), file=sys.stderr)
        timings = []
        for i in range(args.repeats):
            start = time.perf_counter()
            shaping.set_link("R1-C2", "forward", {"rate_bps": (10 + i % 2) * 1_000_000,
                                                  "delay_us": 1000 * (1 + i % 2)})
            timings.append(time.perf_counter() - start)
        out["set_seconds"] = {"median": round(statistics.median(timings), 4),
                              "min": round(min(timings), 4), "max": round(max(timings), 4),
                              "repeats": len(timings)}
        out["head_of_line"] = []
        # The control run gives B the same 1 ms as A: whatever A's RTT still rises then is
        # the (emulated) CPU and the shared wire, not head-of-line blocking behind B's delay.
        cases = [(shaper, load, "200ms") for shaper in ("htb", "hfsc") for load in ("tcp", "udp")]
        cases += [(shaping.DEFAULT_SHAPER, load, "1ms") for load in ("tcp", "udp")]
        for shaper, load, b_delay in cases:
            for _ in range(args.hol_repeats):
                table = linksfile.parse(hol_links(topo, b_delay))
                shaping.execute(shaping.plan_apply(table, shaper, qdiscs))
                idle, loaded = lestopo.head_of_line(topo, load)
                row = {"shaper": shaper, "load": load, "b_delay": b_delay,
                       **lestopo.hol_summary(idle, loaded)}
                row["passes"] = bool(loaded.rtts_ms) and (
                    row["loaded_median_ms"] - row["idle_median_ms"] <= 2.0)
                out["head_of_line"].append(row)
                print(json.dumps(row), file=sys.stderr)
    finally:
        shaping.clear()
        lestopo.destroy()
    plot(out, Path(args.png))
    out["png"] = args.png
    print(json.dumps(out, indent=2))
    return 0


def plot(out: dict, path: Path) -> None:
    os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="les-mpl-"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    conf = [g["configured_mbit"] for g in out["goodput"]]
    left.plot(conf, conf, "--", color="grey", label="configured")
    left.plot(conf, [g["observed_mbit"] for g in out["goodput"]], "o-", label="iperf3 TCP")
    left.set(xlabel="configured rate (Mbit/s)", ylabel="goodput (Mbit/s)",
             title=f"Rate ({out['shaper']})")
    left.legend()
    conf = [r["configured_ms"] for r in out["rtt"]]
    right.plot(conf, conf, "--", color="grey", label="configured")
    right.plot(conf, [r["added_ms"] for r in out["rtt"]], "o-", label="ping RTT rise (median)")
    right.set(xlabel="configured one-way delay (ms)", ylabel="RTT added (ms)", title="Delay")
    right.legend()
    note = f"set: median {out['set_seconds']['median'] * 1000:.1f} ms" if "set_seconds" in out \
        else ""
    fig.suptitle(f"linkemu on {out['kernel']}{' (VM)' if out['in_vm'] else ''}  {note}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
