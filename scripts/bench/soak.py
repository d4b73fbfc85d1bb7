#!/usr/bin/env python3
"""Soak: a long run on a real lab, sampled over time (issue #32; `scripts/test soak`).

Creates the lab (nested, or --flat), generates a random-waypoint scenario with 1 s
steps (shaped links, rate only: this kernel has no sch_netem), plays it with
`nestednet run` as a user would, and every --sample seconds records the RSS of the CLI
(the CA runs in it), of the lab's GNAB agents (their sum and the largest), of
ovs-vswitchd and dockerd; the CLI's open fds; the flows on the main bridge against the
links the events say are up; the tc objects on the lab's ports; the events file's size;
and the host's load beside them. At the end it judges growth per hour and step lateness
(nestednet.bench.soak), writes soak.json, samples.json and soak.png into --out, deletes
the lab and exits 0 only if the soak passed.

    .venv/bin/python scripts/bench/soak.py [--nodes 48] [--iphys 4] [--minutes 120]
        [--flat] [--sample 30] [--lab soak] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from nestednet.adapters import netlink, openflow
from nestednet.bench import procmem
from nestednet.bench.common import machine_info
from nestednet.bench.soak import Sample, judge, plot, step_lateness
from nestednet.lab.nodes import Lab
from nestednet.lab.runs import EventTail
from nestednet.model.events import LINK_DOWN, LINK_UP, read_events

CLI = str(Path(sys.executable).parent / "nestednet")
ROOT = Path(__file__).resolve().parents[2]


def nn(*args: str, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise SystemExit(f"nestednet {' '.join(args)} failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done


def rss_mb(pid: int) -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def agent_pids(parents: list[int]) -> list[int]:
    procs = procmem.processes()
    return [p.pid for parent in parents for p in procmem.descendants(parent, procs)
            if "nestednet.agent" in cmdline(p.pid)]


def tc_objects(lab: str) -> int:
    count = 0
    with netlink.route() as ipr:
        for link in ipr.get_links():
            if not (link.get_attr("IFLA_IFNAME") or "").startswith(f"{lab}-"):
                continue
            index = link["index"]
            count += len(ipr.get_qdiscs(index)) + len(ipr.get_classes(index)) \
                + len(ipr.get_filters(index))
    return count


def dockerd_pid() -> int:
    with contextlib.suppress(OSError, ValueError):
        return int(Path("/var/run/docker.pid").read_text().strip())
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Writes soak.json (growth per hour against its bounds, late steps, passed), "
               "samples.json and soak.png into --out; exit 0 when it passed, 1 when not.")
    ap.add_argument("--nodes", type=int, default=48, help="nodes in the lab (default 48)")
    ap.add_argument("--iphys", type=int, default=4, help="iPHYs per node (default 4)")
    ap.add_argument("--minutes", type=float, default=120.0,
                    help="scenario length, minutes (default 120)")
    ap.add_argument("--step", type=float, default=1.0, help="step length, s (default 1)")
    ap.add_argument("--sample", type=float, default=30.0,
                    help="seconds between samples (default 30)")
    ap.add_argument("--flat", action="store_true",
                    help="a flat lab (one container per node) instead of nested")
    ap.add_argument("--lab", default="soak", help="the lab's name (default soak)")
    ap.add_argument("--out", type=Path,
                    default=Path("results") / f"soak-{time.strftime('%Y%m%d-%H%M%S')}",
                    help="directory for the results (default results/soak-TIME)")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    scenario = out / "scenario.json"
    nn("visibility", "generate", "--nodes", str(args.nodes), "--iphys", str(args.iphys),
       "--duration", str(args.minutes * 60), "--step", str(args.step), "--range", "150",
       "--length-unit", "m", "--link-model", str(ROOT / "scenarios/models/wifi-2g4.json"),
       "-o", str(scenario))
    if Path(f"/var/lib/nestednet/labs/{args.lab}").exists():
        nn("delete", "--lab", args.lab)
    created = time.monotonic()
    nn("create", "--lab", args.lab, "--nodes", str(args.nodes), "--iphys", str(args.iphys),
       *(["--flat"] if args.flat else []))
    create_s = time.monotonic() - created
    lab = Lab.open(args.lab)
    parents = [int(lab.parent(n).attrs["State"]["Pid"]) for n in lab.shape.node_numbers()]
    events = out / "events.jsonl"
    log = (out / "run.log").open("w")
    run = subprocess.Popen([CLI, "run", str(scenario), "--lab", args.lab, "--events",
                            str(events), "--shaping", "rate-only", "--json"],
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    tail, links, samples, start = EventTail(events), 0, [], time.monotonic()
    try:
        while run.poll() is None:
            for event in tail.read():
                links += {LINK_UP: 1, LINK_DOWN: -1}.get(event.event, 0)
            agents = [rss_mb(p) for p in agent_pids(parents)]
            values = {
                "cli_rss_mb": rss_mb(run.pid),
                "agents_rss_mb": sum(agents),
                "agent_max_rss_mb": max(agents, default=0.0),
                "ovs_rss_mb": sum(rss_mb(p) for p in procmem.host_ovs_pids()[:1]),
                "dockerd_rss_mb": rss_mb(dockerd_pid()),
                "cli_fds": len(os.listdir(f"/proc/{run.pid}/fd")),
                "flows": len(openflow.dump(f"{args.lab}-main")),
                "links": links,
                "tc_objects": tc_objects(args.lab),
                "events_mb": events.stat().st_size / 1e6 if events.exists() else 0.0,
                "load1": os.getloadavg()[0],
            }
            samples.append(Sample(time.monotonic() - start, values))
            print(json.dumps({"t": round(samples[-1].wall), **{k: round(v, 2) for k, v
                                                                in values.items()}}),
                  flush=True)
            deadline = time.monotonic() + args.sample
            while run.poll() is None and time.monotonic() < deadline:
                time.sleep(1)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(120)
        log.close()
        nn("delete", "--lab", args.lab)
    lateness = step_lateness(read_events(events), speed=1.0)
    verdict = judge(samples, lateness, step_s=args.step, speed=1.0,
                    events_bytes=events.stat().st_size)
    title = (f"soak: {args.nodes} x {args.iphys} {'flat' if args.flat else 'nested'}, "
             f"{args.minutes:g} min, {args.step:g} s steps")
    plot(samples, lateness, out / "soak.png", title)
    (out / "samples.json").write_text(json.dumps([{"t": s.wall, **s.values}
                                                  for s in samples]))
    report = {"title": title, "create_s": round(create_s, 1), "run_exit": run.returncode,
              "machine": machine_info(), **verdict.to_dict()}
    report["late_steps"] = report["late_steps"][:20]
    (out / "soak.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0 if verdict.passed and run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
