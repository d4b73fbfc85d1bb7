#!/usr/bin/env python3
"""CA benchmark: time from a step's start until all its flows are installed.

For 100 and 200 GNAB agents run as plain processes (no containers) against a real
Open vSwitch bridge: the CA, the agents, Algorithm 1 and `ovs-ofctl --bundle` are all
real; only the bridge has no ports, so the flows reference port numbers nothing is
plugged into (OVS accepts and stores them like any other). Agents and CA talk over
loopback TCP; the CA's thread is scheduled as in a run (nestednet.ca.server.CA_REALTIME,
else CA_NICE; the report's `ca_scheduling` says which). Each scenario step's
visibility comes from the random-waypoint generator; a step counts as settled when
every visible pair with a free iPHY on both sides is linked.

Prints JSON (median and p90 per agent count, plus the raw per-step values, and the
run's negotiation summary: requests, refusals by reason, request -> flows latency)
and, with --plot FILE, a PNG. `--pace S` plays a step every S seconds whether or not
the last one settled, as `nestednet run` does (S = step / speed), so requests can
cross step changes; `--repeats N` gives medians over N seeds. `--lab-nodes 12` adds
the containerised case: a real lab (Docker-in-Docker nodes, GNAB agents in their
children, the lab's main bridge), made and deleted by the benchmark, stepped through
the same way.

`--ports` plugs a real port into the bridge for every iPHY (a veth whose other end
waits in a namespace the benchmark makes), as a lab's main bridge has: on the userspace
datapath every pass of ovs-vswitchd's loop polls every port, which is what slows flow
installs at 250 x 4 (1,000 ports). `--sessions 1 8` compares OpenFlow session counts
(nestednet.ca.flows.SESSIONS), alternated within each repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from nestednet.adapters.ovsdb import Ovsdb
from nestednet.ca.assistant import CommunicationAssistant, EventLog
from nestednet.ca.flows import SESSIONS, MainBridgeInstaller
from nestednet.ca.player import Player
from nestednet.ca.server import CA_NICE, CA_REALTIME, ControlServer, listen
from nestednet.capabilities.nodes import ovs_datapath
from nestednet.model.events import negotiation_summary
from nestednet.model.link_table import InterNodeLinks
from nestednet.model.visibility import generate

BRIDGE = "nnbench-ca"
PORTS_NETNS = "nnbench-ca"
PORT_PREFIX = "nncab"


def run_agents(count: int, iphys: int, port: int) -> list[subprocess.Popen]:
    procs = []
    for i in range(1, count + 1):
        env = {**os.environ, "NESTEDNET_NODE": f"n{i}", "NESTEDNET_CA": f"127.0.0.1:{port}",
               "NESTEDNET_IPHYS": ",".join(f"iphy{j}=0.0.0.0" for j in range(1, iphys + 1)),
               "NESTEDNET_POLL_S": "0", "NESTEDNET_AGENT_STATE": ""}
        procs.append(subprocess.Popen([sys.executable, "-m", "nestednet.agent"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def plug_ports(count: int) -> None:
    """Ports 1..count on the bridge, each a veth whose other end is up in PORTS_NETNS;
    both ends without an IPv6 address (netlink.port_up), so nothing talks on them."""
    from nestednet.adapters import netlink

    netlink.create_netns(PORTS_NETNS)
    with netlink.route() as ipr, netlink.route(PORTS_NETNS) as inside, Ovsdb() as ovs:
        for k in range(1, count + 1):
            name = f"{PORT_PREFIX}{k}"
            netlink.add_veth(ipr, name, f"p{k}", b_in=PORTS_NETNS, offloads=True)
            netlink.port_up(ipr, name)
            netlink.port_up(inside, f"p{k}")
            ovs.add_port(BRIDGE, name, external_ids={"org.nestednet.bench": "ca"}, ofport=k)


def unplug_ports() -> None:
    """The namespace and with it every veth (both ends go with the one inside it)."""
    from nestednet.adapters import netlink

    if PORTS_NETNS in netlink.list_netns():
        netlink.remove_netns(PORTS_NETNS)


def measure(count: int, iphys: int, steps: int, seed: int, settle_timeout: float,
            range_: float = 250.0, pace: float = 0.0, sessions: int = SESSIONS) -> dict:
    """One run; ``pace`` > 0 plays a step every ``pace`` seconds whether or not the last
    one settled (as `nestednet run --speed 1/pace` does), else waits for each to settle."""
    scenario = generate(nodes=count, duration=steps, step=1, range_=range_,
                        model="random-waypoint", seed=seed, iphys=iphys)
    names = list(scenario.node_names)
    table = InterNodeLinks(scenario.iphy_inventory())
    server = ControlServer(listen("127.0.0.1", 0), nice=CA_NICE, realtime=CA_REALTIME)
    ports = {(n, f"iphy{j}"): k * iphys + j for k, n in enumerate(names)
             for j in range(1, iphys + 1)}
    installer = MainBridgeInstaller(BRIDGE, lambda node, iphy: ports[(node, iphy)],
                                    lambda a, b: (0xCA << 48) | (min(a, b) << 24) | max(a, b),
                                    sessions=sessions)
    ca = CommunicationAssistant(server, table, installer,
                                node_ids={n: i for i, n in enumerate(names, 1)},
                                control_ips=dict.fromkeys(names, "127.0.0.1"),
                                events=EventLog(None),
                                aliases={f"n{i}": n for i, n in enumerate(names, 1)})
    server.start(ca)
    server.call(installer.open, 60)  # before the first step, on the thread that uses it
    agents = run_agents(count, iphys, server.address[1])
    player = Player(scenario, server, ca)
    results = []
    try:
        deadline = time.monotonic() + 120
        while ca.hello_seen != set(names):
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(ca.hello_seen)}/{count} agents said HELLO")
            time.sleep(0.05)
        for index in range(len(scenario.steps)):
            player.apply_now(index)
            start = time.monotonic()
            while not (settled := server.call(lambda: not table.unlinked_feasible_pairs()
                                              and not ca.installing())):
                if time.monotonic() - start > (pace or settle_timeout):
                    break
                time.sleep(0.002)
            if pace:
                time.sleep(max(0.0, start + pace - time.monotonic()))
            progress = server.call(lambda: ca.progress)
            results.append({"step": index, "settled": settled,
                            "ms": round((progress.last_change - progress.started) * 1000, 2),
                            "links_up": progress.links_up, "links_down": progress.links_down,
                            "requests": progress.requests,
                            "visible_pairs": len(scenario.steps[index].visible),
                            "violations": len(table.violations())})
    finally:
        for proc in agents:
            proc.terminate()
        for proc in agents:
            proc.wait(timeout=10)
        server.stop()
    changed = [r["ms"] for r in results[1:] if r["links_up"] or r["links_down"]]
    return {"agents": count, "iphys": iphys, "range": range_, "pace_s": pace,
            "sessions": sessions, "ca_scheduling": server.scheduling,
            "load1_after": round(os.getloadavg()[0], 2),
            "negotiation": negotiation_summary(ca.events.records), "steps": results,
            "median_ms": round(statistics.median(changed), 2) if changed else None,
            "p90_ms": round(statistics.quantiles(changed, n=10)[-1], 2)
            if len(changed) >= 2 else None,
            "all_settled": all(r["settled"] for r in results),
            "violations": sum(r["violations"] for r in results)}


def summarise_repeats(runs: list[dict]) -> dict:
    """Medians over repeats of the negotiation figures; the repeats themselves are kept."""
    if len(runs) == 1:
        return runs[0]
    neg = [r["negotiation"] for r in runs]
    reasons = sorted({k for n in neg for k in n["refusals"]})

    def med(values: list) -> float | None:
        values = [v for v in values if v is not None]
        return round(statistics.median(values), 3) if values else None

    return {"agents": runs[0]["agents"], "iphys": runs[0]["iphys"], "range": runs[0]["range"],
            "pace_s": runs[0]["pace_s"], "sessions": runs[0]["sessions"],
            "ca_scheduling": runs[0]["ca_scheduling"],
            "repeats": len(runs),
            "median": {"requests": med([n["requests"] for n in neg]),
                       "refused": med([n["refused"] for n in neg]),
                       "refusals": {k: med([n["refusals"].get(k, 0) for n in neg])
                                    for k in reasons},
                       "stale_requests": med([n["stale_requests"] for n in neg]),
                       **{key: {q: med([n[key][q] for n in neg]) for q in ("p50", "p90", "p99")}
                          for key in ("link_up_latency_ms", "link_up_latency_at_ca_ms")},
                       "settle_median_ms": med([r["median_ms"] for r in runs]),
                       "settle_p90_ms": med([r["p90_ms"] for r in runs])},
            "all_settled": all(r["all_settled"] for r in runs),
            "violations": sum(r["violations"] for r in runs),
            "steps": runs[0]["steps"],
            "runs": [{k: v for k, v in r.items() if k != "steps"} for r in runs]}


def measure_lab(nodes: int, iphys: int, steps: int, seed: int, settle_timeout: float) -> dict:
    """The same per-step measurement on a real lab of ``nodes`` x ``iphys``."""
    from nestednet.ca.session import CaSession
    from nestednet.lab.create import CreateRequest, create
    from nestednet.lab.nodes import Lab
    from nestednet.lab.record import LabRecord
    from nestednet.lab.teardown import delete_lab

    lab_name = "cabench"
    if LabRecord(lab_name).exists():
        delete_lab(LabRecord(lab_name))
    scenario = generate(nodes=nodes, duration=steps, step=1, range_=250.0,
                        model="random-waypoint", seed=seed, iphys=iphys)
    create(CreateRequest(lab=lab_name, nodes=nodes, iphys=iphys))
    results = []
    try:
        lab = Lab.open(lab_name)
        with CaSession(scenario, lab, lab.record.path / "events.jsonl") as session:
            session.wait_for_hellos(120, threading.Event())
            for index in range(len(scenario.steps)):
                session.apply_step(index)
                start = time.monotonic()
                while not (settled := session.settled()):
                    if time.monotonic() - start > settle_timeout:
                        break
                    time.sleep(0.002)
                progress = session.server.call(lambda: session.ca.progress)
                results.append({"step": index, "settled": settled,
                                "ms": round((progress.last_change - progress.started) * 1000, 2),
                                "links_up": progress.links_up,
                                "links_down": progress.links_down,
                                "requests": progress.requests,
                                "visible_pairs": len(scenario.steps[index].visible),
                                "violations": len(session.table.violations())})
    finally:
        delete_lab(LabRecord(lab_name))
    changed = [r["ms"] for r in results[1:] if r["links_up"] or r["links_down"]]
    return {"agents": nodes, "containerised": True, "iphys": iphys, "steps": results,
            "median_ms": round(statistics.median(changed), 2) if changed else None,
            "p90_ms": round(statistics.quantiles(changed, n=10)[-1], 2)
            if len(changed) >= 2 else None,
            "all_settled": all(r["settled"] for r in results),
            "violations": sum(r["violations"] for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--iphys", type=int, default=4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--settle-timeout", type=float, default=10.0)
    parser.add_argument("--range", type=float, default=250.0, dest="range_",
                        help="radio range of the generated scenario (m)")
    parser.add_argument("--pace", type=float, default=0.0,
                        help="seconds between steps (0: wait for each step to settle)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per agent count; the report gives medians over them")
    parser.add_argument("--sessions", type=int, nargs="+", default=[SESSIONS],
                        help="OpenFlow sessions the CA spreads flows over (several: "
                             "compared, alternated within each repeat)")
    parser.add_argument("--ports", action="store_true",
                        help="plug a real port into the bridge for every iPHY")
    parser.add_argument("--lab-nodes", type=int, default=0,
                        help="also measure a real containerised lab of this many nodes")
    parser.add_argument("--plot", type=Path, help="write a PNG of per-step times here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (creates an OVS bridge)")
    if min(args.sessions) < 1:
        parser.error("--sessions: at least 1")
    unplug_ports()
    with Ovsdb() as ovs:
        ovs.del_bridge(BRIDGE)
        ovs.add_bridge(BRIDGE, datapath_type=ovs_datapath(),
                       external_ids={"org.nestednet.bench": "ca"})
    try:
        if args.ports:
            plug_ports(max(args.agents) * args.iphys)
        runs = []
        for n in args.agents:
            each: dict[int, list[dict]] = {k: [] for k in args.sessions}
            for r in range(args.repeats):
                for k in args.sessions:
                    each[k].append(measure(n, args.iphys, args.steps, args.seed + r,
                                           args.settle_timeout, args.range_, args.pace, k))
            runs += [summarise_repeats(done) for done in each.values()]
    finally:
        with Ovsdb() as ovs:
            ovs.del_bridge(BRIDGE)
        unplug_ports()
    if args.lab_nodes:
        runs.append(measure_lab(args.lab_nodes, args.iphys, args.steps, args.seed,
                                args.settle_timeout))
    report = {"benchmark": "ca", "cores": os.cpu_count(),
              "datapath": ovs_datapath(), "target_ms_100_nodes": 100,
              "bridge_ports": max(args.agents) * args.iphys if args.ports else 0,
              "runs": runs}
    print(json.dumps(report, indent=2))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for run in runs:
            ax.plot([r["step"] for r in run["steps"]], [r["ms"] for r in run["steps"]],
                    marker="o", label=f"{run['agents']} "
                    + ("containerised nodes" if run.get("containerised") else "agents"))
        ax.axhline(100, color="grey", linestyle="--", label="target (100 ms)")
        ax.set_xlabel("scenario step")
        ax.set_ylabel("step start -> last flow installed (ms)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
