#!/usr/bin/env python3
"""What babel costs as a lab grows (issue #31: "measure how babel's hello traffic and
CPU grow with nodes"), on a topology that does not change.

For each size: `create --routing babel`, then `run` of a static scenario (a ring, plus
a chord from each node to the one opposite, so 3 links a node), wait ``--settle``
seconds for babel to converge, then over ``--window`` seconds measure
  * the CPU time of the lab's babeld processes (every component runs one), as cores;
  * the host's busy share;
  * route changes in the GNABs (`run`'s route events): none are expected, nothing moves;
  * packets through the lab's main bridge (hellos, IHUs and updates between nodes: no
    other traffic runs), from the bridge ports' counters.
Then the lab is deleted. Prints JSON. One run per call; hold the system lock.

    flock /tmp/nestednet-system.lock .venv/bin/python scripts/bench/babel_cost.py \\
        --nodes 12,24,48 [--iphys 4] [--settle 40] [--window 30] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nestednet.bench import procmem
from nestednet.bench.common import cpu_busy_percent
from nestednet.lab.nodes import Lab

CLI = str(Path(sys.executable).parent / "nestednet")


def nn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, check=False)


def scenario(nodes: int, iphys: int, duration: float) -> dict:
    names = [f"n{i}" for i in range(1, nodes + 1)]
    pairs = {tuple(sorted((names[i], names[(i + 1) % nodes]))) for i in range(nodes)}
    pairs |= {tuple(sorted((names[i], names[(i + nodes // 2) % nodes])))
              for i in range(nodes) if nodes >= 4}
    return {"format": "nestednet-scenario/1", "name": f"babel-cost-{nodes}",
            "duration": duration, "iphys": iphys,
            "nodes": [{"name": n} for n in names],
            "steps": [{"time": 0, "visible": [list(p) for p in sorted(pairs)]}]}


def lab_babelds(lab: str) -> list[int]:
    """Host pids of the babeld processes below the lab's parents."""
    handle = Lab.open(lab)
    procs = procmem.processes()
    return [p.pid for n in handle.shape.node_numbers()
            for p in procmem.matching(procmem.descendants(
                int(handle.parent(n).attrs["State"]["Pid"]), procs), ("babeld",))]


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += procmem.cpu_s(pid)
    return total


def bridge_packets(lab: str) -> int:
    """Packets received on the lab's main bridge ports, summed (from the kernel side of
    each iPHY's host veth)."""
    total = 0
    for port in Path("/sys/class/net").iterdir():
        if port.name.startswith(f"{lab}-") and (port / "statistics/rx_packets").exists():
            total += int((port / "statistics/rx_packets").read_text())
    return total


def measure(nodes: int, iphys: int, settle: float, window: float, lab: str,
            keep: Path | None = None) -> dict:
    out: dict = {"nodes": nodes, "iphys": iphys,
                 "load_before": Path("/proc/loadavg").read_text().split()[:3]}
    nn("delete", "--lab", lab)
    done = nn("create", "--lab", lab, "--nodes", str(nodes), "--iphys", str(iphys),
              "--routing", "babel")
    if done.returncode:
        out["error"] = done.stderr[-1500:]
        return out
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "scenario.json"
            path.write_text(json.dumps(scenario(nodes, iphys, settle + window + 10)))
            events = Path(tmp) / "events.jsonl"
            running = subprocess.Popen([CLI, "run", str(path), "--lab", lab, "--json",
                                        "--events", str(events)],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
            time.sleep(settle)
            pids = lab_babelds(lab)
            out["babelds"] = len(pids)
            cpu0, packets0, start = cpu_seconds(pids), bridge_packets(lab), time.time()
            out["host_busy_percent"] = cpu_busy_percent(window)
            cpu1, packets1, end = cpu_seconds(pids), bridge_packets(lab), time.time()
            _, err = running.communicate(timeout=600)
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(events, keep / f"events-{nodes}.jsonl")
            out["run_exit"] = running.returncode
            if running.returncode:
                out["run_stderr"] = err[-1500:]
            routes = links = 0
            for line in events.open():
                event = json.loads(line)
                if event["event"] == "route" and start <= event["wall_time"] <= end:
                    routes += 1
                links += event["event"] == "link_up"
        span = end - start
        out.update({
            "links_up": links,
            "babeld_cores": round((cpu1 - cpu0) / span, 4),
            "babeld_percent_each": round(100 * (cpu1 - cpu0) / span / max(len(pids), 1), 3),
            "bridge_packets_per_s": round((packets1 - packets0) / span, 1),
            "route_changes_per_s": round(routes / span, 2),
        })
    finally:
        nn("delete", "--lab", lab)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="12,24,48")
    parser.add_argument("--iphys", type=int, default=4)
    parser.add_argument("--settle", type=float, default=40.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--lab", default="bbl")
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy each run's events file into this directory")
    args = parser.parse_args()
    results = [measure(int(n), args.iphys, args.settle, args.window, args.lab,
                       args.keep)
               for n in args.nodes.split(",")]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
