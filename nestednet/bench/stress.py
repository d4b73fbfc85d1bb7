"""Experiment `stress` (paper Fig. 3): does a busy component hurt its siblings?

A one-node lab (GNAB + 2 iPHYs). iPHY1 sends one TCP stream to the GNAB for the
whole timeline (the baseline transfer); during the stress window a 120-stream
iperf3 runs on loopback in iPHY2 (nested: a sibling container; flat: a process in
the same container). T1 = mean throughput before the window, T2 = during it,
D = (T1 - T2) / T1 (also given from window medians, which one stray second on a
shared machine moves less). Repeated with a per-component CPU quota (create --cpus), which
in a flat node can only cap the node as a whole.
"""

from __future__ import annotations

import time
from pathlib import Path
from statistics import fmean, median

from nestednet.bench import paper, traffic
from nestednet.bench.common import Bench, LabSpec, cell, in_parallel, pyplot, save
from nestednet.bench.stats import degradation, window
from nestednet.model.addressing import plan_from_dict

CPUS = 0.5
STRESS_STREAMS = 120
STRESS_PORT = 5301


def params(quick: bool) -> dict:
    if quick:
        return {"total_s": 15, "stress_start_s": 5, "stress_end_s": 10, "cpus": CPUS,
                "streams": STRESS_STREAMS, "settle_s": 3}
    return {"total_s": 30, "stress_start_s": 10, "stress_end_s": 20, "cpus": CPUS,
            "streams": STRESS_STREAMS, "settle_s": 5}


VARIANTS = (("nested", None), ("flat", None), ("nested", CPUS), ("flat", CPUS))


def analyse(base: dict, stress_offset: float, stress_s: float) -> dict:
    """T1/T2 and D from the baseline's 1-s intervals and where the stress fell (pure).

    T1 is the unstressed throughput: the intervals before the window (skipping the
    first second, TCP slow start) and after it (skipping one second of recovery), so
    a change in the machine's other load during the run moves it less. T2 takes the
    intervals wholly inside the window. T0 (before only) and T3 (after only) are kept.
    """
    intervals = base["intervals"]
    end = intervals[-1][1] if intervals else 0.0
    stop = stress_offset + stress_s
    before = window(intervals, 1.0, stress_offset)
    after = window(intervals, stop + 1.0, end)
    during = window(intervals, stress_offset, stop)
    t1 = fmean(before + after) if before or after else None
    t2 = fmean(during) if during else None
    d = degradation(t1, t2) if t1 and t2 is not None else None
    m1 = median(before + after) if before or after else None
    m2 = median(during) if during else None
    d_median = degradation(m1, m2) if m1 and m2 is not None else None
    return {"t0_gbps": _g(fmean(before)) if before else None, "t1_gbps": _g(t1),
            "t2_gbps": _g(t2), "t3_gbps": _g(fmean(after)) if after else None,
            "D": d, "D_median": d_median,
            "series": [[round(s, 3), round(e, 3), round(bps / 1e9, 4)]
                       for s, e, bps in intervals],
            "stress_window_s": [round(stress_offset, 3), round(stop, 3)]}


def _g(bps: float | None) -> float | None:
    return None if bps is None else bps / 1e9


def one(bench: Bench, kind: str, cpus: float | None, p: dict) -> dict:
    lab, _ = bench.create(LabSpec(kind, 1, 2, cpus))
    try:
        plan = plan_from_dict(lab.shape, lab.meta["plan"])
        gnab_ip, iphy1_ip = str(plan.intra_address(0).ip), str(plan.intra_address(1).ip)
        total = p["total_s"]
        stress_s = p["stress_end_s"] - p["stress_start_s"]
        time.sleep(p["settle_s"])  # let the previous lab's removal and this one's start end
        traffic.start_server(lab, "n1", "gnab", traffic.BASE_PORT, total + 60)
        traffic.start_server(lab, "n1", "iphy2", STRESS_PORT, total + 60, bind="127.0.0.1")
        started = time.monotonic()

        def baseline() -> dict:
            return traffic.transfer(lab, "n1", "iphy1", gnab_ip, traffic.BASE_PORT, total,
                                    src=iphy1_ip)

        def stress() -> dict:
            time.sleep(max(0.0, p["stress_start_s"] - (time.monotonic() - started)))
            return traffic.transfer(lab, "n1", "iphy2", "127.0.0.1", STRESS_PORT, stress_s,
                                    streams=p["streams"])

        base, load = in_parallel([baseline, stress])
        offset = load["started_at"] - base["started_at"]
        out = analyse(base, offset, stress_s)
        out.update(kind=kind, cpus=cpus, lab=lab.record.lab, stress_gbps=load["bps"] / 1e9,
                   baseline_gbps=base["bps"] / 1e9)
        return out
    finally:
        bench.release(lab)


def run(bench: Bench) -> dict:
    p = params(bench.quick)
    result: dict = {"experiment": "stress", "params": p, "paper": paper.PAPER["stress"],
                    "variants": [], "notes": [
                        f"--cpus {p['cpus']} is per component in nested labs; in flat labs "
                        f"the node container gets (M+1) x {p['cpus']} (Containernet's only "
                        "knob: a process has no cgroup of its own)",
                        "the baseline stream's path in a nested node includes the node's "
                        "userspace OVS (in the parent, outside every component quota)"]}
    for kind, cpus in VARIANTS:
        bench.log(f"stress: {kind}" + (f" --cpus {cpus}" if cpus else ""))
        result["variants"].append(one(bench, kind, cpus, p))
    by = {(v["kind"], v["cpus"]): v for v in result["variants"]}
    result["quota_lowers_D"] = {
        kind: (by[(kind, CPUS)]["D"] < by[(kind, None)]["D"]
               if by.get((kind, CPUS), {}).get("D") is not None
               and by.get((kind, None), {}).get("D") is not None else None)
        for kind in ("nested", "flat")}
    return result


def markdown(result: dict) -> str:
    p = result["params"]
    lines = ["## Isolation under stress (paper Fig. 3)", "",
             f"Baseline: one TCP stream iPHY1 -> GNAB for {p['total_s']} s; stress: "
             f"{p['streams']}-stream iperf3 on loopback in iPHY2 from t={p['stress_start_s']} "
             f"to {p['stress_end_s']} s. D = (T1 - T2) / T1; T1 = unstressed seconds before "
             "and after the window (T0 = before only, T3 = after only).", "",
             "| design | CPU quota | T0 | T1 Gbit/s | T2 Gbit/s | T3 | D | D (medians) | "
             "paper D |", "|---|---|---|---|---|---|---|---|---|"]
    for v in result["variants"]:
        ref = paper.value(result["paper"]["D_nested" if v["kind"] == "nested" else "D_flat"]) \
            if v["cpus"] is None else None
        quota = f"{v['cpus']}/component" if v["cpus"] else "none"
        lines.append(f"| {v['kind']} | {quota} | {_f(v.get('t0_gbps'))} | {_f(v['t1_gbps'])} | "
                     f"{_f(v['t2_gbps'])} | "
                     f"{_f(v['t3_gbps'])} | {_pct(v['D'])} | {_pct(v.get('D_median'))} | "
                     f"{_pct(ref)} |")
    lowers = result.get("quota_lowers_D", {})
    ref = result["paper"]
    lines += ["", "Does the CPU quota lower D? " + ", ".join(
        f"{k}: {'yes' if v else 'no' if v is not None else 'n/a'}" for k, v in lowers.items()),
        verdict(result),
        f"Paper: {ref['source']}: baseline {_paper_gbps(ref['T1_nested_gbps'])} -> "
        f"{_paper_gbps(ref['T2_nested_gbps'])} Gbit/s nested, "
        f"{_paper_gbps(ref['T1_flat_gbps'])} -> {_paper_gbps(ref['T2_flat_gbps'])} "
        "Gbit/s flat; the paper has no CPU-quota variant ('-').",
        "", *(f"- {n}" for n in result["notes"]), ""]
    return "\n".join(lines)


def verdict(result: dict) -> str:
    """One line: does the nested design isolate better (lower D) than flat, as in Fig. 3?"""
    d = {v["kind"]: v["D"] for v in result["variants"] if v["cpus"] is None}
    better = (d["nested"] < d["flat"] if d.get("nested") is not None
              and d.get("flat") is not None else None)
    answer = {True: "yes", False: "no", None: "n/a"}[better]
    return (f"Verdict: nested isolates better than flat (lower D, no quota) here: {answer} "
            f"(D {_pct(d.get('nested'))} vs {_pct(d.get('flat'))}); Fig. 3: yes "
            f"({_pct(paper.value(result['paper']['D_nested']))} vs "
            f"{_pct(paper.value(result['paper']['D_flat']))}).")



def _pct(v) -> str:
    return "-" if v is None else f"{v * 100:.0f} %"


def _f(v: float | None) -> str:
    return cell(v, 3)


def _paper_gbps(cited: dict) -> str:
    return cell(paper.value(cited), 1)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 4))
    for v in result["variants"]:
        if not v["t1_gbps"]:
            continue
        xs = [e for _, e, _ in v["series"]]
        ys = [g / v["t1_gbps"] for _, _, g in v["series"]]
        label = v["kind"] + (f" cpus {v['cpus']}" if v["cpus"] else "") + \
            (f" (T1 {v['t1_gbps']:.2f} Gbit/s, D {v['D'] * 100:.0f} %)"
             if v["D"] is not None else "")
        (line,) = ax.plot(xs, ys, marker=".", label=label)
        for edge in v["stress_window_s"]:
            ax.axvline(edge, color=line.get_color(), ls=":", lw=0.8)
    p = result["params"]
    ax.axvspan(p["stress_start_s"], p["stress_end_s"], color="grey", alpha=0.15,
               label="stress (nominal; dotted: measured per run)")
    ax.set_xlabel("s since the baseline started")
    ax.set_ylabel("baseline throughput / T1")
    ax.set_title("Baseline transfer under a 120-stream loopback stress")
    ax.legend(fontsize=8)
    save(fig, path)
