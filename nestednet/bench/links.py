"""Experiment `links` (paper Tables II/III): throughput and RTT inside and between nodes.

Intra-node: iPHY -> its node's GNAB over the intra-node net. Inter-node: iPHY ->
iPHY over a main-bridge link (the lab is first fully meshed with `link add`). For 1,
2 and 4 simultaneous connections, each trial picks random nodes (and links); every
connection is one iperf3 TCP stream, bounded by -t, then a short ping between the
same pairs (idle RTT).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from nestednet.bench import paper, traffic
from nestednet.bench.common import Bench, LabSpec, cell, in_parallel, pyplot, save
from nestednet.bench.stats import summary
from nestednet.lab.links import LabLinks
from nestednet.model import topology as topo
from nestednet.model.addressing import plan_from_dict

CONNECTIONS = (1, 2, 4)
SCOPES = ("intra", "inter")


def params(quick: bool) -> dict:
    if quick:
        return {"nodes": 4, "iphys": 4, "trials": 2, "seconds": 2, "ping_count": 5,
                "connections": list(CONNECTIONS)}
    return {"nodes": 4, "iphys": 4, "trials": 10, "seconds": 10, "ping_count": 20,
            "connections": list(CONNECTIONS)}


def mesh(nodes: int, iphys: int) -> list[tuple[topo.Endpoint, topo.Endpoint]]:
    """One link per node pair, each node using its iPHYs in order (pure)."""
    if nodes - 1 > iphys:
        raise ValueError(f"a full mesh of {nodes} nodes needs {nodes - 1} iPHYs per node")
    used = dict.fromkeys(range(1, nodes + 1), 0)
    out = []
    for a, b in itertools.combinations(range(1, nodes + 1), 2):
        used[a] += 1
        used[b] += 1
        out.append((topo.Endpoint(a, used[a]), topo.Endpoint(b, used[b])))
    return out


def ensure_mesh(lab) -> list[tuple[topo.Endpoint, topo.Endpoint]]:
    links = LabLinks.of(lab.record, lab.meta)
    present = set(links.links())
    wanted = mesh(lab.shape.nodes, lab.shape.iphys)
    for a, b in wanted:
        if (a, b) not in present:
            links.add(a, b)
    return wanted


def _trial(bench: Bench, lab, plan, scope: str, conns: int, seconds: float,
           ping_count: int, links_: list) -> dict:
    rng = bench.rng
    pairs = []  # (client node, client comp, server node, server comp, dst, src)
    if scope == "intra":
        choices = [(n, j) for n in lab.shape.node_numbers() for j in range(1, lab.shape.iphys + 1)]
        for n, j in rng.sample(choices, conns):
            node = topo.node_name(n)
            pairs.append((node, f"iphy{j}", node, "gnab", str(plan.intra_address(0).ip),
                          str(plan.intra_address(j).ip)))
    else:
        for a, b in rng.sample(links_, conns):
            if rng.random() < 0.5:
                a, b = b, a
            pairs.append((topo.node_name(a.node), f"iphy{a.iphy}", topo.node_name(b.node),
                          f"iphy{b.iphy}", str(plan.inter_address(b.node, b.iphy).ip),
                          str(plan.inter_address(a.node, a.iphy).ip)))
    for slot, (_, _, sn, sc, _, _) in enumerate(pairs):
        traffic.start_server(lab, sn, sc, traffic.BASE_PORT + slot, seconds + 40)
    runs = in_parallel([
        (lambda s=slot, p=pair: traffic.transfer(lab, p[0], p[1], p[4], traffic.BASE_PORT + s,
                                                 seconds, src=p[5]))
        for slot, pair in enumerate(pairs)])
    pings = in_parallel([
        (lambda p=pair: traffic.ping(lab, p[0], p[1], p[4], src=p[5], count=ping_count))
        for pair in pairs])
    return {"pairs": [f"{p[0]}:{p[1]}->{p[2]}:{p[3]}" for p in pairs],
            "gbps": [r["bps"] / 1e9 for r in runs],
            "retransmits": [r.get("retransmits") for r in runs],
            "rtt_ms": [p["avg_ms"] for p in pings],
            "rtt_min_ms": [p["min_ms"] for p in pings],
            "ping_received": [p["received"] for p in pings]}


def condense(trials: list[dict]) -> dict:
    per_conn = [g for t in trials for g in t["gbps"]]
    aggregate = [sum(t["gbps"]) for t in trials]
    rtts = [r for t in trials for r in t["rtt_ms"] if r is not None]
    mins = [r for t in trials for r in t.get("rtt_min_ms", []) if r is not None]
    return {"per_connection_gbps": summary(per_conn), "aggregate_gbps": summary(aggregate),
            "rtt_ms": summary(rtts), "rtt_min_ms": summary(mins),
            "retransmits": summary([r for t in trials for r in t.get("retransmits", [])
                                    if r is not None]),
            "ping_loss": sum(1 for t in trials for r in t["rtt_ms"] if r is None)}


def run(bench: Bench) -> dict:
    p = params(bench.quick)
    result: dict = {"experiment": "links", "params": p, "paper": paper.PAPER["links"],
                    "notes": ["one TCP stream per connection (iperf3 -P 1), client bound to "
                              "its component's address; RTT = ping average (and minimum) "
                              "right after the transfers, medians over connections and "
                              "trials; a single slow reply on a loaded machine moves the "
                              "average"]}
    for kind in ("nested", "flat"):
        lab = bench.lab(LabSpec(kind, p["nodes"], p["iphys"]))
        plan = plan_from_dict(lab.shape, lab.meta["plan"])
        links_ = ensure_mesh(lab)
        per_kind: dict = {"lab": lab.record.lab, "links": [f"{a}<->{b}" for a, b in links_]}
        for scope in SCOPES:
            for conns in p["connections"]:
                bench.log(f"links: {kind} {scope} x{conns}")
                trials = [_trial(bench, lab, plan, scope, conns, p["seconds"], p["ping_count"],
                                 links_) for _ in range(p["trials"])]
                per_kind[f"{scope}_{conns}"] = {"trials": trials, "summary": condense(trials)}
        result[kind] = per_kind
    return result


def markdown(result: dict) -> str:
    p = result["params"]
    ref = result["paper"]
    lines = ["## Link throughput and RTT (paper Tables II/III)", "",
             f"{p['nodes']} nodes x {p['iphys']} iPHYs, fully meshed; {p['trials']} trials "
             f"per cell, {p['seconds']} s transfers, {p['ping_count']} pings; medians. "
             "Paper columns: averages (Table II intra, Table III inter).", "",
             "| path | conns | nested Gbit/s per conn | flat Gbit/s per conn | "
             "paper nested / flat Gbit/s | nested RTT ms avg (min) | flat RTT ms avg (min) | "
             "paper nested / flat ms | retransmits per conn nested / flat |",
             "|---|---|---|---|---|---|---|---|---|"]
    for scope in SCOPES:
        for conns in p["connections"]:
            key = f"{scope}_{conns}"
            n, f = result["nested"][key]["summary"], result["flat"][key]["summary"]
            pc = ref["cells"].get(scope, {}).get(str(conns), {})
            lines.append(f"| {scope} | {conns} | {cell(n['per_connection_gbps']['median'], 3)} | "
                         f"{cell(f['per_connection_gbps']['median'], 3)} | "
                         f"{_pair(pc, 'gbps')} | {_rtt(n)} | {_rtt(f)} | {_pair(pc, 'ms')} | "
                         f"{_retrans(n)} / {_retrans(f)} |")
    lines += ["", verdict(result),
              f"Paper: {ref['source']} ({ref['note']}).",
              *(f"- {n}" for n in result["notes"]), ""]
    return "\n".join(lines)


def _retrans(measured: dict) -> str:
    return cell(measured.get("retransmits", {}).get("median"), 0)


def _pair(cells: dict, unit: str) -> str:
    return (f"{cell(paper.value(cells.get(f'nested_{unit}')), 3)} / "
            f"{cell(paper.value(cells.get(f'flat_{unit}')), 3)}")


def verdict(result: dict) -> str:
    """One line: nested/flat throughput per connection, here and in the paper (medians)."""
    here, there = [], []
    for scope in SCOPES:
        for conns in result["params"]["connections"]:
            key = f"{scope}_{conns}"
            here.append(paper.ratio(
                result["nested"][key]["summary"]["per_connection_gbps"]["median"],
                result["flat"][key]["summary"]["per_connection_gbps"]["median"]))
            pc = result["paper"]["cells"].get(scope, {}).get(str(conns), {})
            there.append(paper.ratio(paper.value(pc.get("nested_gbps")),
                                     paper.value(pc.get("flat_gbps"))))
    return (f"Verdict: nested/flat throughput per connection, median over cells: "
            f"{cell(_median(here))} here, {cell(_median(there))} in Tables II/III.")


def _median(values: list[float | None]) -> float | None:
    return summary([v for v in values if v is not None])["median"]


def _rtt(measured: dict) -> str:
    low = measured.get("rtt_min_ms", {}).get("median")
    return f"{cell(measured['rtt_ms']['median'], 3)} ({cell(low, 3)})"



def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    p = result["params"]
    cells = [(s, c) for s in SCOPES for c in p["connections"]]
    xs = range(len(cells))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for offset, kind in ((-0.2, "nested"), (0.2, "flat")):
        thr = [result[kind][f"{s}_{c}"]["summary"]["per_connection_gbps"]["median"] or 0
               for s, c in cells]
        rtt = [result[kind][f"{s}_{c}"]["summary"]["rtt_ms"]["median"] or 0 for s, c in cells]
        top.bar([x + offset for x in xs], thr, width=0.4, label=kind)
        bottom.bar([x + offset for x in xs], rtt, width=0.4, label=kind)
    top.set_ylabel("Gbit/s per connection (log)")
    bottom.set_ylabel("RTT ms, avg (log)")
    top.set_yscale("log")
    bottom.set_yscale("log")
    bottom.set_xticks(list(xs), [f"{s} x{c}" for s, c in cells])
    top.legend()
    top.set_title("Throughput and RTT, medians")
    save(fig, path)
