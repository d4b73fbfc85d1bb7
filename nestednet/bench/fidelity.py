"""Experiment `fidelity`: configured vs measured link properties on an inter-node link.

One nested 2-node x 1-iPHY lab, one link n1:iphy1 <-> n2:iphy1 shaped exactly as a
run shapes it (nestednet.lab.shaping: HTB class + netem leaf on the receiving
iPHY's port), changed in place between measurements:

* rate: one TCP stream n1 -> n2 (iperf3) per configured rate; the measured
  goodput is TCP payload, so it sits below the configured (Ethernet) rate by the
  headers, 1448/1514 = 95.6 % at most;
* delay: a one-way delay on n1 -> n2; measured as the ping RTT rise over the
  unshaped link (average of the pings, minus the idle average);
* loss: random loss on n1 -> n2; measured as ping loss over many pings.

Delay and loss need sch_netem. On a kernel without it the rate is measured and the
report says why the rest is skipped (this experiment needs Docker, so it does not
run in the full-kernel VM either; tests/kernel/test_link_shaping_kernel.py measures
delay and loss there on the same shaping code).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from nestednet.bench import paper, traffic
from nestednet.bench.common import Bench, LabSpec, cell, pyplot, save
from nestednet.lab import shaping
from nestednet.lab.links import LabLinks
from nestednet.model import topology as topo
from nestednet.model.addressing import plan_from_dict
from nestednet.model.shaping_policy import FULL

A, B = topo.Endpoint(1, 1), topo.Endpoint(2, 1)
PAYLOAD_SHARE = 1448 / 1514
"""TCP payload per full Ethernet frame (MSS 1448 with timestamps): the goodput ceiling."""


def params(quick: bool) -> dict:
    if quick:
        return {"rates_mbit": [5, 50], "delays_ms": [10], "losses_pct": [0, 5],
                "seconds": 3, "ping_count": 50, "loss_pings": 300}
    return {"rates_mbit": [1, 5, 10, 20, 50, 100], "delays_ms": [1, 5, 10, 20, 50],
            "losses_pct": [0, 1, 2, 5, 10], "seconds": 8, "ping_count": 200,
            "loss_pings": 1000}


def run(bench: Bench) -> dict:
    p = params(bench.quick)
    lab = bench.lab(LabSpec("nested", 2, 1))
    plan = plan_from_dict(lab.shape, lab.meta["plan"])
    links = LabLinks.of(lab.record, lab.meta)
    shaper = shaping.lab_shaper(lab.record, FULL)
    if not links.links():
        shaping.add_link(links, shaper, A, B, None)
    dst, src = str(plan.inter_address(B.node, B.iphy).ip), str(plan.inter_address(1, 1).ip)
    netem = shaper.policy.netem
    result: dict = {"experiment": "fidelity", "params": p, "lab": lab.record.lab,
                    "netem": netem, "thesis": paper.THESIS["fidelity"], "notes": [
                        "goodput is TCP payload: at most 95.6 % of the configured rate "
                        "(1448-byte segments in 1514-byte frames)",
                        "delay and loss are set on n1 -> n2 only; delay = average ping RTT "
                        "minus the idle average"]}
    result["rate"] = []
    for mbit in p["rates_mbit"]:
        bench.log(f"fidelity: rate {mbit} Mbit/s")
        shaping.set_link(links, shaper, A, B, {"rate": f"{mbit}Mbit"})
        traffic.start_server(lab, "n2", "iphy1", traffic.BASE_PORT, p["seconds"] + 40)
        run_ = traffic.transfer(lab, "n1", "iphy1", dst, traffic.BASE_PORT, p["seconds"],
                                src=src)
        result["rate"].append({"configured_mbit": mbit, "measured_mbit": run_["bps"] / 1e6,
                               "ratio": run_["bps"] / 1e6 / mbit,
                               "ratio_to_payload_ceiling": run_["bps"] / 1e6
                               / (mbit * PAYLOAD_SHARE)})
    shaping.set_link(links, shaper, A, B, {"rate": "1Gbit"})
    if not netem:
        result["skipped"] = ("delay and loss not measured: this kernel lacks sch_netem "
                             "(`nestednet doctor`, line 'link properties'); HTB shapes the "
                             "rate only")
        return result
    idle = traffic.ping(lab, "n1", "iphy1", dst, src=src, count=p["ping_count"], interval=0.02)
    result["idle_rtt_ms"] = idle["avg_ms"]
    result["delay"] = []
    for ms in p["delays_ms"]:
        bench.log(f"fidelity: delay {ms} ms")
        shaping.set_link(links, shaper, A, B, {"delay": f"{ms}ms"}, shaping.A_TO_B)
        shaped = traffic.ping(lab, "n1", "iphy1", dst, src=src, count=p["ping_count"],
                              interval=0.02)
        rise = shaped["avg_ms"] - idle["avg_ms"]
        result["delay"].append({"configured_ms": ms, "measured_ms": rise,
                                "error_ms": rise - ms})
    shaping.set_link(links, shaper, A, B, {"delay": "0"}, shaping.A_TO_B)
    result["loss"] = []
    for pct in p["losses_pct"]:
        bench.log(f"fidelity: loss {pct} %")
        shaping.set_link(links, shaper, A, B, {"loss": f"{pct}%"}, shaping.A_TO_B)
        pings = traffic.ping(lab, "n1", "iphy1", dst, src=src, count=p["loss_pings"],
                             interval=0.01)
        measured = 100.0 * (pings["sent"] - pings["received"]) / pings["sent"]
        result["loss"].append({"configured_pct": pct, "measured_pct": measured,
                               "pings": pings["sent"]})
    return result


def markdown(result: dict) -> str:
    lines = ["## Link fidelity: configured vs measured on an inter-node link", "",
             f"Lab {result['lab']} (nested 2x1), link n1:iphy1 <-> n2:iphy1 shaped on the "
             f"receiving iPHY's port; netem {'present' if result['netem'] else 'absent'}.", "",
             "| rate configured Mbit/s | goodput Mbit/s | goodput / rate | goodput / payload "
             "ceiling |", "|---|---|---|---|"]
    for r in result["rate"]:
        lines.append(f"| {r['configured_mbit']} | {cell(r['measured_mbit'])} | "
                     f"{cell(r['ratio'], 3)} | {cell(r['ratio_to_payload_ceiling'], 3)} |")
    if "skipped" in result:
        lines += ["", f"**Skipped:** {result['skipped']}."]
    else:
        lines += ["", "| delay configured ms | RTT rise ms | error ms |", "|---|---|---|"]
        lines += [f"| {d['configured_ms']} | {cell(d['measured_ms'], 3)} | "
                  f"{cell(d['error_ms'], 3)} |" for d in result["delay"]]
        lines += ["", "| loss configured % | measured % | pings |", "|---|---|---|"]
        lines += [f"| {x['configured_pct']} | {cell(x['measured_pct'])} | {x['pings']} |"
                  for x in result["loss"]]
    ratios = [r["ratio_to_payload_ceiling"] for r in result["rate"]]
    if ratios:
        lines += ["", f"Median goodput / payload ceiling: {statistics.median(ratios):.3f}."]
    lines += ["", verdict(result), *(f"- {n}" for n in result["notes"]), ""]
    return "\n".join(lines)


def verdict(result: dict) -> str:
    """One line: goodput and delay error here beside the thesis's link emulator (§4.7)."""
    ref = result.get("thesis") or paper.THESIS["fidelity"]
    rate = [100 * r["ratio"] for r in result["rate"]]
    errors = [d["error_ms"] for d in result.get("delay", [])]
    delay = (f"delay error median {cell(statistics.median(errors), 3)} ms over the idle RTT"
             if errors else "delay not measured")
    here = (f"goodput {cell(min(rate), 1)}-{cell(max(rate), 1)} % of the configured rate"
            if rate else "goodput not measured")
    return (f"Verdict: {here} here, "
            f"{cell(paper.value(ref['accuracy_pct_min']), 1)}-"
            f"{cell(paper.value(ref['accuracy_pct_max']), 1)} % in the thesis "
            f"(Fig. 4.10); {delay}, the thesis's testbed adds "
            f"{cell(paper.value(ref['inherent_delay_ms']), 2)} ms (Table 4.2). "
            f"Thesis: {ref['source']} ({ref['note']}).")


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    panels = [("rate", "configured_mbit", "measured_mbit", "Mbit/s")]
    if "skipped" not in result:
        panels += [("delay", "configured_ms", "measured_ms", "ms"),
                   ("loss", "configured_pct", "measured_pct", "%")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    for ax, (key, x, y, unit) in zip(axes[0], panels, strict=True):
        xs = [r[x] for r in result[key]]
        ax.plot(xs, [r[y] for r in result[key]], "o-", label="measured")
        ax.plot(xs, xs, "--", color="grey", label="configured")
        ax.set_title(key)
        ax.set_xlabel(f"configured {unit}")
        ax.set_ylabel(f"measured {unit}")
        ax.legend()
    save(fig, path)
