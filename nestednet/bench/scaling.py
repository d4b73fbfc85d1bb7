"""Experiment `scaling` (paper Fig. 4): intra-node throughput as nodes hold more iPHYs.

For each iPHY count M, a 2-node lab of each design; in node 1 a sample of iPHYs each
sends one TCP stream to the GNAB, one after the other (the machine has 2 cores: one
transfer at a time measures what M idle siblings cost, not CPU sharing). Reported:
median and spread (min, max, stdev) over the sampled iPHYs.
"""

from __future__ import annotations

from pathlib import Path

from nestednet.bench import paper, traffic
from nestednet.bench.common import Bench, LabSpec, cell, pyplot, save
from nestednet.bench.stats import summary
from nestednet.model.addressing import plan_from_dict


def params(quick: bool) -> dict:
    if quick:
        return {"nodes": 2, "iphys": [5, 10], "sample": 3, "seconds": 2}
    return {"nodes": 2, "iphys": [5, 10, 15, 20, 25], "sample": 8, "seconds": 5}


def one(bench: Bench, kind: str, m: int, p: dict) -> dict:
    lab, meta = bench.create(LabSpec(kind, p["nodes"], m))
    try:
        plan = plan_from_dict(lab.shape, lab.meta["plan"])
        picked = sorted(bench.rng.sample(range(1, m + 1), min(p["sample"], m)))
        values = []
        for j in picked:
            run = traffic.measured_pair(lab, ("n1", f"iphy{j}"), ("n1", "gnab"),
                                        str(plan.intra_address(0).ip),
                                        str(plan.intra_address(j).ip), traffic.BASE_PORT,
                                        p["seconds"])
            values.append(run["bps"] / 1e9)
        return {"kind": kind, "iphys": m, "iphys_sampled": picked, "gbps": values,
                "summary": summary(values), "create_s": meta["create_s"]}
    finally:
        bench.release(lab)


def run(bench: Bench) -> dict:
    p = params(bench.quick)
    result: dict = {"experiment": "scaling", "params": p, "paper": paper.PAPER["scaling"],
                    "points": [], "notes": []}
    for m in p["iphys"]:
        for kind in ("nested", "flat"):
            bench.log(f"scaling: {kind} 2x{m}")
            result["points"].append(one(bench, kind, m, p))
    return result


def markdown(result: dict) -> str:
    p = result["params"]
    lines = ["## Intra-node throughput vs iPHYs per node (paper Fig. 4)", "",
             f"{p['nodes']}-node labs; {p['sample']} sampled iPHYs of node 1 each send "
             f"{p['seconds']} s to the GNAB, one at a time. Gbit/s.", "",
             "| iPHYs | nested median | nested min-max | nested stdev % | flat median | "
             "flat min-max | flat stdev % |", "|---|---|---|---|---|---|---|"]
    for m in p["iphys"]:
        row = {pt["kind"]: pt["summary"] for pt in result["points"] if pt["iphys"] == m}
        n, f = row.get("nested", {}), row.get("flat", {})
        lines.append(f"| {m} | {cell(n.get('median'))} | {cell(n.get('min'))}-{cell(n.get('max'))} "
                     f"| {cell(_spread_pct(n))} "
                     f"| {cell(f.get('median'))} | {cell(f.get('min'))}-{cell(f.get('max'))} "
                     f"| {cell(_spread_pct(f))} |")
    ref = result["paper"]
    lines += ["", f"Paper: {ref['source']}: {ref['note']}: NestedNet "
              f"{cell(paper.value(ref['nested_stdev_pct_5']), 0)} % at 5 iPHYs to "
              f"{cell(paper.value(ref['nested_stdev_pct_25']), 0)} % at 25, Containernet "
              f"{cell(paper.value(ref['flat_stdev_pct_min']), 0)}-"
              f"{cell(paper.value(ref['flat_stdev_pct_max']), 0)} %. Our samples are "
              "sequential transfers, so our stdev % measures idle siblings, not sharing.",
              verdict(result), ""]
    return "\n".join(lines)


def verdict(result: dict) -> str:
    """One line: is the nested spread at the largest node size within the paper's, and
    below flat's, as §V.D found?"""
    m = max(result["params"]["iphys"])
    row = {pt["kind"]: pt["summary"] for pt in result["points"] if pt["iphys"] == m}
    nested, flat = _spread_pct(row.get("nested", {})), _spread_pct(row.get("flat", {}))
    ref = result["paper"]
    steadier = "-" if nested is None or flat is None else ("yes" if nested <= flat else "no")
    return (f"Verdict: spread at {m} iPHYs nested {cell(nested, 1)} %, flat {cell(flat, 1)} %"
            f" (nested steadier: {steadier}); §V.D: NestedNet "
            f"{cell(paper.value(ref['nested_stdev_pct_5']), 0)}-"
            f"{cell(paper.value(ref['nested_stdev_pct_25']), 0)} %, Containernet "
            f"{cell(paper.value(ref['flat_stdev_pct_min']), 0)}-"
            f"{cell(paper.value(ref['flat_stdev_pct_max']), 0)} % (nested steadier: yes).")


def _spread_pct(s: dict) -> float | None:
    """Stdev as % of the mean, the paper's measure of spread (§V.D)."""
    share = paper.ratio(s.get("stdev"), s.get("mean"))
    return None if share is None else share * 100



def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    for kind in ("nested", "flat"):
        pts = [pt for pt in result["points"] if pt["kind"] == kind]
        xs = [pt["iphys"] for pt in pts]
        med = [pt["summary"]["median"] or 0 for pt in pts]
        lo = [m - (pt["summary"]["min"] or 0) for m, pt in zip(med, pts, strict=True)]
        hi = [(pt["summary"]["max"] or 0) - m for m, pt in zip(med, pts, strict=True)]
        ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=4, label=kind)
    ax.set_xlabel("iPHYs per node")
    ax.set_ylabel("iPHY -> GNAB Gbit/s (median, min-max)")
    ax.set_title("Intra-node throughput vs node size")
    ax.legend()
    save(fig, path)
