#!/usr/bin/env python3
"""Measure the capacity model's unit costs on small labs, and check it on two hosts.

`costs`: nested labs of the given sizes (default 12x4, 48x4 and 12x8), each linked as
dense as a +Grid (two links per node: a ring over iPHYs 1-2 and one over 3-4, with a
stride of 3), and measured where the cost is this lab's alone:
- each node's memory: its parent's cgroup (used − inactive file), mean over nodes;
- host side per node: the parent's containerd shim (anonymous RSS); the host
  ovs-vswitchd's RSS before and after create, and after the links (shared by every lab
  on the machine, so other labs' churn shows here: the load is printed);
- idle CPU per node over --idle seconds: the parents' cgroups and shims, plus the host
  ovs-vswitchd's CPU rate above its rate before the lab.
Prints the runs and the derived `nestednet.model.capacity.Costs` as JSON.

`check`: two hosts emulated here (tests/system/emulated_hosts.py), a lab of --nodes x
--iphys spread over them and linked the same way; each emulated host's container cgroup
holds everything the lab put there (its engine, OVS, the parents), so its memory and
CPU growth is the lab's, free of other labs on the machine; the parents' own cgroups are
read in the same windows, to tell a node's share from the host side's. Prints the
model's prediction per host (from --costs, default the module's measured constants)
beside it.

    flock /tmp/nestednet-system.lock .venv/bin/python scripts/bench/capacity.py costs
    flock /tmp/nestednet-system.lock .venv/bin/python scripts/bench/capacity.py check \\
        --nodes 24 --iphys 4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nestednet.adapters import ksm
from nestednet.adapters.cgroups import cgroup_memory, directory_memory, memory_cgroup
from nestednet.adapters.ovsdb import HOST_VSWITCHD_PIDFILE
from nestednet.api.lab import Lab
from nestednet.bench.memory import drop_page_caches
from nestednet.bench.procmem import cgroup_cpu_s, cgroup_dir_cpu_s, cpu_cgroup, cpu_s
from nestednet.lab import engine
from nestednet.model import capacity as cap

MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def ovs_pid() -> int:
    return int(HOST_VSWITCHD_PIDFILE.read_text().strip())


def grid_like(lab: Lab, nodes: int, iphys: int) -> int:
    """Two links per node for iPHYs 1-4 (rings over iPHY 1->2 and 3->4), more for more
    iPHYs only if asked: what a +Grid gives each satellite."""
    made = 0
    for i in range(1, nodes + 1):
        lab.link(f"n{i}:iphy1", f"n{i % nodes + 1}:iphy2")
        made += 1
        if iphys >= 4:
            lab.link(f"n{i}:iphy3", f"n{(i + 2) % nodes + 1}:iphy4")
            made += 1
    return made


def parent_pids(lab: Lab) -> list[int]:
    handle = lab._handle  # the lab runtime's handle: parents' containers
    return [int(handle.parent(n).attrs["State"]["Pid"]) for n in handle.shape.node_numbers()]


def rate(sample, seconds: float) -> float:
    a = sample()
    time.sleep(seconds)
    return (sample() - a) / seconds


def window_rates(samplers: dict, seconds: float, windows: int) -> dict[str, list[float]]:
    """Each sampler's rate in ``windows`` back-to-back windows of ``seconds``, taken in the
    same windows for all: the median of them is the idle figure, as one window caught
    whatever tail the lab's creation left (issue #31's first check: -25 and -14 %)."""
    rates: dict[str, list[float]] = {name: [] for name in samplers}
    last = {name: sample() for name, sample in samplers.items()}
    for _ in range(windows):
        time.sleep(seconds)
        for name, sample in samplers.items():
            now = sample()
            rates[name].append((now - last[name]) / seconds)
            last[name] = now
    return rates


def held_node_mb(pids: list[int]) -> list[float]:
    """Each parent's `used` MB once its page cache is dropped (bench memory's measure)."""
    drop_page_caches(pids)
    return [cgroup_memory(p)["used"] / MB for p in pids]


def measure(name: str, nodes: int, iphys: int, idle: float, settle: float, log) -> dict:
    load = os.getloadavg()
    ovs = ovs_pid()
    ovs_before_cpu = rate(lambda: cpu_s(ovs), idle / 2)
    ovs_mb0 = proc_rss_mb(ovs)
    t = time.monotonic()
    with Lab.create(name, nodes=nodes, iphys=iphys) as lab:
        create_s = time.monotonic() - t
        time.sleep(settle)
        # Nodes offering their OVS to KSM shrink over its passes: measure them merged.
        offered = engine.ksm_offered()
        merged = offered and ksm.wait_passes()
        pids = parent_pids(lab)
        shims = [ppid(p) for p in pids]
        node_mb = held_node_mb(pids)
        shim_mb = [proc_rss_mb(s, "RssAnon") for s in shims]
        ovs_mb1 = proc_rss_mb(ovs)

        def lab_cpu() -> float:
            return sum(cgroup_cpu_s(p) for p in pids) + sum(cpu_s(s) for s in shims)

        ovs0, lab0 = cpu_s(ovs), lab_cpu()
        time.sleep(idle)
        ovs_rate, lab_rate = (cpu_s(ovs) - ovs0) / idle, (lab_cpu() - lab0) / idle
        t = time.monotonic()
        links = grid_like(lab, nodes, iphys)
        link_s = time.monotonic() - t
        time.sleep(settle)
        ovs_mb2 = proc_rss_mb(ovs)
        node_mb_linked = held_node_mb(pids)
    result = {
        "nodes": nodes, "iphys": iphys, "links": links, "create_s": round(create_s, 1),
        "ksm_offered": offered, "ksm_merged": merged,
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "node_mb_mean": round(statistics.mean(node_mb), 2),
        "node_mb_range": [round(min(node_mb), 1), round(max(node_mb), 1)],
        "node_mb_mean_linked": round(statistics.mean(node_mb_linked), 2),
        "shim_mb_mean": round(statistics.mean(shim_mb), 2),
        "host_ovs_mb": [round(ovs_mb0, 1), round(ovs_mb1, 1), round(ovs_mb2, 1)],
        "host_ovs_mb_per_port": round((ovs_mb1 - ovs_mb0) / (nodes * iphys), 3),
        "host_ovs_mb_per_link": round((ovs_mb2 - ovs_mb1) / links, 3),
        "lab_cores_per_node": round(lab_rate / nodes, 4),
        "ovs_cores_before": round(ovs_before_cpu, 4), "ovs_cores_idle_lab": round(ovs_rate, 4),
        "ovs_cores_per_node": round(max(0.0, ovs_rate - ovs_before_cpu) / nodes, 4),
        "link_add_s_per_link": round(link_s / links, 3),
    }
    log(json.dumps(result))
    return result


def derive(runs: list[dict]) -> cap.Costs:
    """Unit costs from the runs: iPHY cost from the two iPHY counts at the same node
    count, everything else from the largest run (most nodes: least noise per node)."""
    big = max(runs, key=lambda r: (r["nodes"], -r["iphys"]))
    pairs = [(a, b) for a in runs for b in runs
             if a["nodes"] == b["nodes"] and b["iphys"] > a["iphys"]]
    if pairs:
        a, b = pairs[0]
        iphy_mb = (b["node_mb_mean"] - a["node_mb_mean"]) / (b["iphys"] - a["iphys"])
    else:
        iphy_mb = 0.6
    sizes = ", ".join(f"{r['nodes']}x{r['iphys']}" for r in runs)
    loads = sorted({x for r in runs for x in (r["load_before"][0], r["load_after"][0])})
    return cap.Costs(
        node_mb=round(big["node_mb_mean"] - big["iphys"] * iphy_mb, 2),
        iphy_mb=round(iphy_mb, 3),
        host_node_mb=big["shim_mb_mean"],
        host_port_mb=max(0.0, big["host_ovs_mb_per_port"]),
        link_mb=max(0.0, big["host_ovs_mb_per_link"]),
        node_cores=round(big["lab_cores_per_node"] + big["ovs_cores_per_node"], 4),
        measured=(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                  f"{os.cpu_count()} cores, 1-min load {loads[0]}-{loads[-1]}, "
                  f"sizes {sizes}"))


STAT_FIELDS = ("rss", "cache", "active_file", "inactive_file", "shmem", "mapped_file")
CONTAINER_ID = re.compile(r"[0-9a-f]{64}")


def memory_breakdown(pid: int) -> dict[str, float]:
    """The cgroup of ``pid`` (all below it) by kind, MB: anonymous, page cache (active and
    inactive), kernel memory, and ``used`` as cgroup_memory counts it."""
    found = memory_cgroup(pid)
    if found is None:
        return {}
    base, v1 = found
    stat = dict(line.split() for line in (base / "memory.stat").read_text().splitlines())
    prefix = "total_" if v1 else ""
    out = {f: int(stat.get(prefix + f, 0)) / MB for f in STAT_FIELDS}
    kmem = base / "memory.kmem.usage_in_bytes"
    if kmem.exists():
        out["kmem"] = int(kmem.read_text()) / MB
    out["used"] = directory_memory(base, v1)["used"] / MB
    return out


def _container_dirs(base: Path) -> list[Path]:
    """The cgroup directories below ``base`` of the containers an engine there started:
    the first container on each way down (a parent, not its children)."""
    out = []
    for top, dirs, _files in os.walk(base):
        if CONTAINER_ID.fullmatch(Path(top).name) and Path(top) != base:
            dirs.clear()
            out.append(Path(top))
    return out


def container_cgroups(pid: int) -> dict[str, float]:
    """Containers started by the engine inside ``pid``'s cgroup (an emulated host's
    engine: hostd and the lab's parents), each with its `used` MB."""
    found = memory_cgroup(pid)
    if found is None:
        return {}
    out = {}
    for top in _container_dirs(found[0]):
        figures = directory_memory(top, found[1])
        if figures is not None:
            out[top.name] = figures["used"] / MB
    return out


def containers_cpu(pid: int, ids: set[str]) -> Callable[[], float]:
    """A sampler of the CPU seconds used so far by the containers ``ids`` started by the
    engine inside ``pid``'s cgroup (an emulated host's lab parents, children included),
    their directories in the CPU accounting hierarchy found once."""
    found = cpu_cgroup(pid)
    if found is None:
        return lambda: 0.0
    base, v1 = found
    dirs = [d for d in _container_dirs(base) if d.name in ids]
    return lambda: sum(cgroup_dir_cpu_s(d, v1) for d in dirs)


def emulated_hosts_module():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "system"))
    import emulated_hosts

    return emulated_hosts


def held_mb(pids: dict[str, int]) -> dict[str, float]:
    """Each emulated host's `used` MB once the kernel has dropped its page cache (as
    `nestednet bench memory` takes a node: the images it loaded and the nodes' data-root
    clones it wrote are cache, not what the lab holds)."""
    if not all(drop_page_caches(list(pids.values()))):
        print("warning: page cache not dropped (swap on, or cgroup not writable)",
              file=sys.stderr)
    return {n: cgroup_memory(p)["used"] / MB for n, p in pids.items()}


def fit_multihost(base: cap.Costs, rows: list[dict], iphys: int, runs: str) -> cap.Costs:
    """Several hosts' unit costs from check runs' per-host rows: a node's own cost from
    its parent's cgroup, the host side per node from what grew outside the parents, its
    iPHYs' host ports included (`host_port_mb` 0: the runs have one iPHY count, and the
    one-host per-port figure was fitted on an mlocked OVS, more than these hosts' ports
    cost); idle CPU the same way: a node's from its parent's cgroup, the host side as a
    line over the hosts' node counts (`cap.cores_line`: a per-host share when the rows
    span two sizes; rows from before the split give the whole as that line); the per-iPHY
    and per-link costs from ``base``."""
    nodes = sum(r["nodes"] for r in rows)
    node_mb = sum(r["parents_mb_mean"] * r["nodes"] for r in rows) / nodes
    outside = sum(r["outside_parents_mb"] for r in rows)
    links = sum(r["links_share"] for r in rows)
    if all("parents_cores" in r for r in rows):
        host_lab_cores, node_cores = cap.cores_split([
            (r["nodes"], r["parents_cores"], r["outside_parents_cores"]) for r in rows])
    else:
        host_lab_cores, node_cores = cap.cores_line([(r["nodes"], r["measured_cores"])
                                                     for r in rows])
    return cap.Costs(
        node_mb=round(node_mb - iphys * base.iphy_mb, 2), iphy_mb=base.iphy_mb,
        host_node_mb=round((outside - links * base.link_mb) / nodes, 2),
        host_port_mb=0.0, link_mb=base.link_mb,
        node_cores=round(node_cores, 4), host_base_mb=base.host_base_mb,
        host_base_cores=base.host_base_cores, host_lab_cores=round(host_lab_cores, 4),
        measured=(f"fitted {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                  f"{os.cpu_count()} cores, scripts/bench/capacity.py {runs} --iphys {iphys} "
                  f"(two emulated hosts); per iPHY and link from the one-host costs, ports "
                  f"in host_node_mb"))


def write_fit(path: str, model: cap.CostModel, fitted: cap.Costs) -> None:
    Path(path).write_text(json.dumps(
        {"costs": model.one_host.as_dict(), "multihost_costs": fitted.as_dict()},
        indent=2) + "\n")


def fit_runs(args) -> dict:
    """Several hosts' costs from earlier `check` outputs (several sizes: the per-host
    share of idle CPU can then be told from the per-node one)."""
    model = load_model(args.costs)
    docs = [json.loads(Path(f).read_text()) for f in args.runs]
    iphys = {doc["iphys"] for doc in docs}
    if len(iphys) != 1:
        raise SystemExit(f"the runs have different iPHY counts: {sorted(iphys)}")
    rows = [row for doc in docs for row in doc["hosts"]]
    sizes = "+".join(str(doc["nodes"]) for doc in docs)
    fitted = fit_multihost(model.one_host, rows, iphys.pop(), f"check --nodes {sizes}")
    write_fit(args.out, model, fitted)
    return {"runs": args.runs, "fitted_multihost_costs": fitted.as_dict()}


def load_model(path: str | None) -> cap.CostModel:
    return (cap.CostModel.from_dict(json.loads(Path(path).read_text()), cap.MODEL)
            if path else cap.MODEL)


def check(args, log) -> dict:
    """Model vs a lab spread over two emulated hosts (several hosts' costs)."""
    model = load_model(args.costs)
    costs = model.multi_host
    eh = emulated_hosts_module()
    t = time.monotonic()
    hosts = eh.start(args.prefix, subnet=args.subnet)
    log(f"emulated hosts up in {time.monotonic() - t:.0f} s")
    try:
        pids = {n: hosts.local[n].pid for n in hosts.names}
        time.sleep(args.settle)
        mem0 = held_mb(pids)
        kinds0 = {n: memory_breakdown(p) for n, p in pids.items()}
        before = {n: set(container_cgroups(p)) for n, p in pids.items()}
        samplers = {n: (lambda p=p: cgroup_cpu_s(p)) for n, p in pids.items()}
        before_windows = window_rates(samplers, args.idle, args.windows)
        cpu_before = {n: statistics.median(r) for n, r in before_windows.items()}
        load = os.getloadavg()
        t = time.monotonic()
        with Lab.create(args.lab, nodes=args.nodes, iphys=args.iphys,
                        hosts=hosts.hostset) as lab:
            create_s = time.monotonic() - t
            links = grid_like(lab, args.nodes, args.iphys)
            placed = {n: 0 for n in hosts.names}
            for host in lab.status()["placement"].values():
                placed[host] += 1
            time.sleep(args.settle)
            mem1 = held_mb(pids)
            kinds1 = {n: memory_breakdown(p) for n, p in pids.items()}
            # The lab's parents are the containers that were not there before it.
            now = {n: container_cgroups(p) for n, p in pids.items()}
            parents = {n: [mb for cid, mb in now[n].items() if cid not in before[n]]
                       for n in pids}
            # The parents' own CPU in the same windows: a node's idle cost measured on
            # the nodes themselves, not as the slope between runs of a few millicores.
            lab_windows = window_rates(
                {**samplers, **{(n, "parents"): containers_cpu(p, set(now[n]) - before[n])
                                for n, p in pids.items()}}, args.idle, args.windows)
            cpu = {n: statistics.median(r) for n, r in lab_windows.items()}
        rows = []
        for n in hosts.names:
            share = placed[n] / args.nodes
            predicted = cap.lab_usage(costs, placed[n], args.iphys, links * share)
            measured_mb = mem1[n] - mem0[n]
            measured_cores = cpu[n] - cpu_before[n]
            rows.append({
                "host": n, "nodes": placed[n], "links_share": round(links * share, 1),
                "measured_mb": round(measured_mb, 1),
                # Where the growth is: the parents' own cgroups (what the model's node
                # costs were fitted on, one host) and, by kind, the whole emulated host.
                "parents": len(parents[n]),
                "parents_mb_mean": (round(statistics.mean(parents[n]), 1)
                                    if parents[n] else None),
                "outside_parents_mb": round(measured_mb - sum(parents[n]), 1),
                "growth_by_kind_mb": {k: round(kinds1[n][k] - kinds0[n].get(k, 0.0), 1)
                                      for k in kinds1[n]},
                "predicted_mb": round(predicted.memory_mb, 1),
                "memory_error": round(cap.relative_error(predicted.memory_mb, measured_mb), 3),
                "measured_cores": round(measured_cores, 4),
                "parents_cores": round(cpu[(n, "parents")], 4),
                "outside_parents_cores": round(measured_cores - cpu[(n, "parents")], 4),
                "cores_windows_before": [round(x, 4) for x in before_windows[n]],
                "cores_windows_lab": [round(x, 4) for x in lab_windows[n]],
                "parents_cores_windows": [round(x, 4) for x in lab_windows[(n, "parents")]],
                "predicted_cores": round(predicted.cores, 4),
                "cpu_error": (round(cap.relative_error(predicted.cores, measured_cores), 3)
                              if measured_cores > 0 else None)})
        out = {"nodes": args.nodes, "iphys": args.iphys, "links": links,
                "create_s": round(create_s, 1), "load_before": [round(x, 2) for x in load],
                "load_after": [round(x, 2) for x in os.getloadavg()],
                "costs": costs.as_dict(), "hosts": rows}
        if args.fit:
            fitted = fit_multihost(model.one_host, rows, args.iphys,
                                   f"check --nodes {args.nodes}")
            write_fit(args.fit, model, fitted)
            out["fitted_multihost_costs"] = fitted.as_dict()
        return out
    finally:
        hosts.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("costs", help="measure unit costs on one host")
    c.add_argument("--sizes", default="12x4,48x4,12x8")
    k = sub.add_parser("check", help="model vs a lab over two emulated hosts")
    k.add_argument("--nodes", type=int, default=24)
    k.add_argument("--iphys", type=int, default=4)
    k.add_argument("--costs", help="a JSON file from `costs` or `check --fit` (default: "
                   "the model's constants); the prediction uses its several-hosts costs")
    k.add_argument("--fit", metavar="OUT", help="also fit several hosts' costs on this run "
                   "and write them, with the one-host costs used, to OUT (for --costs)")
    k.add_argument("--windows", type=int, default=3,
                   help="CPU windows of --idle seconds before and with the lab; each host's "
                        "figure is their median")
    k.add_argument("--prefix", default="cap31-emu")
    k.add_argument("--subnet", default="10.232.0.0/24")
    f = sub.add_parser("fit", help="several hosts' costs from earlier `check` outputs")
    f.add_argument("runs", nargs="+", metavar="CHECK_JSON")
    f.add_argument("--out", required=True, help="write the costs here (for check --costs)")
    f.add_argument("--costs", help="one-host costs to take per iPHY and link from "
                   "(default: the model's constants)")
    for p, settle in ((c, 5.0), (k, 120.0)):
        p.add_argument("--idle", type=float, default=20.0, help="CPU window, seconds")
        # Two hosts' creation leaves a tail: 30 s after the links a 12-node lab's idle
        # CPU read 2.5-3 times what it settled to (docs/capacity.md).
        p.add_argument("--settle", type=float, default=settle,
                       help="seconds to wait before measuring, before the lab and after "
                            "its links")
        p.add_argument("--lab", default="capm")
    args = parser.parse_args()
    if args.what == "check" and args.windows < 1:
        parser.error("--windows: at least 1")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if args.what == "fit":
        print(json.dumps(fit_runs(args), indent=2))
        return 0
    if args.what == "costs":
        runs = []
        for size in args.sizes.split(","):
            nodes, iphys = (int(x) for x in size.split("x"))
            runs.append(measure(args.lab, nodes, iphys, args.idle, args.settle, log))
        print(json.dumps({"runs": runs, "costs": derive(runs).as_dict()}, indent=2))
    else:
        print(json.dumps(check(args, log), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
