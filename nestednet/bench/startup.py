"""Experiment `startup` (paper Table IV): lab creation time vs node count, both designs.

Each lab is created (timed by create itself, including its per-phase breakdown),
left idle for a moment while the host's CPU use is sampled, its whole-node memory
read (median over nodes), and deleted again; growth per node is the least-squares
slope of time over nodes. `--nodes` takes the counts up to the paper's "up to 120":
memory per node should stay flat and the idle lab's CPU small as the count grows.
"""

from __future__ import annotations

from pathlib import Path

from nestednet.bench import memory, paper
from nestednet.bench.common import Bench, LabSpec, cell, cpu_busy_percent, pyplot, save
from nestednet.bench.stats import linear_fit, summary


def params(quick: bool, nodes: tuple[int, ...] = (), repeats: int | None = None) -> dict:
    """The mode's node counts and creations per point, unless the command line gave its own
    (`--nodes 12,48,120`, `--repeats 3`)."""
    p = ({"nodes": [2, 4, 6], "iphys": 4, "repeats": 1, "idle_s": 3} if quick
         else {"nodes": [6, 12, 16, 24], "iphys": 4, "repeats": 1, "idle_s": 10})
    if nodes:
        p["nodes"] = sorted(set(nodes))
    if repeats is not None:
        p["repeats"] = repeats
    return p


def run(bench: Bench) -> dict:
    p = params(bench.quick, bench.nodes, bench.repeats)
    result: dict = {"experiment": "startup", "params": p, "paper": paper.PAPER["startup"],
                    "points": [], "notes": []}
    if not bench.quick:
        result["notes"].append("one creation per point (the paper's counts); 24 nested nodes "
                               "take minutes on 2 cores")
    for n in p["nodes"]:
        for kind in ("nested", "flat"):
            times, timings, busy, node_mb = [], [], [], []
            for _ in range(p["repeats"]):
                bench.log(f"startup: {kind} {n}x{p['iphys']}")
                lab, meta = bench.create(LabSpec(kind, n, p["iphys"]))
                try:
                    busy.append(cpu_busy_percent(p["idle_s"]))
                    node_mb += memory.whole_nodes_mb(lab)
                finally:
                    bench.release(lab)
                times.append(meta["create_s"])
                timings.append(meta.get("timings", {}))
            result["points"].append({"kind": kind, "nodes": n, "create_s": times,
                                     "summary": summary(times), "timings": timings,
                                     "idle_cpu_busy_pct": busy,
                                     "node_mb": summary(node_mb)})
    result["growth_s_per_node"] = {}
    for kind in ("nested", "flat"):
        pts = [pt for pt in result["points"] if pt["kind"] == kind]
        fit = linear_fit([pt["nodes"] for pt in pts], [pt["summary"]["median"] for pt in pts])
        result["growth_s_per_node"][kind] = fit["slope"]
        result.setdefault("fits", {})[kind] = fit
    return result


def markdown(result: dict) -> str:
    p = result["params"]
    ref = result["paper"]
    lines = ["## Creation time vs node count (paper Table IV)", "",
             f"Nodes x (GNAB + {p['iphys']} iPHYs), {p['repeats']} creation(s) per point, "
             "median seconds.", "",
             "Idle CPU: the host's busy share (all cores) while the new lab sat idle; MB: "
             "whole node (its cgroup), median over nodes.", "",
             "| nodes | nested s | flat s | nested/flat | nested idle CPU % | flat idle CPU % "
             "| nested MB/node | flat MB/node |", "|---|---|---|---|---|---|---|---|"]
    for n in p["nodes"]:
        pts = {pt["kind"]: pt for pt in result["points"] if pt["nodes"] == n}
        row = {kind: pt["summary"]["median"] for kind, pt in pts.items()}
        ratio = (row["nested"] / row["flat"]) if row.get("nested") and row.get("flat") else None
        lines.append(f"| {n} | {cell(row.get('nested'))} | {cell(row.get('flat'))} | "
                     f"{cell(ratio)} | {_busy(pts.get('nested'))} | {_busy(pts.get('flat'))} "
                     f"| {_node_mb(pts.get('nested'))} | {_node_mb(pts.get('flat'))} |")
    g = result["growth_s_per_node"]
    lines += ["", f"Growth per node: nested {cell(g.get('nested'))} s, flat "
              f"{cell(g.get('flat'))} s.", verdict(result),
              f"Paper ({ref['source']}): " + "; ".join(
                  f"{row['nodes']} x {row['iphys']}: NestedNet "
                  f"{cell(paper.value(row['nested_s']), 0)} s, Containernet "
                  f"{cell(paper.value(row['flat_s']), 0)} s" for row in ref["rows"]) + ".",
              *(f"- {n}" for n in result["notes"]), ""]
    return "\n".join(lines)


def _busy(point: dict | None) -> str:
    values = (point or {}).get("idle_cpu_busy_pct") or []
    return cell(summary(values)["median"], 1) if values else "-"


def _node_mb(point: dict | None) -> str:
    return cell(((point or {}).get("node_mb") or {}).get("median"), 1)


def verdict(result: dict) -> str:
    """One line: nested/flat creation time at the largest node count, beside Table IV's."""
    p = result["params"]
    n = max(p["nodes"])
    row = {pt["kind"]: pt["summary"]["median"] for pt in result["points"] if pt["nodes"] == n}
    paper_row = result["paper"]["rows"][0]
    there = paper.ratio(paper.value(paper_row["nested_s"]), paper.value(paper_row["flat_s"]))
    return (f"Verdict: nested/flat creation time at {n} x {p['iphys']}: "
            f"{cell(paper.ratio(row.get('nested'), row.get('flat')), 1)}x here; Table IV "
            f"{paper_row['nodes']} x {paper_row['iphys']}: {cell(there, 1)}x.")


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    for kind in ("nested", "flat"):
        pts = [pt for pt in result["points"] if pt["kind"] == kind]
        xs = [pt["nodes"] for pt in pts]
        ys = [pt["summary"]["median"] for pt in pts]
        (line,) = ax.plot(xs, ys, marker="o", label=kind)
        fit = result.get("fits", {}).get(kind, {})
        if fit.get("slope") is not None:
            ax.plot(xs, [fit["slope"] * x + fit["intercept"] for x in xs], ls="--", lw=0.8,
                    color=line.get_color())
    row = result["paper"]["rows"][0]
    ax.scatter([row["nodes"]] * 2, [paper.value(row["nested_s"]), paper.value(row["flat_s"])],
               marker="x", c="k", label=f"paper Table IV ({row['nodes']} x {row['iphys']})")
    ax.set_xlabel("nodes")
    ax.set_ylabel("create s")
    ax.set_title(f"Creation time, nodes x (1 + {result['params']['iphys']})")
    ax.legend()
    save(fig, path)
