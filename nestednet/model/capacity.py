"""Capacity model: how many hosts a lab needs, from costs measured on small labs.

Pure arithmetic, no side effects. A lab is nodes × (GNAB + M iPHYs) and L links; a host
is its cores and memory, of which a share (``headroom``) is planned for, after a fixed
base (the OS, the engine, OVS, our helper). Every node costs memory inside itself (its
parent's cgroup: inner engine, internal OVS, GNAB and iPHYs) and on its host (the
parent's shim, the host OVS's ports for its iPHYs), and idle CPU; every link costs flow
state on the host(s) of its two ends. The costs are linear in nodes, iPHYs and links:
measured at 12 and 48 nodes here (`scripts/bench/capacity.py`), they are what the
model extrapolates. A host holds as many nodes as both its memory and its CPU allow;
the binding one is named, so it is clear which cost to bring down.

Docs: docs/capacity.md (constants, their date and load, and the 2-host check).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class Costs:
    """Measured unit costs (MB, cores). ``measured`` says when and under what load."""

    node_mb: float
    """One nested node with no iPHYs: its parent's cgroup (used − inactive file)."""
    iphy_mb: float
    """Each iPHY inside its node (child container, internal OVS port)."""
    host_node_mb: float
    """Host side per node, iPHY ports aside: the parent's shim, engine bookkeeping."""
    host_port_mb: float
    """Host OVS per iPHY port on the main bridge."""
    link_mb: float
    """Per link, split between the hosts of its two ends (flows, host OVS)."""
    node_cores: float
    """Idle CPU per node (cores): inside the node plus host daemons, per node."""
    host_base_mb: float = 2048.0
    """Per host, whatever the lab: OS, engine, OVS, helper. Planned, not measured."""
    host_base_cores: float = 1.0
    host_lab_cores: float = 0.0
    """Idle CPU a lab adds to each host it uses, whatever its node count there: over
    two emulated hosts a lab's idle CPU was not proportional to its nodes (6 a host:
    0.051 cores, 12: 0.069), so one size alone fits no per-node figure that holds at
    another (docs/capacity.md)."""
    measured: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict) -> Costs:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ValueError(f"unknown cost field(s): {', '.join(unknown)}")
        return cls(**doc)


@dataclass(frozen=True)
class HostSpec:
    cores: float
    memory_mb: float
    headroom: float = 0.8
    """Share of the host planned for (the rest absorbs bursts and measurement error)."""


@dataclass(frozen=True)
class Workload:
    nodes: int
    iphys: int
    links: int


@dataclass(frozen=True)
class Usage:
    memory_mb: float
    cores: float


@dataclass(frozen=True)
class CostModel:
    """Unit costs per placement. A lab on one host parks its nodes' engines and offers
    their switches to KSM; a lab over several hosts keeps every node's engine running
    (parking needs dockerd's --live-restore, which swarm mode refuses) and does not,
    so its nodes cost about twice as much. Each set is measured on labs of its own
    kind (`scripts/bench/capacity.py costs` and `check --fit`)."""

    one_host: Costs
    multi_host: Costs

    @classmethod
    def from_dict(cls, doc: dict, default: CostModel) -> CostModel:
        """A costs file: ``costs`` (one host) and/or ``multihost_costs``. A file with
        only ``costs`` gives them for both placements (a user's own measurements are
        taken as they are); a file with only ``multihost_costs`` keeps ``default``'s
        one-host set."""
        one = doc.get("costs")
        multi = doc.get("multihost_costs")
        if one is None and multi is None:
            one = doc  # a bare Costs object
        one_host = Costs.from_dict(one) if one is not None else default.one_host
        multi_host = Costs.from_dict(multi) if multi is not None else (
            one_host if one is not None else default.multi_host)
        return cls(one_host, multi_host)


@dataclass(frozen=True)
class Prediction:
    workload: Workload
    host: HostSpec
    hosts: int
    nodes_per_host: int
    """The most nodes one host can take."""
    bound: str
    """"memory" or "cpu": the resource that limits nodes_per_host."""
    per_host: Usage
    """A host's use (base included) with the nodes spread evenly over ``hosts``."""
    total: Usage
    """The lab alone, all hosts together (no host bases)."""
    costs: Costs
    """The unit costs used (CostModel: one host's or several hosts')."""
    placement: str = "one host"

    def as_dict(self) -> dict:
        return {"workload": asdict(self.workload), "host": asdict(self.host),
                "hosts": self.hosts, "nodes_per_host": self.nodes_per_host,
                "bound": self.bound, "per_host": asdict(self.per_host),
                "total": asdict(self.total), "placement": self.placement,
                "costs": self.costs.as_dict()}


def node_usage(costs: Costs, iphys: int, links_per_node: float) -> Usage:
    """What one node adds to its host, with its share of the links."""
    memory = (costs.node_mb + iphys * costs.iphy_mb + costs.host_node_mb
              + iphys * costs.host_port_mb + links_per_node * costs.link_mb)
    return Usage(memory, costs.node_cores)


def lab_usage(costs: Costs, nodes: float, iphys: int, links: float,
              hosts: int = 1) -> Usage:
    """The lab's part of its hosts' use (no host bases): ``nodes`` nodes and ``links``
    links whose ends sit among them, on ``hosts`` hosts."""
    each = node_usage(costs, iphys, links / nodes if nodes else 0.0)
    return Usage(nodes * each.memory_mb,
                 nodes * each.cores + (hosts * costs.host_lab_cores if nodes else 0.0))


def hosts_needed(costs: Costs, workload: Workload, host: HostSpec) -> Prediction:
    """The fewest hosts of ``host``'s kind that hold ``workload`` within their headroom."""
    if workload.nodes < 1:
        raise ValueError("a lab has at least one node")
    links_per_node = workload.links / workload.nodes
    each = node_usage(costs, workload.iphys, links_per_node)
    memory_room = host.memory_mb * host.headroom - costs.host_base_mb
    cpu_room = host.cores * host.headroom - costs.host_base_cores - costs.host_lab_cores
    by_memory = math.floor(memory_room / each.memory_mb) if each.memory_mb > 0 else math.inf
    by_cpu = math.floor(cpu_room / each.cores) if each.cores > 0 else math.inf
    fit = min(by_memory, by_cpu)
    if fit == math.inf:
        raise ValueError("a node costs neither memory nor CPU: these costs were not measured")
    if fit < 1:
        raise ValueError("not one node fits such a host after its base and headroom")
    bound = "memory" if by_memory <= by_cpu else "cpu"
    hosts = math.ceil(workload.nodes / fit)
    total = lab_usage(costs, workload.nodes, workload.iphys, workload.links, hosts)
    per_host = Usage(costs.host_base_mb + total.memory_mb / hosts,
                     costs.host_base_cores + total.cores / hosts)
    return Prediction(workload, host, hosts, int(fit), bound, per_host, total, costs)


def plan(model: CostModel, workload: Workload, host: HostSpec) -> Prediction:
    """The fewest hosts for ``workload``: with one host's costs if one host holds it,
    else with several hosts' (every node then costs what a multi-host node does)."""
    one = hosts_needed(model.one_host, workload, host)
    if one.hosts == 1:
        return one
    return replace(hosts_needed(model.multi_host, workload, host), placement="several hosts")


def walker_grid(planes: int, per_plane: int, stations: int, ground_links: int = 1,
                iphys: int | None = None) -> Workload:
    """A Walker shell with +Grid ISLs (each satellite linked to the next in its plane and
    the same slot of the next plane: 2 links per satellite) and ``stations`` ground
    stations with ``ground_links`` links each (1: the nearest/highest policies). Every
    node gets 4 + ground_links iPHYs unless ``iphys`` says otherwise (a lab's nodes all
    have the same count; a satellite needs 4 for the grid and room for a ground link)."""
    if planes < 1 or per_plane < 1 or stations < 0 or ground_links < 0:
        raise ValueError("planes and satellites per plane must be positive")
    satellites = planes * per_plane
    links = 2 * satellites + stations * ground_links
    return Workload(satellites + stations, iphys if iphys is not None else 4 + ground_links,
                    links)


def cores_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(``host_lab_cores``, ``node_cores``) from (nodes on a host, that host's idle lab
    cores) points: the least-squares line when the points span two node counts or more,
    else (or when the line would give a host a negative share) a line through zero."""
    if not points:
        raise ValueError("no points to fit")
    if len({n for n, _ in points}) >= 2:
        fit = statistics.linear_regression([n for n, _ in points], [c for _, c in points])
        if fit.intercept >= 0:
            return fit.intercept, fit.slope
    return 0.0, sum(n * c for n, c in points) / sum(n * n for n, _ in points)


def cores_split(rows: list[tuple[int, float, float]]) -> tuple[float, float]:
    """(``host_lab_cores``, ``node_cores``) from (nodes on a host, their parents' idle
    cores, the rest of that host's idle lab cores) rows: a node's own share measured on
    the nodes (their parents' cgroups), only the host side (engine, OVS, shims) fitted as
    a cores_line. A few millicores a node is below what a slope between runs resolves."""
    nodes = sum(n for n, _, _ in rows)
    if not nodes:
        raise ValueError("no nodes to fit")
    host_lab_cores, outside_per_node = cores_line([(n, rest) for n, _, rest in rows])
    return host_lab_cores, sum(p for _, p, _ in rows) / nodes + outside_per_node


def relative_error(predicted: float, measured: float) -> float:
    """(predicted − measured) / measured."""
    return (predicted - measured) / measured



MEASURED = Costs(node_mb=33.25, iphy_mb=1.183, host_node_mb=2.52, host_port_mb=1.425,
                 link_mb=0.013, node_cores=0.0038,
                 measured="2026-11-26 20:14 UTC, 2 cores, 1-min load 7.5-12.8, "
                          "sizes 12x4, 48x4, 12x8 (docs/capacity.md)")
"""Measured here by scripts/bench/capacity.py costs (docs/capacity.md)."""

MEASURED_MULTIHOST = Costs(node_mb=68.45, iphy_mb=1.183, host_node_mb=3.97, host_port_mb=0.0,
                           link_mb=0.013, node_cores=0.0031, host_lab_cores=0.0,
                           measured="2026-11-27 22:52-23:12 UTC, 2 cores, 1-min load "
                                    "0.03-15, 12x4 and 24x4 over two emulated hosts, idle "
                                    "CPU 120 s after the links, checked on 36x4 "
                                    "(docs/capacity.md)")
"""Fitted by scripts/bench/capacity.py fit on two `check` runs (docs/capacity.md): a node
of a lab over several hosts, its engine awake, its idle CPU from its parent's cgroup
(cores_split: nothing measurable outside the parents, so no per-host share); per iPHY and
per link from MEASURED, the host ports folded into host_node_mb."""

MODEL = CostModel(one_host=MEASURED, multi_host=MEASURED_MULTIHOST)
"""The model `nestednet bench capacity` uses unless given --costs."""
