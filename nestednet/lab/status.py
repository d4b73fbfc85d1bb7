"""`nestednet status`: what a lab is made of and in what state, as plain data."""

from __future__ import annotations

from nestednet.lab import designs
from nestednet.lab.nodes import Lab
from nestednet.model.addressing import plan_from_dict


def status(lab: Lab) -> dict:
    meta = lab.meta
    plan = plan_from_dict(lab.shape, meta["plan"])
    design = designs.of(meta)
    design.before_use(lab)
    nodes = [{**design.node_status(lab, number, plan),
              "node_address": str(plan.node_address(number).ip)}
             for number in lab.shape.node_numbers()]
    links = design.links(lab.record, meta)
    extra = ({"hosts": meta["hosts"]["hosts"], "placement": meta["placement"]}
             if "placement" in meta else {})
    return {
        "lab": lab.record.lab,
        "kind": design.kind,
        "nodes": nodes,
        "shape": {"nodes": lab.shape.nodes, "iphys": lab.shape.iphys},
        "datapath": meta["datapath"],
        "parent_security": meta.get("parent_security"),
        "main_bridge": meta["main_bridge"],
        "address_plan": {**meta["plan"], "node": str(plan.node)},
        "routing": meta.get("routing", "none"),
        "component_caps": meta.get("component_caps", []),
        "ca": meta["ca"],
        "limits": {"cpus": meta.get("cpus"), "memory_mb": meta.get("memory_mb")},
        "links": [links.describe(link) for link in links.links()],
        "create_s": meta.get("create_s"),
        **extra,
    }
