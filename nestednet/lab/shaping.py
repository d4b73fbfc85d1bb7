"""Shaping a lab's inter-node links: one tc tree on the receiving iPHY's main-bridge port.

Direction a -> b of a link leaves the main bridge through b's ``inter-host`` veth
(nested and flat labs alike), so that port's egress is where a -> b is shaped: an
HTB class for the rate and a netem leaf for delay, jitter and loss
(tcplan.port_tree_ops). Every iPHY is in at most one link, so one tree per port
needs no filters.

The plan and the executor are the project's one shaping library (model/tcplan,
adapters/tc), the same code linkemu uses. This module adds what a lab needs:

* each port's root qdisc is written to the lab record (kind ``tc-root``) before it
  is made, so `delete` and `cleanup` remove it even after a crash;
* the configured properties per port live in ``shaping.json`` in the lab
  directory, so `link set` can change a tree in place (tc change, never delete and
  re-add: a TCP flow survives) and `link list` can show them beside what the
  kernel holds;
* a batch (all directions of a step) is one call: one netlink socket, one state
  write.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestednet.adapters import tc
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.lab.links import LabLinks
from nestednet.lab.record import TC_ROOT, LabRecord
from nestednet.model import link_rules, tcplan
from nestednet.model import topology as topo
from nestednet.model.link_properties import LinkProperties, PropertyError, parse_properties
from nestednet.model.shaping_policy import SHAPER, ShapingPolicy

STATE_FILE = "shaping.json"


def iphy_port(lab: str, end: topo.Endpoint) -> str:
    """The host-side port of an iPHY on the main bridge: where traffic *to* it is shaped."""
    return topo.veth_name(lab, end.node, "inter-host", end.iphy)


@dataclass(frozen=True)
class Direction:
    """One direction of one link: ``name`` ("n1:iphy1->n2:iphy1") and the receiving port."""

    name: str
    port: str
    properties: LinkProperties
    netns: str | None = None
    """The port's network namespace (None: this machine's; another host's in a
    multi-host lab)."""
    where: str = "host"
    """The port's host as the lab record names it."""


def direction(lab: str, src: topo.Endpoint, dst: topo.Endpoint,
              properties: LinkProperties, links: LabLinks | None = None) -> Direction:
    """Direction src -> dst, shaped on dst's port (on dst's host: ``links`` says where)."""
    if links is None:
        return Direction(f"{src}->{dst}", iphy_port(lab, dst), properties)
    return Direction(f"{src}->{dst}", iphy_port(lab, dst), properties, links.netns_of(dst),
                     links.where(dst))


def _by_netns(ports: Sequence[str], netns_of: Callable[[str], str | None]
              ) -> dict[str | None, list[str]]:
    groups: dict[str | None, list[str]] = {}
    for port in ports:
        groups.setdefault(netns_of(port), []).append(port)
    return groups


def netem_available() -> bool:
    """Whether this kernel has sch_netem (probed once per process)."""
    # Lazy: the probe module imports pyroute2's netns helpers.
    from nestednet.capabilities.shaping import available_qdiscs

    return available_qdiscs()["netem"]


class LabShaper:
    """Installs, changes and removes the shaping trees of one lab's iPHY ports."""

    def __init__(self, record: LabRecord, policy: ShapingPolicy,
                 offloads_off: bool = True,
                 tc_for: Callable[[str | None], Any] | None = None) -> None:
        self.record = record
        self.tc_for = tc_for or (lambda _netns: tc)
        """Who runs tc for a port's namespace: this machine's adapter, or (multi-host
        labs, `LabLinks.tc_for`) the port's host's helper."""
        self.policy = policy
        self.offloads_off = offloads_off
        """Turn the shaped ports' TSO/GSO/GRO off (one host). Multi-host labs keep them:
        their hosts' userspace OVS with TSO drops TSO frames toward a port without it
        (docs/multihost.md)."""
        self._lock = threading.Lock()
        self._recorded = {r.name for r in record.resources() if r.kind == TC_ROOT}
        self._state: dict[str, dict[str, Any]] = _load(self.state_file)
        self._offloads_off: set[str] = set()
        self._index: dict[str, int] = {}

    @property
    def state_file(self) -> Path:
        return self.record.path / STATE_FILE

    def shaped(self) -> dict[str, dict[str, Any]]:
        """Per shaped port: the direction's name, its configured properties, the mode."""
        return dict(self._state)

    def netns(self, port: str) -> str | None:
        """The network namespace a shaped port lives in (None: this machine's)."""
        return self._state.get(port, {}).get("netns")

    def configured(self, port: str) -> LinkProperties | None:
        entry = self._state.get(port)
        return None if entry is None else LinkProperties(**entry["properties"])

    def up(self, directions: Sequence[Direction]) -> None:
        """Build a tree per direction (replacing an earlier tree of ours on that port).

        Call before the link's flows go in, so no unshaped packet crosses. On failure
        nothing of this batch stays.
        """
        if not directions:
            return
        for d in directions:
            self.policy.check(d.properties, d.name)
        netns = {d.port: d.netns for d in directions}
        with self._lock:
            for d in directions:
                if d.port not in self._recorded:
                    self.record.add(TC_ROOT, d.port, d.where)
                    self._recorded.add(d.port)
            for space, ports in _by_netns(list(netns), netns.get).items():
                kernel = self.tc_for(space)
                if self.offloads_off:
                    kernel.disable_offloads(space,
                                            [p for p in ports if p not in self._offloads_off])
                    self._offloads_off.update(ports)
                ops = [op for d in directions if d.port in ports
                       for op in tcplan.port_tree_ops(d.port, d.name,
                                                      self.policy.shape(d.properties),
                                                      SHAPER, netem=self.policy.netem)]
                if any(p in self._state for p in ports):
                    kernel.check_ports(space, ports, list(self._recorded), "nestednet")
                    indexes = kernel.apply(ops, space, ports)
                else:
                    indexes = kernel.build(ops, space, ports, list(self._recorded), "nestednet")
                # Kept from link up, so a step's in-place changes need no lookups.
                self._index.update(indexes)
            for d in directions:
                self._state[d.port] = self._entry(d)
            self._save()

    def change(self, directions: Sequence[Direction]) -> list[Direction]:
        """Change trees in place where the shapes differ; returns those changed.

        A port without a tree of ours gets one (`up`).
        """
        for d in directions:
            self.policy.check(d.properties, d.name)
        fresh = [d for d in directions if d.port not in self._state]
        ops: list[tcplan.TcOp] = []
        changed: list[Direction] = []
        with self._lock:
            for d in directions:
                entry = self._state.get(d.port)
                if entry is None:
                    continue
                old = LinkProperties(**entry["properties"])
                if self.policy.shape(old) == self.policy.shape(d.properties):
                    # What the kernel holds would not change (e.g. only a property the
                    # policy drops moved): no tc write, no link_update, no state write.
                    continue
                ops += tcplan.leaf_change_ops(d.port, SHAPER, 0, d.name, self.policy.shape(old),
                                              self.policy.shape(d.properties),
                                              netem=self.policy.netem)
                changed.append(d)
            if ops:
                self._change(ops)
            for d in changed:
                self._state[d.port] = self._entry(d)
            if changed:
                self._save()
        self.up(fresh)
        return changed + fresh

    def _change(self, ops: list[tcplan.TcOp]) -> None:
        """One batched netlink write; port indexes are cached (a port re-created by a
        component restart gets a new one: looked up again and retried once)."""
        for space, ports in _by_netns(sorted({op.port for op in ops}), self.netns).items():
            mine = [op for op in ops if op.port in ports]
            missing = sorted(set(ports) - set(self._index))
            if missing:
                self._index.update(self.tc_for(space).port_indexes(space, missing))
            try:
                self.tc_for(space).change_batch(mine, space, self._index)
            except EnvironmentProblem:
                self._index.clear()
                self.tc_for(space).change(mine, space)

    def down(self, ports: Sequence[str]) -> list[str]:
        """Remove the trees on ``ports`` (after the link's flows are gone)."""
        with self._lock:
            ours = [p for p in ports if p in self._state or p in self._recorded]
            cleared = [port for space, group in _by_netns(ours, self.netns).items()
                       for port in self.tc_for(space).remove_trees(space, group)]
            for port in ports:
                self._state.pop(port, None)
            self._save()
        return cleared

    def read(self, ports: Sequence[str], netns: Mapping[str, str | None] | None = None
             ) -> dict[str, dict[str, Any]]:
        """What the kernel holds on ``ports``, as the properties it implies; ``netns``
        says where a port without a tree of ours is (default: this machine)."""
        where = {p: self.netns(p) if p in self._state or not netns else netns.get(p)
                 for p in ports}
        found = {port: state for space, group in _by_netns(ports, where.get).items()
                 for port, state in self.tc_for(space).read(space, group).items()}
        return {port: kernel_properties(port_state) for port, port_state in found.items()}

    def _entry(self, d: Direction) -> dict[str, Any]:
        return {"direction": d.name, "properties": d.properties.as_dict(), "netns": d.netns,
                "mode": self.policy.mode, "netem": self.policy.netem,
                "dropped": list(self.policy.dropped(d.properties))}

    def _save(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state, indent=1, sort_keys=True))
        tmp.replace(self.state_file)


def kernel_properties(port_state: dict[str, Any]) -> dict[str, Any] | None:
    """Rate/delay/jitter/loss the kernel really holds on a port (None: no tree of ours)."""
    if not port_state.get("exists") or port_state["root"]["handle"] != "1:0":
        return None
    leaf = {c["classid"]: c for c in port_state["classes"]}.get(tcplan.leaf_class(0), {})
    netem = {q["handle"]: q for q in port_state["qdiscs"]}.get(tcplan.leaf_qdisc(0), {})
    return {"rate_bps": leaf.get("rate_bps"), "delay_us": netem.get("delay_us"),
            "jitter_us": netem.get("jitter_us"), "loss_pct": netem.get("loss_pct"),
            "netem_limit": netem.get("limit"), "dropped": netem.get("dropped"),
            "class_dropped": leaf.get("dropped"), "backlog_bytes": leaf.get("backlog_bytes"),
            "backlog_packets": leaf.get("backlog_packets")}


def _load(path: Path) -> dict[str, dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


# --- manual links (`nestednet link add|set|del|list`) -------------------------------

BOTH, A_TO_B, B_TO_A = "both", "a-to-b", "b-to-a"
DIRECTIONS = (BOTH, A_TO_B, B_TO_A)


def lab_shaper(record: LabRecord, mode: str, keep_order: bool = False,
               links: LabLinks | None = None) -> LabShaper:
    """A shaper for ``mode`` on the kernels that shape the lab's ports (``links`` probes
    them for sch_netem: this machine's, or each host's); ``links`` also says whether the
    lab's shaped ports keep their offloads."""
    netem = netem_available() if links is None else links.netem_available()
    return LabShaper(record, ShapingPolicy.choose(mode, netem, keep_order=keep_order),
                     offloads_off=links is None or links.shaping_offloads_off,
                     tc_for=None if links is None else links.tc_for)


def add_link(links: LabLinks, shaper: LabShaper, a: topo.Endpoint, b: topo.Endpoint,
             properties: LinkProperties | None) -> link_rules.Link:
    """Link A and B; with ``properties`` both directions are shaped before the flows go in."""
    directions = ([] if properties is None else
                  [direction(links.lab, a, b, properties, links),
                   direction(links.lab, b, a, properties, links)])
    for d in directions:
        shaper.policy.check(d.properties, d.name)
    shaped = False

    def shape_first() -> None:
        nonlocal shaped
        shaped = True
        shaper.up(directions)

    try:
        return links.add(a, b, before=shape_first)
    except BaseException:
        if shaped and directions:
            shaper.down([d.port for d in directions])
        raise


def set_link(links: LabLinks, shaper: LabShaper, a: topo.Endpoint, b: topo.Endpoint,
             changes: dict[str, str], which: str = BOTH) -> list[Direction]:
    """Change the properties of an existing link in place; only ``changes`` are altered.

    ``changes`` holds unit strings by field ("rate": "5Mbit"); a direction that was
    not shaped yet starts from an ideal link. Returns the directions that changed.
    """
    link_rules.find_link(links.links(), a, b)
    if which not in DIRECTIONS:
        raise UsageError(f"unknown direction {which!r} (choose from {', '.join(DIRECTIONS)})")
    ends = {A_TO_B: (a, b), B_TO_A: (b, a)}
    wanted = [A_TO_B, B_TO_A] if which == BOTH else [which]
    updated = []
    for key in wanted:
        src, dst = ends[key]
        old = shaper.configured(iphy_port(links.lab, dst)) or LinkProperties()
        try:
            new = parse_properties({**old.as_document(), **changes})
        except PropertyError as exc:
            raise UsageError(f"--{exc.field}: {exc}") from None
        updated.append(direction(links.lab, src, dst, new, links))
    return shaper.change(updated)


def delete_link(links: LabLinks, shaper: LabShaper, a: topo.Endpoint,
                b: topo.Endpoint) -> link_rules.Link:
    """Remove the flows, then the two directions' trees."""
    gone = links.delete(a, b)
    shaper.down([iphy_port(links.lab, gone[0]), iphy_port(links.lab, gone[1])])
    return gone


def list_links(links: LabLinks, shaper: LabShaper) -> list[dict[str, Any]]:
    """Each link with, per direction, the configured properties and what the kernel holds."""
    rows = []
    present = links.links()
    ends = {iphy_port(links.lab, end): end for link in present for end in link}
    kernel = shaper.read(list(ends), {p: links.netns_of(e) for p, e in ends.items()}) \
        if ends else {}
    for link in present:
        row = links.describe(link)
        row["directions"] = []
        for src, dst in (link, link[::-1]):
            port = iphy_port(links.lab, dst)
            entry = shaper.shaped().get(port)
            row["directions"].append({
                "from": str(src), "to": str(dst), "port": port,
                "configured": None if entry is None else entry["properties"],
                "mode": None if entry is None else entry["mode"],
                "kernel": kernel.get(port)})
        rows.append(row)
    return rows
