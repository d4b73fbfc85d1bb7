"""Inter-node links as flow pairs on the lab's main bridge.

The main bridge is fail_mode=secure with no flows, so nodes are cut off from each
other until a link exists. A link between two iPHY ports is two flows (a->b, b->a)
under one cookie that encodes both port numbers, so the bridge's flow table itself
is the list of links: nothing else to keep in sync, and the CA (which installs
links the same way) and `link list` never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestednet.adapters import openflow, tc
from nestednet.lab import lock
from nestednet.lab.record import LABS_DIR, LabRecord
from nestednet.lab.wiring import LAB_ID
from nestednet.model import link_rules
from nestednet.model import topology as topo
from nestednet.model.addressing import AddressPlan, plan_from_dict

COOKIE_MARK = 0x4E4E << 48
"""High bits of every link cookie ("NN"): flows without it are not ours."""
PORT_BITS = 24


@dataclass(frozen=True)
class LabLinks:
    lab: str
    bridge: str
    plan: AddressPlan
    root: Path = LABS_DIR
    """Where the lab's record (and lock) live."""

    @classmethod
    def of(cls, record: LabRecord, meta: dict | None = None) -> LabLinks:
        """The links of the lab ``record`` describes; ``meta``: its lab.json as the
        caller already read it (read here when not given)."""
        meta = record.meta() if meta is None else meta
        shape = topo.Shape(meta["nodes"], meta["iphys"])
        return cls(record.lab, meta["main_bridge"], plan_from_dict(shape, meta["plan"]),
                   record.path.parent)

    def port(self, end: topo.Endpoint) -> int:
        return self.plan.port_number(end.node, end.iphy)

    def endpoint(self, port: int) -> topo.Endpoint:
        m = self.plan.shape.iphys
        return topo.Endpoint((port - 1) // m + 1, (port - 1) % m + 1)

    def cookie(self, a: topo.Endpoint, b: topo.Endpoint) -> int:
        pa, pb = sorted((self.port(a), self.port(b)))
        return COOKIE_MARK | (pa << PORT_BITS) | pb

    shaping_offloads_off = True
    """Whether shaping turns the receiving ports' TSO/GSO/GRO off (nestednet.lab.shaping)."""

    def netns_of(self, end: topo.Endpoint) -> str | None:
        """The network namespace of an iPHY's main-bridge port (None: this machine's)."""
        return None

    def where(self, end: topo.Endpoint) -> str:
        """The host of an iPHY's main-bridge port, as the lab record names it."""
        return "host"

    def tc_for(self, netns: str | None) -> Any:
        """What runs the tc adapter's functions for a port in ``netns`` (a value
        `netns_of` gave): here, the adapter itself, on this machine's kernel."""
        return tc

    def netem_available(self) -> bool:
        """Whether every kernel that shapes this lab's ports has sch_netem (delay, jitter
        and loss): here, this machine's."""
        # Lazy: the probe imports pyroute2's netns helpers.
        from nestednet.capabilities.shaping import available_qdiscs

        return available_qdiscs()["netem"]

    def link_cookies(self) -> set[int]:
        """Cookies of the link flows present now (ours by their mark)."""
        return {f.cookie for f in openflow.dump(self.bridge)
                if f.cookie >> 48 == COOKIE_MARK >> 48}

    def links(self) -> list[link_rules.Link]:
        """The links present now, read from the flow table(s)."""
        mask = (1 << PORT_BITS) - 1
        return sorted({link_rules.normalized(self.endpoint((c >> PORT_BITS) & mask),
                                             self.endpoint(c & mask))
                       for c in self.link_cookies()})

    def install(self, a: topo.Endpoint, b: topo.Endpoint) -> None:
        """The flows of link a-b, in one bundle (no checks)."""
        openflow.apply(self.bridge, openflow.patch_lines(self.cookie(a, b), self.port(a),
                                                         self.port(b)))

    def uninstall(self, a: topo.Endpoint, b: topo.Endpoint) -> None:
        openflow.apply(self.bridge, [openflow.delete_line(self.cookie(a, b))])

    def add(self, a: topo.Endpoint, b: topo.Endpoint,
            before: Callable[[], None] | None = None) -> link_rules.Link:
        """Check Algorithm 1's rules against the flow table and install, under the lab's
        lock: no other process changes links between the read and the write. ``before``
        runs once the link is allowed, before the flows (shaping goes in first, so no
        unshaped packet crosses)."""
        with lock.hold(self.lab, "link add", root=self.root):
            link = link_rules.check_new_link(self.links(), a, b)
            if before is not None:
                before()
            self.install(a, b)
        return link

    def delete(self, a: topo.Endpoint, b: topo.Endpoint) -> link_rules.Link:
        with lock.hold(self.lab, "link del", root=self.root):
            link = link_rules.find_link(self.links(), a, b)
            self.uninstall(a, b)
        return link

    def clear(self) -> None:
        """Remove every link flow (ours by cookie mark), e.g. those of a crashed run."""
        openflow.apply(self.bridge, [f"delete cookie={COOKIE_MARK:#x}/{0xFFFF << 48:#x}"])

    def apply_step(self, add: list[link_rules.Link], remove: list[link_rules.Link]) -> None:
        """Remove and add many links in one atomic bundle (one ovs-ofctl run).

        For the CA, which has already applied Algorithm 1 to the whole step: no rule
        checks and no flow-table read here, so a step costs one process start.
        """
        lines = [openflow.delete_line(self.cookie(a, b)) for a, b in remove]
        for a, b in add:
            lines += openflow.patch_lines(self.cookie(a, b), self.port(a), self.port(b))
        openflow.apply(self.bridge, lines)

    def describe(self, link: link_rules.Link) -> dict:
        a, b = link
        return {"a": str(a), "b": str(b),
                "a_address": str(self.plan.inter_address(a.node, a.iphy).ip),
                "b_address": str(self.plan.inter_address(b.node, b.iphy).ip),
                "cookie": f"{self.cookie(a, b):#x}"}


def dead_nodes(client, lab: str, nodes: int) -> set[int]:
    """Nodes whose parent container is not running (killed, stopped or gone)."""
    running = {c.name for c in client.containers.list(filters={"label": f"{LAB_ID}={lab}"})}
    return {k for k in range(1, nodes + 1) if topo.parent_container(lab, k) not in running}


def broken_because(link: link_rules.Link, dead: set[int]) -> str | None:
    """Why a link on the bridge carries nothing: an end's node is dead (its port is gone)."""
    gone = [str(end) for end in link if end.node in dead]
    return f"{' and '.join(gone)} on a dead node" if gone else None
