"""`nestednet status`: what a lab is made of and in what state, as plain data."""

from __future__ import annotations

from typing import Any

import docker.errors

from nestednet.errors import EnvironmentProblem
from nestednet.lab import flat
from nestednet.lab.links import LabLinks
from nestednet.lab.nodes import Lab, cgroup_memory
from nestednet.model import topology as topo
from nestednet.model.addressing import plan_from_dict

MB = 1024 * 1024


def status(lab: Lab) -> dict:
    meta = lab.meta
    plan = plan_from_dict(lab.shape, meta["plan"])
    node_of = flat.node_status if flat.is_flat(meta) else _node
    nodes = [node_of(lab, number, plan) for number in lab.shape.node_numbers()]
    links = LabLinks.of(lab.record)
    return {
        "lab": lab.record.lab,
        "kind": meta.get("kind", "nested"),
        "nodes": nodes,
        "shape": {"nodes": lab.shape.nodes, "iphys": lab.shape.iphys},
        "datapath": meta["datapath"],
        "parent_security": meta.get("parent_security"),
        "main_bridge": meta["main_bridge"],
        "address_plan": meta["plan"],
        "ca": meta["ca"],
        "limits": {"cpus": meta.get("cpus"), "memory_mb": meta.get("memory_mb")},
        "links": [links.describe(link) for link in links.links()],
        "create_s": meta.get("create_s"),
    }


def node_container(lab: Lab, number: int) -> tuple[dict, Any, int]:
    """The part of a node's status both designs share: its container, state and memory.

    Returns (entry, container or None when missing, the container's host pid or 0).
    """
    name = topo.parent_container(lab.record.lab, number)
    entry: dict = {"node": topo.node_name(number), "container": name}
    try:
        container = lab.client.containers.get(name)
    except docker.errors.NotFound:
        entry.update(state="missing", components=[])
        return entry, None, 0
    entry["state"] = container.status
    pid = int(container.attrs["State"].get("Pid") or 0)
    memory = cgroup_memory(pid) if pid else None
    entry["memory_mb"] = round(memory["used"] / MB, 1) if memory else None
    entry["memory"] = memory
    return entry, container, pid


def component_addresses(plan, number: int, index: int) -> dict[str, str]:
    """A component's addresses: intra-node, and control (GNAB) or inter-node (iPHY)."""
    item = {"intra": str(plan.intra_address(index))}
    if index == 0:
        item["control"] = str(plan.control_address(number))
    else:
        item["inter"] = str(plan.inter_address(number, index))
    return item


def _node(lab: Lab, number: int, plan) -> dict:
    entry, parent, _pid = node_container(lab, number)
    if parent is None:
        return entry
    states = {}
    if parent.status == "running":
        try:
            with lab.inner(number) as inner:
                for child in inner.containers.list(all=True):
                    states[child.name] = child.status
        except EnvironmentProblem:
            pass
    components = []
    for index, component in enumerate(lab.shape.components()):
        components.append({"component": component, "state": states.get(component, "unknown"),
                           **component_addresses(plan, number, index)})
    entry["components"] = components
    return entry
