"""Experiment `routing`: how long babel takes to make a path after a link appears,
against the number of hops and the number of nodes (issue 17; the paper has no
routing figures, so there is nothing to compare with).

Labs are lines n1-n2-...-nN built with `--routing babel`, every link but n1-n2 in
place and settled. One measurement: n1's GNAB probes the target's node address
every PING_S seconds or so (one ping at a time, -D timestamps), the link n1-n2 is
added, and the convergence time is the first answer's timestamp minus the moment
the link's flows were installed; then the link is removed again and the path left
to expire before the next repeat.

* hops: in one line of max(hops)+1 nodes, targets n(h+1) for each h (hops counts
  links crossed; each link is two forwarding iPHYs);
* nodes: in lines of N nodes, targets n3 (2 hops, so only the lab's size varies)
  and nN (the far end).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from nestednet.bench.common import Bench, LabSpec, cell, pyplot, run_in, save
from nestednet.bench.stats import summary
from nestednet.lab.links import LabLinks
from nestednet.model import topology as topo

PING_S = 0.1
"""Probe spacing: one ping at a time, waiting at most 2 x PING_S for its answer."""
WINDOW_S = 120
"""Longest wait for a path: far ends of long lines took up to 18.5 s (24 nodes) and 13.1 s
(48 nodes) in one run each; 40 s left too little room for a slow run."""
EXPIRE_S = 8.0
"""Wait after removing the link, so the next repeat starts with no path."""
PROBE_TTL = 255
"""Every node a path crosses costs two IP hops (its iPHY in, its iPHY out), so with
ping's default TTL of 64 a probe dies beyond about 31 nodes: the probe carries the
maximum, as the components' own packets (and so the replies) do."""


def params(quick: bool, nodes: tuple[int, ...] = (), repeats: int | None = None) -> dict:
    """The mode's points; ``nodes`` (`--nodes`) measures only lines of those lengths,
    without the hops series, ``repeats`` (`--repeats`) replaces the mode's count."""
    p = ({"hops": [2, 4], "nodes": [5, 8], "iphys": 2, "repeats": 2} if quick
         else {"hops": [2, 3, 4, 5, 6, 7, 8], "nodes": [12, 24, 48], "iphys": 2, "repeats": 3})
    if nodes:
        p.update(hops=[], nodes=sorted(set(nodes)))
    if repeats:
        p["repeats"] = repeats
    return p


def first_answer(ping_output: str) -> float | None:
    """Unix time of the first answered probe in `ping -D` output, or None."""
    for line in ping_output.splitlines():
        match = re.match(r"\[(\d+\.\d+)\] .*icmp_seq=\d+ ttl", line)
        if match:
            return float(match.group(1))
    return None


def line_links(nodes: int) -> list[tuple[topo.Endpoint, topo.Endpoint]]:
    """n1-n2, n2-n3, ...: node i's iPHY2 to node i+1's iPHY1."""
    return [(topo.Endpoint(i, 2), topo.Endpoint(i + 1, 1)) for i in range(1, nodes)]


def measure(lab, links: LabLinks, first: tuple[topo.Endpoint, topo.Endpoint],
            target: int) -> float | None:
    """Seconds from adding ``first`` until n1's GNAB hears from node ``target``."""
    address = str(links.plan.node_address(target).ip)
    result: dict = {}

    def pinger() -> None:
        # ping gives up at once while there is no route ("Network is unreachable"), so
        # it is started again until one answer comes; -D stamps that answer.
        probe = (f"until ping -n -D -c 1 -t {PROBE_TTL} -W {PING_S * 2:g} {address}; "
                 f"do sleep {PING_S / 2:g}; done")
        result["out"] = run_in(lab, "n1", "gnab", ["sh", "-c", probe], WINDOW_S)[1]

    thread = threading.Thread(target=pinger, daemon=True)
    thread.start()
    time.sleep(1.0)  # ping is probing before the link exists
    links.add(*first)
    added = time.time()
    thread.join(WINDOW_S + 40)
    links.delete(*first)
    time.sleep(EXPIRE_S)
    answered = first_answer(result.get("out", ""))
    return None if answered is None else round(answered - added, 3)


def _line_lab(bench: Bench, nodes: int, iphys: int):
    lab, _meta = bench.create(LabSpec("nested", nodes, iphys, routing="babel"))
    links = LabLinks.of(lab.record, lab.meta)
    chain = line_links(nodes)
    for a, b in chain[1:]:
        links.add(a, b)
    time.sleep(5)  # the rest of the line settles
    return lab, links, chain[0]


def run(bench: Bench) -> dict:
    p = params(bench.quick, bench.nodes, bench.repeats)
    result: dict = {"experiment": "routing", "params": p, "hops": [], "nodes": [],
                    "notes": ["babeld 1.12 (Debian), hello 0.5 s on inter-node links, 1 s "
                              "intra-node; convergence = first ping answer after the link's "
                              "flows were installed (one probe at a time, about every "
                              "0.1 s, so up to ~0.25 s late)",
                              f"probes carry TTL {PROBE_TTL}: each node crossed is two IP "
                              "hops, so the default TTL 64 reaches about 31 nodes"]}
    if p["hops"]:
        lab, links, first = _line_lab(bench, max(p["hops"]) + 1, p["iphys"])
        try:
            for hops in p["hops"]:
                bench.log(f"routing: {hops} hops")
                times = [measure(lab, links, first, hops + 1) for _ in range(p["repeats"])]
                result["hops"].append(_point(times, hops=hops))
        finally:
            bench.release(lab)
    for nodes in p["nodes"]:
        lab, links, first = _line_lab(bench, nodes, p["iphys"])
        try:
            for target, kind in ((3, "2 hops"), (nodes, "far end")):
                bench.log(f"routing: {nodes} nodes, {kind}")
                times = [measure(lab, links, first, target) for _ in range(p["repeats"])]
                result["nodes"].append(_point(times, nodes=nodes, target=kind,
                                              hops=target - 1))
        finally:
            bench.release(lab)
    return result


def _point(times: list[float | None], **where: object) -> dict:
    got = [t for t in times if t is not None]
    return {**where, "convergence_s": times, "missed": len(times) - len(got),
            "summary": summary(got) if got else None}


def _median(point: dict) -> float | None:
    return point["summary"]["median"] if point["summary"] else None


def markdown(result: dict) -> str:
    p = result["params"]
    lines = ["## Routing: babel convergence after a link appears", "",
             f"Lines of nodes x (GNAB + {p['iphys']} iPHYs), `--routing babel`; "
             f"{p['repeats']} repeat(s) per point, median seconds from adding the link n1-n2 "
             "until n1's GNAB gets an answer from the target's node address."]
    if result["hops"]:
        lines += ["", "| hops | convergence s | missed |", "|---|---|---|"]
        lines += [f"| {pt['hops']} | {cell(_median(pt))} | {pt['missed']} |"
                  for pt in result["hops"]]
    lines += ["", "| nodes | target (hops) | convergence s | missed |", "|---|---|---|---|"]
    lines += [f"| {pt['nodes']} | {pt['target']} ({pt['hops']}) | {cell(_median(pt))} | "
              f"{pt['missed']} |" for pt in result["nodes"]]
    lines += ["", *(f"- {n}" for n in result["notes"]), ""]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    pts = result["hops"]
    left.plot([pt["hops"] for pt in pts], [_median(pt) for pt in pts], marker="o")
    left.set_xlabel("hops (links crossed)")
    left.set_ylabel("convergence s (median)")
    left.set_title("vs hops")
    for kind in ("2 hops", "far end"):
        pts = [pt for pt in result["nodes"] if pt["target"] == kind]
        right.plot([pt["nodes"] for pt in pts], [_median(pt) for pt in pts], marker="o",
                   label=f"target: {kind}")
    right.set_xlabel("nodes in the lab")
    right.set_title("vs nodes")
    right.legend()
    save(fig, path)
