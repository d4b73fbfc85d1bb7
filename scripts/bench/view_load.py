#!/usr/bin/env python3
"""`nestednet view` during a large run: the page's update rate and the server's CPU.

Creates an N x M lab (flat by default: a 120-node nested lab is too heavy beside four
other engineers on this 2-core machine), generates a scenario, opens `nestednet view
--lab L --scenario S` in headless Chromium, and plays the scenario with `nestednet
run`. Reports the view server's CPU (its process and the ovs-ofctl reads it waits
for) idle before the run and during it, the page's redraws per second and how long
each took (the browser's own clock), the snapshots it received, and the machine's
load. Deletes the lab unless --keep. Prints JSON; one run per call.

    flock /tmp/nestednet-system.lock .venv/bin/python scripts/bench/view_load.py \
        --nodes 120 --iphys 4 [--nested] [--lab vwb] [--speed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "system"))

from browser import CLI, browser, console_errors, screenshot, view_server, wait_for  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process and of its waited-for children (ovs-ofctl)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def nn(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"nestednet {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=120)
    parser.add_argument("--iphys", type=int, default=4)
    parser.add_argument("--nested", action="store_true", help="nested nodes (default flat)")
    parser.add_argument("--lab", default="vwb")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--step", type=float, default=6.0)
    parser.add_argument("--range", type=float, default=150.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    out: dict = {"nodes": args.nodes, "iphys": args.iphys,
                 "design": "nested" if args.nested else "flat", "speed": args.speed,
                 "load_before": os.getloadavg()}
    work = Path(tempfile.mkdtemp(prefix="view-load-"))
    scenario = work / "scenario.json"
    nn("visibility", "generate", "--nodes", str(args.nodes), "--duration", str(args.duration),
       "--step", str(args.step), "--range", str(args.range), "--iphys", str(args.iphys),
       "-o", str(scenario))
    started = time.monotonic()
    nn("create", "-n", str(args.nodes), "-m", str(args.iphys), "--lab", args.lab,
       *(() if args.nested else ("--flat",)))
    out["create_s"] = round(time.monotonic() - started, 1)
    try:
        with view_server("--lab", args.lab, "--scenario", str(scenario)) as server, \
                browser() as chrome:
            pid = server["process"].pid
            chrome.get(server["url"])
            wait_for(chrome, "window.nnView && nnView.snapshots >= 1", 30, "first snapshot")
            c0, t0 = cpu_seconds(pid), time.monotonic()
            time.sleep(20)
            out["server_cpu_idle_pct"] = round(100 * (cpu_seconds(pid) - c0)
                                               / (time.monotonic() - t0), 1)
            renders0 = chrome.execute_script("return nnView.renders")
            snaps0 = chrome.execute_script("return nnView.snapshots")
            c0, t0 = cpu_seconds(pid), time.monotonic()
            load0 = os.getloadavg()
            run = nn("run", str(scenario), "--lab", args.lab, "--speed", str(args.speed),
                     "--json", check=False)
            wall = time.monotonic() - t0
            out["server_cpu_run_pct"] = round(100 * (cpu_seconds(pid) - c0) / wall, 1)
            out["run_wall_s"] = round(wall, 1)
            out["run_exit"] = run.returncode
            out["load_during"] = [load0, os.getloadavg()]
            page = chrome.execute_script(
                "return {renders: nnView.renders, snapshots: nnView.snapshots,"
                " times: nnView.renderTimes, ms: nnView.renderMs,"
                " nodes: nnView.nodesDrawn(), links: nnView.linksDrawn(),"
                " events: nnView.live.summary.totals.events}")
            renders = page["renders"] - renders0
            out["page"] = {
                "renders": renders, "snapshots": page["snapshots"] - snaps0,
                "renders_per_s": round(renders / wall, 2),
                "render_ms_p50": round(statistics.median(page["ms"][-renders:]), 1)
                if renders else None,
                "render_ms_max": round(max(page["ms"][-renders:]), 1) if renders else None,
                "nodes_drawn": page["nodes"], "events_seen": page["events"]}
            gaps = [b - a for a, b in zip(page["times"][-renders:], page["times"][-renders + 1:],
                                          strict=False)]
            if gaps:
                out["page"]["gap_ms_p50"] = round(statistics.median(gaps), 1)
                out["page"]["gap_ms_max"] = round(max(gaps), 1)
            out["console_errors"] = console_errors(chrome)
            out["screenshot"] = str(screenshot(chrome, f"load-{args.nodes}.png"))
            if run.returncode == 0:
                summary = json.loads(run.stdout)
                out["run_events"] = summary.get("events")
    finally:
        if not args.keep:
            nn("delete", "--lab", args.lab, check=False)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
