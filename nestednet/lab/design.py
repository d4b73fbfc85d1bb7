"""What every node design shares, and the interface a design implements.

A node design is how one node of a lab is built and used: `nested` (a
Docker-in-Docker parent holding one child container per component) or `flat`
(one container, components as processes; the Containernet baseline). Everything
else about a lab — its record, main bridge, control namespace, links, teardown —
is the same for every design, so `nestednet.lab.create` runs one skeleton and asks
the design only for what differs (`NodeDesign`), the way Mininet takes its node
classes as parameters instead of branching on them.

Below both designs live the create request, the phase clock, the label set and the
per-node status and environment helpers they share.
"""

from __future__ import annotations

import abc
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from nestednet import LABEL_PREFIX
from nestednet.adapters import docker_engine, netlink
from nestednet.adapters.cgroups import cgroup_memory
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.datapath import VethOffloads
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.lab.links import LabLinks, dead_nodes
from nestednet.lab.nodes import Lab
from nestednet.lab.record import NETNS, OVS_BRIDGE, LabRecord
from nestednet.lab.wiring import LAB_ID, HostPorts
from nestednet.model import topology as topo
from nestednet.model.addressing import CA_PORT, AddressPlan
from nestednet.model.component_spec import COMPONENT_CAPS, check_component_caps
from nestednet.model.placement import DEFAULT_STRATEGY, HostSet
from nestednet.routing.strategy import RoutingStrategy

DEFAULT_JOBS = max(2, min(8, (os.cpu_count() or 2) * 2))
DEFAULT_DESIGN = "nested"
MB = 1024 * 1024

Notify = Callable[[str, int], None]
"""Called with (phase, node) when a node finishes a phase."""

Write = Callable[[bytes], None]


@dataclass(frozen=True)
class CreateRequest:
    lab: str
    nodes: int
    iphys: int
    cpus: float | None = None
    memory_mb: int | None = None
    jobs: int = DEFAULT_JOBS
    design: str = DEFAULT_DESIGN
    """Which NodeDesign builds the nodes (nestednet.lab.designs names them)."""
    routing: str = "none"
    """Which routing strategy runs in the nodes (nestednet.routing.strategies)."""
    component_caps: tuple[str, ...] = COMPONENT_CAPS
    """Capabilities added to Docker's defaults in every component (`--component-caps`)."""
    images: tuple[tuple[str, str], ...] = ()
    """(role, image) pairs: users' images for the GNABs and/or iPHYs (`--image`)."""
    hosts: HostSet | None = None
    """The machines of a multi-host lab (`--hosts FILE`); None: this machine alone."""
    placement: str = DEFAULT_STRATEGY
    """How nodes are spread over ``hosts`` (nestednet.model.placement.STRATEGIES)."""
    pins: tuple[str, ...] = ()
    """`--place NODE=HOST` items, checked against the shape and the hosts."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "component_caps", check_component_caps(self.component_caps))
        # The same trap as the capabilities: a bare string would be iterated per character.
        if isinstance(self.pins, str) or not all(isinstance(p, str) for p in self.pins):
            raise TypeError(f"pins must be a tuple of NODE=HOST strings, not {self.pins!r}")
        if isinstance(self.images, str) or not all(
                isinstance(pair, tuple) and len(pair) == 2
                and all(isinstance(x, str) for x in pair) for pair in self.images):
            raise TypeError(f"images must be a tuple of (role, image) pairs, not "
                            f"{self.images!r} (parse text with parse_component_images)")
        object.__setattr__(self, "pins", tuple(self.pins))
        object.__setattr__(self, "images", tuple(self.images))

    def image_for(self, component: int) -> str | None:
        """The user's image for this component, or None for NestedNet's own."""
        return dict(self.images).get("gnab" if component == 0 else "iphy")



@dataclass
class PhaseClock:
    """Start/end of every (phase, node), to report wall time and per-node means."""

    spans: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def span(self, phase: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            with self.lock:
                self.spans.setdefault(phase, []).append((start, time.monotonic()))

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for phase, spans in self.spans.items():
            wall = max(e for _, e in spans) - min(s for s, _ in spans)
            mean = sum(e - s for s, e in spans) / len(spans)
            out[phase] = {"wall_s": round(wall, 3), "mean_per_node_s": round(mean, 3),
                          "count": len(spans)}
        return out


def labels(lab: str, **extra: str) -> dict[str, str]:
    return {LAB_ID: lab, **{f"{LABEL_PREFIX}.{k}": v for k, v in extra.items()}}


@dataclass
class Build:
    """One create in progress: what a design needs to build a node, shared by all nodes."""

    request: CreateRequest
    shape: topo.Shape
    plan: AddressPlan
    record: LabRecord
    client: docker.DockerClient
    host_ovs: Ovsdb
    datapath: str
    offloads: VethOffloads
    clock: PhaseClock
    notify: Notify
    cancelled: threading.Event = field(default_factory=threading.Event)
    host_ports: HostPorts = field(default_factory=HostPorts)
    """Ports for the host's switch, added once every node is built (HostPorts says why)."""

    @contextlib.contextmanager
    def phase(self, phase: str, node: int) -> Iterator[None]:
        """Time one phase of one node and report it done; stop early once cancelled."""
        if self.cancelled.is_set():
            raise EnvironmentProblem("cancelled")
        with self.clock.span(phase):
            yield
        self.notify(phase, node)


class NodeDesign(abc.ABC):
    """What differs between node designs: building, inspecting and using one node."""

    kind: str
    """Its name in the lab record (meta "kind") and in CreateRequest.design."""
    phases: tuple[str, ...]
    """Per-node build phases, in order (the progress bars of `nestednet create`)."""
    title: str = ""
    """How `nestednet create` names a lab of this design ("" or "flat ")."""
    routings: tuple[str, ...] = ("none",)
    """The routing strategies (nestednet.routing.strategies) its nodes can run."""
    user_images: bool = False
    """Whether its components can run users' images (`--image`)."""
    plays_scenarios: bool = True
    """Whether `nestednet run` can play a scenario on its labs (a CA needs GNABs)."""

    @abc.abstractmethod
    def required_images(self) -> tuple[str, ...]:
        """Images that must exist before anything is made."""

    @abc.abstractmethod
    def parent_security(self, client: docker.DockerClient) -> str:
        """How node containers are started here, as recorded in the lab's meta."""

    def check_request(self, request: CreateRequest, shape: topo.Shape) -> None:
        """Design-specific input checks, before anything is made (UsageError, exit 2)."""
        if request.hosts is not None:
            raise UsageError(f"--hosts is not available in {self.kind} labs",
                             hint="a lab over several hosts is built by the swarm design")

    def extra_meta(self, request: CreateRequest, shape: topo.Shape) -> dict:
        """What the design adds to the lab record before anything is made."""
        return {}

    def prepare(self, build: Build) -> None:  # noqa: B027 (optional step, none by default)
        """Lab-wide work after the record is written and before the lab networks."""

    def lab_networks(self, build: Build) -> None:
        """The lab-wide networks on this machine: the main bridge (secure, no flows: no
        links yet) and the control namespace."""
        lab, ovs, plan = build.request.lab, build.host_ovs, build.plan
        bridge = topo.main_bridge(lab)
        build.record.add(OVS_BRIDGE, bridge)
        ovs.add_bridge(bridge, datapath_type=build.datapath, external_ids={LAB_ID: lab},
                       fail_mode="secure")
        make_control_namespace(build.record, plan)

    def close(self) -> None:  # noqa: B027 (optional step, none by default)
        """After a create, failed or not: release what ``prepare`` held."""

    def links(self, record: LabRecord, meta: dict | None = None) -> LabLinks:
        """The lab's links (flows on the main bridge; the design says where that is);
        ``meta``: the lab.json the caller read (read again when not given)."""
        return LabLinks.of(record, meta)

    def dead_nodes(self, lab: Lab) -> set[int]:
        """Nodes whose parent is not running (killed, stopped or gone)."""
        return dead_nodes(lab.client, lab.record.lab, lab.shape.nodes)

    def remove_elsewhere(self, record: LabRecord, dry_run: bool
                         ) -> tuple[list[str], dict[str, str]]:
        """Remove the recorded resources that are not on this machine (`delete`): what
        was removed, and the hosts that could not be reached (host -> why)."""
        return [], {}

    def before_use(self, lab: Lab) -> None:  # noqa: B027 (optional step, none by default)
        """Called before a command asks every node's engine in turn (`status`): a design
        whose nodes must be woken first (nested: parked inner engines,
        nestednet.lab.engine) wakes them all at once here. Not for what a node's data
        root already says (`gnab_pid`, `oom_counters`, so `run`'s watches): waking 250
        engines at once took the machine's load to 580 at a run's first step."""

    def gnab_pid(self, lab: Lab, number: int) -> int:
        """The pid here of node ``number``'s GNAB, whose network namespace holds the node's
        routes (`run` watches them: nestednet.lab.route_watch). This default is a nested
        node on this machine: a child of its parent in this machine's engine; designs
        whose nodes live elsewhere say how to reach it.

        Read first from the inner engine's data root, which leaves a parked engine
        parked; the engine is asked only when that record is missing or stale."""
        stored = docker_engine.stored_containers(lab.data_dir(number)).get(
            topo.component_name(0))
        if stored is not None and stored.running and stored.pid:
            parent_pid = int(lab.parent(number).attrs["State"]["Pid"])
            with contextlib.suppress(EnvironmentProblem, OSError):
                pid = netlink.host_pids(parent_pid, [stored.pid])[stored.pid]
                # the pid could have been reused: it is the GNAB if it is in its cgroup
                if stored.id in Path(f"/proc/{pid}/cgroup").read_text():
                    return pid
        with lab.inner(number) as inner:
            child = lab.child(inner, topo.component_name(0))
            state = child.attrs["State"]
            inner_pid = int(state.get("Pid") or 0)
        if not inner_pid:
            raise EnvironmentProblem(
                f"node n{number}'s GNAB is not running ({state.get('Status')}, exit code "
                f"{state.get('ExitCode')}, finished {state.get('FinishedAt')})",
                hint=f"its engine's logs: {lab.state_dir(number)}/log/; `nestednet "
                     f"status --lab {lab.record.lab}` shows every component")
        parent_pid = int(lab.parent(number).attrs["State"]["Pid"])
        return netlink.host_pids(parent_pid, [inner_pid])[inner_pid]

    def oom_counters(self, lab: Lab) -> dict[tuple[int, str], Path]:
        """(node number, component) -> the file counting its memory cgroup's OOM kills
        (nestednet.adapters.cgroups.oom_counter), for the components this design can see
        from here; a run reports each new kill (nestednet.lab.oom_watch). None by
        default: a flat node's components share one container, and a multi-host lab's
        cgroups are on their hosts."""
        return {}

    def route_sources(self, lab: Lab) -> list:
        """What `run`'s route watch reads (nestednet.lab.route_watch): objects with
        ``fileno()`` and ``read() -> [(node, change), ...]``. This default: a netlink
        socket per GNAB namespace on this machine; designs whose nodes live elsewhere
        bring theirs."""
        return [netlink.RouteSource(number, self.gnab_pid(lab, number))
                for number in lab.shape.node_numbers()]

    @abc.abstractmethod
    def build_node(self, build: Build, node: int) -> None:
        """Make node ``node``: record every resource before creating it."""

    @abc.abstractmethod
    def node_status(self, lab: Lab, number: int, plan: AddressPlan) -> dict:
        """One node of `nestednet status`."""

    @abc.abstractmethod
    def exec_in(self, lab: Lab, node: str, component: str, command: list[str],
                out: Write, err: Write) -> int:
        """`nestednet exec`: run ``command`` for one component; returns its exit code."""

    @abc.abstractmethod
    def swap(self, lab: Lab, node: str, component: str, path: Path, *,
             restart: bool) -> dict:
        """`nestednet swap`: new code into one component (a design may refuse)."""


def make_control_namespace(record: LabRecord, plan: AddressPlan) -> None:
    """The lab's control namespace on this machine and the CA's bridge in it (recorded
    first): where `nestednet run`'s CA listens, whatever the design."""
    name = topo.control_netns(record.lab)
    record.add(NETNS, name)
    netlink.create_netns(name)
    with netlink.route(name) as ctl:
        netlink.add_bridge(ctl, topo.control_bridge(record.lab), plan.ca_address())


def component_environment(plan: AddressPlan, lab: str, node: int, component: int,
                          routing: RoutingStrategy | None = None) -> dict[str, str]:
    """What a component knows about itself; the GNAB also learns where the CA is and
    its iPHYs' intra-node addresses (the GNAB agent's configuration)."""
    env = {"NESTEDNET_ROLE": "gnab" if component == 0 else "iphy",
           "NESTEDNET_LAB": lab, "NESTEDNET_NODE": topo.node_name(node),
           "NESTEDNET_COMPONENT": topo.component_name(component)}
    if routing is not None:
        env.update(routing.environment(plan, node, component))
    if component == 0:
        env.update(gnab_environment(plan))
    return env


def gnab_environment(plan: AddressPlan) -> dict[str, str]:
    """The GNAB agent's configuration: the CA's address and its iPHYs' intra addresses."""
    return {"NESTEDNET_CA": f"{plan.ca_address().ip}:{CA_PORT}",
            "NESTEDNET_IPHYS": ",".join(f"{topo.component_name(j)}={plan.intra_address(j).ip}"
                                        for j in range(1, plan.shape.iphys + 1))}


def node_container(lab: Lab, number: int) -> tuple[dict, Any, int]:
    """The part of a node's status every design shares: its container, state and memory.

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


def run_in_child(inner: docker.DockerClient, child: Any, node: str, component: str,
                 command: list[str], out: Write, err: Write) -> int:
    """`nestednet exec` in one child container of a node's inner engine; its exit code."""
    if not command:
        raise UsageError("no command given: nestednet exec NODE COMPONENT -- CMD...")
    if child.status != "running":
        raise UsageError(f"{node} {component} is not running (it is {child.status})",
                         hint=f"`nestednet swap {node} {component} PATH --restart` "
                              "starts it again")
    exec_id = inner.api.exec_create(child.id, command, stdout=True, stderr=True)["Id"]
    for stdout, stderr in inner.api.exec_start(exec_id, stream=True, demux=True):
        if stdout:
            out(stdout)
        if stderr:
            err(stderr)
    code = inner.api.exec_inspect(exec_id).get("ExitCode")
    return 127 if code is None else int(code)


def component_addresses(plan: AddressPlan, number: int, index: int) -> dict[str, str]:
    """A component's addresses: intra-node, and control (GNAB) or inter-node (iPHY)."""
    item = {"intra": str(plan.intra_address(index))}
    if index == 0:
        item["control"] = str(plan.control_address(number))
    else:
        item["inter"] = str(plan.inter_address(number, index))
    return item
