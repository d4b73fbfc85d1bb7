#!/usr/bin/env python3
"""A large nested lab end to end, as a user runs it (issue #13's 120-node figures).

Creates N x M nested nodes with `nestednet create --timings`, reads every node's
memory, the machine's busy share in three 30 s windows while the lab sits idle, and
every GNAB agent's own view of its iPHYs (its state file, read through the host's
/proc: an iPHY its poll calls down is one it cannot use); then plays a generated
scenario with `nestednet run --json` and reports the negotiation summary (request ->
flows latency), the event counts, the agents' view again, and deletes the lab.
The machine's own speed (nestednet.bench.common.machine_speed) is measured before the
create and after the delete: on a shared VM it drifts, and the create's time with it.
Prints JSON. One run per call: repeat it for medians (the machine is shared).

    .venv/bin/python scripts/bench/big_run.py [--nodes 120] [--iphys 4] [--lab big]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nestednet.bench.common import cpu_busy_percent, machine_speed
from nestednet.bench.memory import whole_nodes_mb
from nestednet.errors import EnvironmentProblem
from nestednet.lab import designs
from nestednet.lab.nodes import Lab
from nestednet.lab.runs import RUNS_DIR

CLI = str(Path(sys.executable).parent / "nestednet")


def nn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, check=False)


def agents_view(lab: Lab, keep: Path | None) -> dict:
    """How many agents call some (or all) of their iPHYs down, and which GNABs are not
    running at all (each with its state; ``keep`` receives a copy of that node's inner
    engine logs, since the lab is deleted at the end)."""
    some, none_up, down, dead = [], 0, 0, []
    design = designs.of(lab.meta)
    for number in lab.shape.node_numbers():
        try:
            pid = design.gnab_pid(lab, number)
        except EnvironmentProblem as exc:
            dead.append(f"n{number}: {exc}")
            if keep is not None:
                shutil.copytree(lab.state_dir(number) / "log", keep / f"n{number}-log",
                                dirs_exist_ok=True)
            continue
        try:
            state = json.loads(Path(f"/proc/{pid}/root/run/nestednet/agent.json").read_text())
        except OSError:
            continue
        gone = sorted(name for name, up in state["iphys"].items() if not up)
        if gone:
            some.append(f"n{number}: {','.join(gone)}")
            down += len(gone)
        none_up += not any(state["iphys"].values())
    return {"agents_with_iphys_down": len(some), "iphys_down": down,
            "agents_with_none_up": none_up, "examples": some[:8],
            "gnabs_not_running": dead}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=120)
    parser.add_argument("--iphys", type=int, default=4)
    parser.add_argument("--lab", default="big")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep-logs", type=Path, default=None,
                        help="copy the inner engine logs of any node whose GNAB is not "
                             "running into this directory")
    args = parser.parse_args()
    out: dict = {"nodes": args.nodes, "iphys": args.iphys,
                 "load_before": Path("/proc/loadavg").read_text().split()[:3]}
    with tempfile.TemporaryDirectory(prefix="nestednet-big-") as scratch:
        run_lab(args, out, f"{scratch}/scenario.json")


def run_lab(args: argparse.Namespace, out: dict, scenario: str) -> None:
    done = nn("visibility", "generate", "--nodes", str(args.nodes), "--seed", str(args.seed),
              "-o", scenario)
    if done.returncode:
        sys.exit(done.stderr)
    out["machine_speed_cpu_s"] = {"before": machine_speed()}
    start = time.monotonic()
    done = nn("create", "--lab", args.lab, "--nodes", str(args.nodes), "--iphys",
              str(args.iphys), "--timings")
    out["create_wall_s"] = round(time.monotonic() - start, 1)
    if done.returncode:
        sys.exit(done.stderr)
    said = re.search(r"created in ([0-9.]+) s", done.stdout)
    out["create_s"] = float(said.group(1)) if said else None
    out["create_phases"] = done.stdout[done.stdout.find("phase"):].strip()
    try:
        lab = Lab.open(args.lab)
        memory = whole_nodes_mb(lab)
        out["memory_mb_per_node"] = {"median": statistics.median(memory),
                                     "min": min(memory), "max": max(memory)}
        out["idle_busy_percent"] = [cpu_busy_percent(30) for _ in range(3)]
        out["agents_idle"] = agents_view(lab, args.keep_logs)
        before = set(RUNS_DIR.glob(f"{args.lab}-*")) if RUNS_DIR.exists() else set()
        started_run = time.monotonic()
        done = nn("run", scenario, "--lab", args.lab, "--json")
        out["run_exit"] = done.returncode
        out["run_wall_s"] = round(time.monotonic() - started_run, 1)
        if done.returncode:
            out["run_stderr"] = done.stderr[-2000:]
        if done.returncode == 0:
            summary = json.loads(done.stdout)
            out["negotiation"] = summary["negotiation"]
        new = sorted(set(RUNS_DIR.glob(f"{args.lab}-*")) - before)
        if new:
            kinds = collections.Counter(json.loads(line).get("event")
                                        for line in (new[-1] / "events.jsonl").open())
            out["events"] = dict(kinds)
        out["agents_after_run"] = agents_view(lab, args.keep_logs)
    finally:
        start = time.monotonic()
        nn("delete", "--lab", args.lab)
        out["delete_s"] = round(time.monotonic() - start, 1)
        out["machine_speed_cpu_s"]["after"] = machine_speed()
        print(json.dumps(out, indent=1), flush=True)


if __name__ == "__main__":
    main()
