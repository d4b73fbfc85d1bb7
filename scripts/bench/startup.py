#!/usr/bin/env python3
"""Lab start-up benchmark: create time (median of N runs), per-phase breakdown, memory.

Prints JSON. For each size (default 2, 6 and 12 nodes x 4 iPHYs) it creates the lab
`tb` RUNS times, keeps the run with the median create time, reads every node's
memory (its parent's cgroup, which covers the inner engine, the internal OVS and
all children) after a short settle, and deletes the lab. The machine's load average
is reported alongside: on a shared host it explains much of the spread, so the CPU
seconds the create consumed (this process and its children, the host engine and OVS,
and every node's cgroup) are reported too; total_per_core is the wall time the
create would need on an otherwise idle machine if it kept every core busy.

    .venv/bin/python scripts/bench/startup.py [--sizes 2,6,12] [--iphys 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

from nestednet.adapters.cgroups import cgroup_memory
from nestednet.bench.procmem import cgroup_cpu_s
from nestednet.lab import create, teardown
from nestednet.lab.nodes import Lab
from nestednet.lab.record import LabRecord

MB = 1024 * 1024


def process_breakdown(parent_pid: int) -> dict[str, float]:
    """Anonymous resident memory (MB) of the processes under one parent, by program."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    anon: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry)
        names[pid] = fields["Name"].strip()
        anon[pid] = int(fields.get("RssAnon", "0 kB").split()[0]) * 1024
        children.setdefault(int(fields["PPid"]), []).append(pid)
    totals: dict[str, float] = {}
    stack = [parent_pid]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        totals[names.get(pid, "?")] = totals.get(names.get(pid, "?"), 0) + anon.get(pid, 0) / MB
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


HOST_DAEMONS = ("dockerd", "containerd", "ovs-vswitchd", "ovsdb-server")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def host_daemon_cpu_s() -> float:
    """CPU seconds (own + reaped children) of the host-level engine and OVS daemons,
    and the shims of host containers: processes in the root cgroup only, so what runs
    inside node parents (counted from their cgroups) is not counted twice."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cgroup = Path(f"/proc/{entry}/cgroup").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        if not (name in HOST_DAEMONS or name.startswith("containerd-shim")):
            continue
        paths = {line.split(":", 2)[1]: line.split(":", 2)[2] for line in cgroup.splitlines()}
        cpu_path = next((v for k, v in paths.items() if "cpuacct" in k.split(",")),
                        paths.get("", "/"))
        if cpu_path not in ("/", "/init.scope"):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / CLK_TCK


def self_cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def one_run(lab: str, nodes: int, iphys: int, jobs: int, settle: float) -> dict:
    record = LabRecord(lab)
    if record.exists():
        teardown.delete_lab(record)
    load = os.getloadavg()[0]
    daemons0, self0 = host_daemon_cpu_s(), self_cpu_s()
    started = time.monotonic()
    meta = create.create(create.CreateRequest(lab, nodes, iphys, jobs=jobs))
    elapsed = time.monotonic() - started
    opened = Lab.open(lab)
    pids = [int(opened.parent(n).attrs["State"]["Pid"]) for n in opened.shape.node_numbers()]
    cpu = {"nestednet_process": self_cpu_s() - self0,
           "host_daemons": host_daemon_cpu_s() - daemons0,
           "inside_nodes": sum(cgroup_cpu_s(pid) for pid in pids)}
    cpu = {k: round(v, 2) for k, v in cpu.items()}
    cpu["total"] = round(sum(cpu.values()), 2)
    cpu["total_per_core"] = round(cpu["total"] / (os.cpu_count() or 1), 2)
    time.sleep(settle)
    used, anon, breakdown = [], [], {}
    for node in opened.shape.node_numbers():
        pid = int(opened.parent(node).attrs["State"]["Pid"])
        memory = cgroup_memory(pid)
        if memory:
            used.append(memory["used"] / MB)
            anon.append(memory["anon"] / MB)
        if node == 1:
            breakdown = process_breakdown(pid)
    teardown.delete_lab(LabRecord(lab))
    return {"create_s": round(elapsed, 2), "load_avg_1m_before": round(load, 2),
            "timings": meta["timings"], "cpu_s": cpu,
            "memory_per_node_mb": {"mean_used": round(statistics.mean(used), 1),
                                   "max_used": round(max(used), 1),
                                   "mean_anon": round(statistics.mean(anon), 1)},
            "node1_processes_anon_mb": breakdown}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,6,12")
    parser.add_argument("--iphys", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=create.DEFAULT_JOBS)
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds to wait before reading memory")
    parser.add_argument("--lab", default="tb")
    args = parser.parse_args()
    results = []
    for nodes in (int(x) for x in args.sizes.split(",")):
        runs = [one_run(args.lab, nodes, args.iphys, args.jobs, args.settle)
                for _ in range(args.runs)]
        median = sorted(runs, key=lambda r: r["create_s"])[len(runs) // 2]
        results.append({"nodes": nodes, "iphys": args.iphys, "jobs": args.jobs,
                        "create_s_runs": [r["create_s"] for r in runs],
                        "create_s_median": median["create_s"], "median_run": median})
        print(f"{nodes} nodes: {[r['create_s'] for r in runs]}", file=sys.stderr)
    print(json.dumps({"cpus": os.cpu_count(), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
