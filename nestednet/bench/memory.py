"""Experiment `memory` (paper Table I): what a node costs, part by part.

Per node: the whole node (its container's cgroup, which holds everything inside it),
each component (a nested child's own cgroup; a flat component's process tree PSS),
the inner daemons (dockerd/containerd/shims, nested only) and the internal OVS
(ovsdb-server + ovs-vswitchd in the parent, nested only: a flat node's switch is a
bridge in the host's OVS). Plus the host's main OVS daemons, which all labs share.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from nestednet.adapters import ksm, netlink
from nestednet.adapters.cgroups import cgroup_memory, drop_cache
from nestednet.bench import paper, procmem
from nestednet.bench.common import Bench, LabSpec, cell, pyplot, save
from nestednet.bench.stats import summary
from nestednet.lab import engine, flat
from nestednet.model import topology as topo

MB = 1024 * 1024
PARTS = ("node_total_mb", "node_cached_mb", "node_awake_mb", "gnab_mb", "iphy_mb",
         "inner_daemon_mb", "internal_ovs_mb")
ANON = {"node_total_mb": "node_total_anon_mb", "node_awake_mb": "node_awake_anon_mb",
        "inner_daemon_mb": "inner_daemon_anon_mb",
        "internal_ovs_mb": "internal_ovs_anon_mb"}
LABELS = {"node_total_mb": "whole node", "node_cached_mb": "whole node, cache not dropped",
          "node_awake_mb": "whole node, inner engine awake",
          "gnab_mb": "GNAB (runs the agent)",
          "iphy_mb": "iPHY (each)",
          "inner_daemon_mb": "inner daemons", "internal_ovs_mb": "internal OVS"}


REFAULT_S = 2.0


def params(quick: bool) -> dict:
    return {"nodes": 4, "iphys": 4, "settle_s": 3 if quick else 10}


def drop_page_caches(pids: list[int]) -> list[bool]:
    """Drop the page cache of each of these processes' memory cgroups (adapters.cgroups.
    drop_cache), then wait REFAULT_S for what they touch to come back: the measure that
    follows counts what they hold, not which one first read a file all of them share
    (the image's binaries), a charge that moved a node's figure from 21 to 72 MB
    between otherwise alike runs. Whether each was dropped, in order."""
    os.sync()  # dirty pages cannot be dropped until written
    dropped = [drop_cache(pid) for pid in pids]
    time.sleep(REFAULT_S)
    return dropped


def drop_caches(lab, numbers) -> dict[int, dict]:
    """Each node's figure as found ("cache not dropped"), then its page cache dropped
    (drop_page_caches)."""
    pids = {number: _node_pid(lab, number) for number in numbers}
    found = {number: {"node_cached_mb": _mb(cgroup_memory(pid))}
             for number, pid in pids.items()}
    for number, dropped in zip(pids, drop_page_caches(list(pids.values())), strict=True):
        found[number]["cache_dropped"] = dropped
    return found


def _node_pid(lab, number: int) -> int:
    container = lab.client.containers.get(topo.parent_container(lab.record.lab, number))
    return int(container.attrs["State"]["Pid"])


def _mb(memory: dict | None, key: str = "used") -> float | None:
    return round(memory[key] / MB, 2) if memory else None


def whole_nodes_mb(lab) -> list[float]:
    """Every node's whole figure (its container's cgroup alone, both designs: cheap
    enough for every node of a large lab), page cache dropped first as `run` does."""
    pids = [_node_pid(lab, n) for n in lab.shape.node_numbers()]
    drop_page_caches(pids)
    return [v for v in (_mb(cgroup_memory(pid)) for pid in pids) if v is not None]


def nested_node(lab, number: int) -> dict:
    parent = lab.parent(number)
    pid = int(parent.attrs["State"]["Pid"])
    # The node as it idles (its inner engine parked: nestednet.lab.engine), then again
    # with the engine woken to list the components.
    procs = procmem.processes()
    tree = procmem.descendants(pid, procs)
    total = cgroup_memory(pid)
    with lab.inner(number) as inner:
        inner_pids = {c.name: int(c.attrs["State"]["Pid"]) for c in inner.containers.list()}
        awake = cgroup_memory(pid)
    host = netlink.host_pids(pid, list(inner_pids.values()))
    components = {name: _mb(cgroup_memory(host[p])) for name, p in inner_pids.items()}
    return {"node": topo.node_name(number), "node_total_mb": _mb(total),
            "node_total_anon_mb": _mb(total, "anon"), "node_awake_mb": _mb(awake),
            "node_awake_anon_mb": _mb(awake, "anon"), "components": components,
            **_daemons("inner_daemon", procmem.matching(tree, procmem.INNER_DAEMON)),
            **_daemons("internal_ovs", procmem.matching(tree, procmem.OVS_DAEMONS))}


def _daemons(part: str, procs: list[procmem.Proc]) -> dict:
    return {f"{part}_mb": procmem.pss_mb(procs),
            f"{part}_anon_mb": procmem.pss_mb(procs, "Pss_Anon")}


def flat_node(lab, number: int) -> dict:
    pid = _node_pid(lab, number)
    procs = procmem.processes()
    components = {name: procmem.pss_mb(procmem.descendants(p, procs))
                  for name, p in flat.component_pids(pid).items()}
    total = cgroup_memory(pid)
    return {"node": topo.node_name(number), "node_total_mb": _mb(total),
            "node_total_anon_mb": _mb(total, "anon"), "components": components,
            "inner_daemon_mb": 0.0, "inner_daemon_anon_mb": 0.0,
            "internal_ovs_mb": 0.0, "internal_ovs_anon_mb": 0.0}


def condense(nodes: list[dict]) -> dict:
    """Medians over nodes (and over components for the per-component row)."""
    out = {}
    for part in PARTS:
        if part in ("gnab_mb", "iphy_mb"):
            values = [v for n in nodes for name, v in n["components"].items()
                      if v is not None and (name == "gnab") == (part == "gnab_mb")]
        else:
            values = [n[part] for n in nodes if n.get(part) is not None]
        out[part] = summary(values)
        if part in ANON:
            out[ANON[part]] = summary([n[ANON[part]] for n in nodes
                                       if n.get(ANON[part]) is not None])
    return out


def run(bench: Bench) -> dict:
    p = params(bench.quick)
    result: dict = {"experiment": "memory", "params": p, "paper": paper.PAPER["memory"],
                    "notes": []}
    for kind in ("nested", "flat"):
        lab = bench.lab(LabSpec(kind, p["nodes"], p["iphys"]))
        time.sleep(p["settle_s"])
        if kind == "nested":
            start = time.monotonic()
            merged = engine.ksm_offered() and ksm.wait_passes()
            result["ksm"] = {"merged": merged, "waited_s": round(time.monotonic() - start, 1),
                             **(ksm.state() or {})}
        measure = nested_node if kind == "nested" else flat_node
        before = drop_caches(lab, lab.shape.node_numbers())
        nodes = [{**measure(lab, n), **before[n]} for n in lab.shape.node_numbers()]
        result[kind] = {"lab": lab.record.lab, "nodes": nodes, "summary": condense(nodes)}
    host_ovs = [procmem.Proc(pid, 0, "") for pid in procmem.host_ovs_pids()]
    result["main_ovs_mb"] = procmem.pss_mb(host_ovs)
    result["main_ovs_anon_mb"] = procmem.pss_mb(host_ovs, "Pss_Anon")
    result["notes"].append("main OVS is the host's ovs-vswitchd + ovsdb-server, shared by "
                           "every lab on the machine (flat nodes' switches live in it too)")
    result["notes"].append("component: nested = the child's cgroup; flat = PSS of its "
                           "process tree (no cgroup of its own)")
    result["notes"].append("whole node = as it idles, its inner Docker engine parked (it "
                           "wakes on use and parks after 30-60 s unused: "
                           "nestednet.lab.engine); 'engine awake' = the same cgroup just "
                           "after waking it to list the components (flat nodes have none)")
    k = result.get("ksm") or {}
    result["notes"].append(
        f"KSM (same-page merging) {'on' if k.get('run') == 1 else 'off'} on this host"
        + (f": measured after 2 more passes ({k['waited_s']} s), {k['pages_sharing']} "
           f"pages sharing {k['pages_shared']}" if k.get("merged") else "")
        + ("; nested nodes offer their internal OVS to it (images/dind/ksm-merge; "
           "$NESTEDNET_KSM=0 to not)" if engine.ksm_offered()
           else "; nested nodes do not use it ($NESTEDNET_KSM=0; unset, they offer their "
                "internal OVS: about 9 MB a node less)"))
    dropped = all(n["cache_dropped"] for kind in ("nested", "flat")
                  for n in result[kind]["nodes"])
    result["notes"].append(
        "whole node = the node container's cgroup minus inactive page cache (in brackets: "
        "its anonymous memory), "
        + (f"measured {REFAULT_S:g} s after the kernel was asked to drop the node's page "
           "cache (its memory cgroup's reclaim, no swap on: anonymous memory stays), so "
           "a file every node reads counts for none rather than for whichever read it "
           "first; 'cache not dropped' = the same figure just before"
           if dropped else "its page cache NOT dropped first (swap on, or its cgroup "
           "cannot be written): the figure includes shared files' pages charged to "
           "whichever node read them first")
        + "; daemons = PSS (in brackets its anonymous part: file pages of binaries are "
          "shared by all nodes, so PSS can exceed the node's cgroup figure)")
    return result


# Our parts -> Table I's rows (the paper counts one component container per row).
PAPER_ROWS = {"node_total_mb": "single_node_mb", "node_cached_mb": "single_node_mb",
              "node_awake_mb": "single_node_mb",
              "gnab_mb": "component_container_mb",
              "iphy_mb": "component_container_mb",
              "inner_daemon_mb": "internal_docker_daemon_mb",
              "internal_ovs_mb": "internal_ovs_mb"}


def markdown(result: dict) -> str:
    rows = result["paper"]["rows"]
    lines = ["## Memory per node (paper Table I)", "",
             f"Lab: {result['params']['nodes']} nodes x (GNAB + {result['params']['iphys']} "
             f"iPHYs), measured {result['params']['settle_s']} s after creation; medians "
             "over nodes (iPHY: over all iPHYs).", "",
             "| part | nested MB | flat MB | paper nested MB | paper flat MB |",
             "|---|---|---|---|---|"]
    for part in PARTS:
        nested = result["nested"]["summary"][part]["median"]
        flat_v = result["flat"]["summary"][part]["median"]
        ref = rows[PAPER_ROWS[part]]
        if part in ANON:
            nested_s = f"{_f(nested)} ({_f(result['nested']['summary'][ANON[part]]['median'])})"
            flat_s = f"{_f(flat_v)} ({_f(result['flat']['summary'][ANON[part]]['median'])})"
        else:
            nested_s, flat_s = _f(nested), _f(flat_v)
        lines.append(f"| {LABELS[part]} | {nested_s} | {flat_s} | "
                     f"{_f(paper.value(ref['nested']))} | {_f(paper.value(ref['flat']))} |")
    main = f"{_f(result['main_ovs_mb'])} ({_f(result.get('main_ovs_anon_mb'))})"
    ovs = rows["main_ovs_mb"]
    lines.append(f"| main OVS (host, shared) | {main} | {main} | "
                 f"{_f(paper.value(ovs['nested']))} | {_f(paper.value(ovs['flat']))} |")
    lines += ["", verdict(result),
              f"Paper: {result['paper']['source']} ({result['paper']['note']}); rows used: "
              "whole node = 'Single node', GNAB and iPHY = 'Component container', inner "
              "daemons = 'Internal Docker daemon'.",
              *(f"- {n}" for n in result["notes"]), ""]
    return "\n".join(lines)


def verdict(result: dict) -> str:
    """One line: how much more a nested node costs than a flat one, here and in Table I."""
    single = result["paper"]["rows"]["single_node_mb"]
    nested_p, flat_p = paper.value(single["nested"]), paper.value(single["flat"])
    here = paper.ratio(result["nested"]["summary"]["node_total_mb"]["median"],
                       result["flat"]["summary"]["node_total_mb"]["median"])
    return (f"Verdict: a nested node costs {cell(here)}x a flat one here (whole node); "
            f"Table I: {cell(paper.ratio(nested_p, flat_p))}x ({_f(nested_p)} vs "
            f"{_f(flat_p)} MB).")


def _f(v: float | None) -> str:
    return cell(v, 1)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    parts = list(PARTS)
    xs = range(len(parts))
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, kind in ((-0.2, "nested"), (0.2, "flat")):
        vals = [result[kind]["summary"][p]["median"] or 0 for p in parts]
        ax.bar([x + offset for x in xs], vals, width=0.4, label=kind)
    ax.set_xticks(list(xs), [LABELS[p] for p in parts])
    ax.set_ylabel("MB (median per node)")
    ax.set_title(f"Memory per node (main OVS, shared: {result['main_ovs_mb']:.0f} MB)")
    ax.legend()
    save(fig, path)
