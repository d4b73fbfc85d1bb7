"""The swarm node design: a nested lab whose nodes are spread over several hosts.

`nestednet create --hosts FILE` builds through the same skeleton as every design
(nestednet.lab.create: lock, write-ahead record, rollback); what differs is here.
Placement (nestednet.model.placement) is decided and written to the record before
anything is made; the lab networks are a main bridge per host joined by VXLAN tunnels
(nestednet.model.tunnels); a node's parent is a Docker Swarm service pinned to its
host, which starts its children through runc's --no-new-keyring --no-pivot; its iPHYs
are wired into their host's main bridge. Links are flows on one or two hosts
(`multihost.HostLinks`), so `link`, `status`, `exec` and `delete` work as on one host.

A node is wired as a nested one (nestednet.lab.wiring.wire_component, with its host's
namespace and OVS as the host side): the GNAB and the iPHYs on the node's internal
bridge, the iPHYs on their host's main bridge, the GNAB's control end on its host's
control bridge, which one VXLAN per host joins to the CA's control namespace on this
machine (multihost.make_control_net). So `nestednet run` plays scenarios on it, its CA
installing each step's flows on every host (nestednet.ca.flows.HostsInstaller).

The options of one-host nested labs take the nested design's own paths: `--cpus` and
`--memory` are per-component limits on the children (nested.start_children); users'
images (`--image`) are loaded into every parent's inner engine as the component image
is, with the nested design's sidecars; `--routing` starts the strategy's daemons after
wiring (nested.start_routing), and `run` watches each GNAB's routes in its namespace
on its host (`gnab_pid`, nestednet.lab.route_watch).

Every host is reached over the network (multihost.HostHandle): its engine, its OVSDB,
OpenFlow, and its helper (nestednet.hostd), which does the netlink part of wiring on the
host by the nested design's own wiring code and forwards the parents' sockets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors

from nestednet import images
from nestednet.adapters import docker_engine
from nestednet.datapath import VethOffloads
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.hostd import client as hostd
from nestednet.hostd import service as hostd_service
from nestednet.lab import multihost as mh
from nestednet.lab.design import (
    Build,
    CreateRequest,
    NodeDesign,
    Write,
    component_addresses,
    make_control_namespace,
    run_in_child,
)
from nestednet.lab.nested import (
    copy_code_in,
    load_user_images,
    sidecar_of,
    start_children,
    start_routing,
)
from nestednet.lab.nodes import Lab
from nestednet.lab.record import VETH, LabRecord
from nestednet.lab.wiring import LAB_ID, recorded_names
from nestednet.model import placement as pl
from nestednet.model import topology as topo
from nestednet.model.addressing import AddressPlan, plan_from_dict
from nestednet.model.tunnels import (
    ControlTunnel,
    DataPlane,
    control_mtu,
    control_tunnels,
    inner_mtu,
)
from nestednet.routing import strategies

PARENT_SECURITY = "swarm-service"
"""Parents are Swarm services: cap_add ALL, cap_drop SYS_RESOURCE, default seccomp."""
OFFLOADS = VethOffloads(main=True, nodes=True)
"""Every switch a swarm node's veths join (its host's and its own) is the parent
image's OVS, which runs with userspace TSO (nestednet.datapath): offloads stay on."""
MB = 1024 * 1024


def placement_of(request: CreateRequest, shape: topo.Shape) -> pl.Placement:
    assert request.hosts is not None
    return pl.place(shape, request.hosts, request.placement,
                    pl.parse_pins(request.pins, shape, request.hosts))


def data_plane(meta: dict) -> DataPlane:
    """A multi-host lab's data plane, from its record."""
    shape = topo.Shape(meta["nodes"], meta["iphys"])
    return DataPlane.of(meta["lab"], plan_from_dict(shape, meta["plan"]),
                        pl.hosts_from_doc(meta["hosts"]),
                        {int(k): v for k, v in meta["placement"].items()})


class SwarmDesign(NodeDesign):
    kind = "swarm"
    title = "multi-host "
    phases = ("parents", "inner daemons", "children", "wiring")
    routings = tuple(strategies.STRATEGIES)
    user_images = True

    def __init__(self) -> None:
        self.hosts: dict[str, mh.HostHandle] = {}
        self.manager: docker.DockerClient | None = None
        self.dp: DataPlane | None = None
        self.archive: Path | None = None
        self.control: list[ControlTunnel] = []
        self.user_archives: list[Path] = []
        self.unreachable: dict[str, str] = {}
        """Hosts that did not answer a tolerant open (`status`) -> why."""

    def required_images(self) -> tuple[str, ...]:
        return (images.COMPONENT_IMAGE, images.DIND_IMAGE)

    def parent_security(self, client: docker.DockerClient) -> str:
        return PARENT_SECURITY

    def check_request(self, request: CreateRequest, shape: topo.Shape) -> None:
        if request.hosts is None:
            raise UsageError("swarm labs need --hosts FILE")
        placement_of(request, shape)

    def extra_meta(self, request: CreateRequest, shape: topo.Shape) -> dict:
        assert request.hosts is not None
        return {"hosts": pl.hosts_doc(request.hosts), "placement_strategy": request.placement,
                "placement": {str(n): h for n, h in placement_of(request, shape).items()}}

    # --- create -----------------------------------------------------------------------

    def prepare(self, build: Build) -> None:
        request = build.request
        assert request.hosts is not None
        placement = placement_of(request, build.shape)
        self.dp = DataPlane.of(request.lab, build.plan, request.hosts, placement)
        self.hosts = mh.connect_all(request.hosts, sorted(set(placement.values())))
        self.manager = hostd_service.swarm_manager(self.hosts)
        for name, host in self.hosts.items():
            if not docker_engine.image_exists(host.engine, images.DIND_IMAGE):
                raise EnvironmentProblem(f"host {name} has no image {images.DIND_IMAGE}",
                                         hint="load it there: `docker save IMAGE | ssh HOST "
                                              "docker load`")
            taken = mh.leftovers(request.lab, self.manager, [host])
            if taken:
                raise UsageError(f"lab name {request.lab} is in use on host {name}: "
                                 f"{', '.join(taken[:5])}",
                                 hint="delete that lab, or pick another --lab name")
        self.archive = images.component_archive(build.client)
        # One archive per image however many roles run it: each is loaded once per node.
        self.user_archives = [images.image_archive(build.client, ref)
                              for ref in dict.fromkeys(ref for _role, ref in request.images)]
        self.control = control_tunnels(request.lab, request.hosts, placement,
                                       mh.ca_underlay_address(request.hosts, placement))

    def lab_networks(self, build: Build) -> None:
        """Per host the main bridge and its data tunnels; the control namespace here (as
        every design has) and the control net's bridge and tunnel per host."""
        assert self.dp is not None
        mh.make_networks(build.request.lab, self.dp, self.hosts, datapath=build.datapath,
                         record=build.record)
        make_control_namespace(build.record, build.plan)
        mh.make_control_net(build.request.lab, self.control, self.hosts, record=build.record)

    def build_node(self, build: Build, node: int) -> None:
        assert self.dp is not None and self.manager is not None and self.archive is not None
        lab = build.request.lab
        host = self.hosts[self.dp.host_of(topo.Endpoint(node, 1))]
        with build.phase("parents", node):
            mh.parent_service(self.manager, lab, node, host, images.DIND_IMAGE, build.record)
        with build.phase("inner daemons", node):
            parent_pid = mh.wait_parent(lab, node, host)
            inner = mh.inner_engine(lab, node, host)
        try:
            with build.phase("children", node):
                with open(self.archive, "rb") as tar:
                    inner.images.load(tar)
                load_user_images(self.user_archives, inner)
                children = start_children(build, inner, node)
            with build.phase("wiring", node):
                self._wire(build, host, node, parent_pid, children)
                routing = strategies.named(build.request.routing)
                for index in children:
                    start_routing(inner, routing, build.plan, node, index,
                                   sidecar=build.request.image_for(index) is not None)
        finally:
            inner.close()

    def _wire(self, build: Build, host: mh.HostHandle, node: int, parent_pid: int,
              children: dict[int, int]) -> None:
        """As a nested node is wired (nestednet.lab.wiring.wire_node, run by the host's
        helper), with the node's host as its host side: every interface name recorded
        here first; then the switch calls it collected, on the node's OVSDB (forwarded)
        and the host's."""
        lab = build.request.lab
        names = recorded_names(lab, node, sorted(children))
        mh.refuse_taken(host, names)
        for name in names:
            build.record.add(VETH, name, host.name)
        done = host.helper.call("wire.node", children={str(i): pid for i, pid in
                                                       children.items()},
                                datapath=build.datapath,
                                **_wiring_args(lab, node, parent_pid, host, build.shape,
                                               build.plan, names))
        with mh.node_ovsdb(lab, node, host) as node_ovs:
            mh.apply_switch_calls(lab, done["ovs"], node_ovs, host.ovs)

    def close(self) -> None:
        # The archive stays (one per image id): the next create loads it without a save.
        mh.close_all(self.hosts.values())
        self.hosts = {}
        self.unreachable = {}

    # --- using a multi-host lab -------------------------------------------------------

    def _open(self, meta: dict, *, tolerant: bool = False) -> dict[str, mh.HostHandle]:
        """Handles on the lab's hosts (opened once per design object). ``tolerant``
        (`status`): a host that does not answer is left out and noted in
        ``unreachable`` instead of failing the command."""
        if not self.hosts:
            self.dp = data_plane(meta)
            hosts = pl.hosts_from_doc(meta["hosts"])
            names = sorted(set(self.dp.placement.values()))
            if not tolerant:
                self.hosts = mh.connect_all(hosts, names)
                return self.hosts
            for name in names:
                try:
                    self.hosts[name] = mh.connect(hosts.named(name), hosts,
                                                  connect_timeout=mh.CONNECT_TIMEOUT)
                except EnvironmentProblem as exc:
                    self.unreachable[name] = str(exc)
        return self.hosts

    def _host(self, lab: Lab, number: int) -> mh.HostHandle:
        name = lab.meta["placement"][str(number)]
        if name in self.unreachable:
            raise EnvironmentProblem(f"node n{number}'s host {name} is not reachable: "
                                     f"{self.unreachable[name]}")
        return self._open(lab.meta)[name]

    def node_status(self, lab: Lab, number: int, plan: AddressPlan) -> dict:
        self._open(lab.meta, tolerant=True)
        where = lab.meta["placement"][str(number)]
        name = topo.parent_container(lab.record.lab, number)
        if where in self.unreachable:  # lost: whatever runs there, this lab cannot use it
            return {"node": topo.node_name(number), "container": name, "host": where,
                    "state": "unreachable", "error": self.unreachable[where],
                    "components": []}
        host = self._host(lab, number)
        entry: dict = {"node": topo.node_name(number), "container": name, "host": host.name}
        parent = _parent(host, lab.record.lab, name)
        if parent is None:
            entry.update(state="missing", components=[])
            return entry
        entry["state"] = parent.status
        pid_there = int(parent.attrs["State"].get("Pid") or 0)
        memory = (host.helper.call("memory", lab=lab.record.lab, node=number, pid=pid_there)
                  if pid_there else None)
        entry["memory_mb"] = round(memory["used"] / MB, 1) if memory else None
        states = {}
        if parent.status == "running":
            inner = mh.inner_engine(lab.record.lab, number, host)
            try:
                states = {c.name: c.status for c in inner.containers.list(all=True)}
            except docker.errors.DockerException:
                pass
            finally:
                inner.close()
        entry["components"] = [
            {"component": component,
             "state": states.get(component, "unknown"),
             **component_addresses(plan, number, index)}
            for index, component in enumerate(lab.shape.components())]
        return entry

    @contextlib.contextmanager
    def _child(self, lab: Lab, node: str, component: str
               ) -> Iterator[tuple[mh.HostHandle, Any, docker.DockerClient, Any]]:
        """(host, parent, inner engine, child) of a component whose node is alive."""
        number = lab.shape.check_node(node)
        lab.shape.check_component(component)
        host = self._host(lab, number)
        name = topo.parent_container(lab.record.lab, number)
        parent = _parent(host, lab.record.lab, name)
        if parent is None or parent.status != "running":
            raise EnvironmentProblem(f"node {node} is dead: its parent {name} on {host.name} "
                                     f"is {'gone' if parent is None else parent.status}")
        inner = mh.inner_engine(lab.record.lab, number, host)
        try:
            try:
                child = inner.containers.get(component)
            except docker.errors.NotFound as exc:
                raise EnvironmentProblem(f"component {component} not found in {node}") from exc
            yield host, parent, inner, child
        finally:
            inner.close()

    def exec_in(self, lab: Lab, node: str, component: str, command: list[str],
                out: Write, err: Write) -> int:
        with self._child(lab, node, component) as (_host, _parent_task, inner, child):
            return run_in_child(inner, child, node, component, command, out, err)

    def dead_nodes(self, lab: Lab) -> set[int]:
        return {n for n in lab.shape.node_numbers()
                if getattr(_parent(self._host(lab, n), lab.record.lab,
                                   topo.parent_container(lab.record.lab, n)),
                           "status", "gone") != "running"}

    def swap(self, lab: Lab, node: str, component: str, path: Path, *,
             restart: bool) -> dict:
        """As in a nested lab (nestednet.lab.nested.copy_code_in); a restarted component
        is wired again on its node's host (same names, addresses and ports: links
        survive), and its routing daemon started again (the restart killed it)."""
        number = lab.shape.check_node(node)
        index = lab.shape.check_component(component)
        if not path.exists():
            raise UsageError(f"{path} does not exist")
        with self._child(lab, node, component) as (host, parent, inner, child):
            result, inner_pid = copy_code_in(inner, child, node, component, path,
                                             restart=restart)
        if inner_pid is None:
            return result
        parent_pid = int(parent.attrs["State"]["Pid"])
        plan = plan_from_dict(lab.shape, lab.meta["plan"])
        names = recorded_names(lab.record.lab, number, [index])
        for name in names:
            lab.record.add(VETH, name, host.name)
        done = host.helper.call("wire.component", component=index, inner_pid=inner_pid,
                                **_wiring_args(lab.record.lab, number, parent_pid, host,
                                               lab.shape, plan, names))
        with mh.node_ovsdb(lab.record.lab, number, host) as node_ovs:
            mh.apply_switch_calls(lab.record.lab, done["ovs"], node_ovs, host.ovs)
        inner = mh.inner_engine(lab.record.lab, number, host)
        try:
            start_routing(inner, strategies.named(lab.meta.get("routing", "none")), plan,
                           number, index, sidecar=sidecar_of(inner, component) is not None)
        finally:
            inner.close()
        return result

    def gnab_pid(self, lab: Lab, number: int) -> int:
        """The GNAB's pid *on its node's host* (the helper maps it from the parent's pid
        namespace): what the host's helper names namespaces by."""
        with self._child(lab, topo.node_name(number), topo.component_name(0)) as (
                host, parent, _inner, child):
            parent_pid = int(parent.attrs["State"]["Pid"])
            inner_pid = int(child.attrs["State"]["Pid"])
            return mh.helper_pids(host, lab.record.lab, number, parent_pid,
                                  [inner_pid])[inner_pid]

    def route_sources(self, lab: Lab) -> list:
        """One stream per host from its helper, which watches its nodes' GNABs."""
        by_host: dict[str, dict[int, int]] = {}
        for number in lab.shape.node_numbers():
            by_host.setdefault(self._host(lab, number).name, {})[number] = \
                self.gnab_pid(lab, number)
        return [hostd.RouteStream(self.hosts[name].helper, lab.record.lab, pids)
                for name, pids in sorted(by_host.items())]

    def links(self, record: LabRecord, meta: dict | None = None) -> mh.HostLinks:
        meta = record.meta() if meta is None else meta
        hosts = self._open(meta)
        assert self.dp is not None
        return mh.HostLinks(record.lab, meta["main_bridge"], self.dp.plan, record.path.parent,
                            dp=self.dp, hosts=hosts)

    def remove_elsewhere(self, record: LabRecord, dry_run: bool
                         ) -> tuple[list[str], dict[str, str]]:
        meta = record.meta()
        if "hosts" not in meta:
            return [], {}
        done = mh.remove_recorded(record.lab, pl.hosts_from_doc(meta["hosts"]),
                                  record.resources(), dry_run)
        return done.items, done.unreachable


def _wiring_args(lab: str, node: int, parent_pid: int, host: mh.HostHandle,
                 shape: topo.Shape, plan: AddressPlan, recorded: list[str]) -> dict:
    """Wiring's view of a swarm node, for the helper (nestednet.lab.wiring.NodeHandles
    there): its host's namespace and OVS are its host side, its GNAB's control end stays
    on the host's control bridge, MTUs leave room for the tunnels; ``recorded``: the
    names already in the lab record."""
    return {"lab": lab, "node": node, "parent_pid": parent_pid,
            "shape": [shape.nodes, shape.iphys], "plan": plan.as_dict(),
            "offloads": {"main": OFFLOADS.main, "nodes": OFFLOADS.nodes}, "where": host.name,
            "inter_mtu": inner_mtu(), "control_mtu": control_mtu(), "recorded": recorded}


def _parent(host: mh.HostHandle, lab: str, name: str):
    """The node's parent container on its host (the Swarm task of its service), or None."""
    found = [c for c in host.engine.containers.list(
        all=True, filters={"label": [f"{LAB_ID}={lab}", "org.nestednet.role=parent"]})
        if c.labels.get("com.docker.swarm.service.name") == name]
    return found[0] if found else None
