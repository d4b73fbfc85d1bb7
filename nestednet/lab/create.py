"""`nestednet create`: build a lab, node by node in parallel, or leave nothing behind.

One skeleton for every node design (nestednet.lab.design): validate the request,
check that the lab's names are free, claim the lab record, write what the lab will
be, make the lab-wide networks (main bridge, control namespace), build the nodes in
parallel with the design, and mark the lab complete. Any failure, or Ctrl-C, rolls
back everything recorded so far.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

import docker

from nestednet import images
from nestednet.adapters import docker_engine, netlink
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.nodes import ovs_datapath
from nestednet.datapath import VethOffloads, reads_ports_by_socket
from nestednet.errors import EnvironmentProblem, Interrupted, NestedNetError, UsageError
from nestednet.lab import designs, lock, teardown
from nestednet.lab.design import DEFAULT_JOBS, Build, CreateRequest, Notify, PhaseClock
from nestednet.lab.record import LabRecord
from nestednet.lab.runs import process_start
from nestednet.lab.wiring import LAB_ID, enlarge_port_buffers
from nestednet.model import topology as topo
from nestednet.model.addressing import CA_PORT, AddressPlan
from nestednet.routing import strategies
from nestednet.signals import deferred_sigint

__all__ = ["DEFAULT_JOBS", "HOST_PORTS_PHASE", "LAB_PHASE", "PREPARE_PHASE", "CreateRequest",
           "create", "validate"]

PREPARE_PHASE = "prepare"
"""Connecting to the engine and OVS, input and name checks, the privilege probe."""
LAB_PHASE = "lab networks"
HOST_PORTS_PHASE = "host ports"
"""Adding every node's ports to the host's switch at once (nestednet.lab.wiring.HostPorts)."""


def validate(request: CreateRequest) -> tuple[topo.Shape, AddressPlan]:
    """Everything about the input that can be wrong, checked before anything is made."""
    topo.check_new_lab_name(request.lab)
    shape = topo.Shape(request.nodes, request.iphys)
    plan = AddressPlan.for_shape(shape)
    if request.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if request.cpus is not None and not 0 < request.cpus <= (os.cpu_count() or 1):
        raise UsageError(f"--cpus must be above 0 and at most {os.cpu_count()} (this machine)")
    if request.memory_mb is not None and not 8 <= request.memory_mb <= host_memory_mb():
        raise UsageError(f"--memory is in MB per component: from 8 to {host_memory_mb()} "
                         f"(this machine's memory), not {request.memory_mb}")
    routing = strategies.named(request.routing)
    missing = routing.needs_caps - set(request.component_caps)
    if missing:
        raise UsageError(f"--routing {routing.name} installs routes in the components, which "
                         f"needs {', '.join(sorted(missing))} in --component-caps")
    design = designs.named(request.design)
    if routing.name not in design.routings:
        raise UsageError(f"--routing {routing.name} is not available in {request.design} labs",
                         hint=f"{request.design} labs route with: {', '.join(design.routings)}")
    if request.images and not design.user_images:
        raise UsageError(f"--image is not available in {request.design} labs",
                         hint="their components are processes in one container")
    design.check_request(request, shape)
    return shape, plan


def _check_user_images(client: docker.DockerClient, request: CreateRequest) -> None:
    for role, ref in request.images:
        if not docker_engine.image_exists(client, ref):
            raise UsageError(f"--image {role}={ref}: no such image in the host's Docker engine",
                             hint=f"build or pull it first (`docker image ls {ref}`)")


def host_memory_mb() -> int:
    """This machine's memory in MB (MemTotal)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 2**31


def _check_free(lab: str, record: LabRecord, client: docker.DockerClient, ovs: Ovsdb,
                shape: topo.Shape) -> None:
    if record.exists():
        raise UsageError(f"lab {lab} exists already",
                         hint=f"`nestednet delete --lab {lab}` or pick another --lab name")
    taken = [c.name for c in client.containers.list(all=True, filters={"label": f"{LAB_ID}={lab}"})]
    if topo.main_bridge(lab) in ovs.bridges():
        taken.append(f"OVS bridge {topo.main_bridge(lab)}")
    if topo.control_netns(lab) in netlink.list_netns():
        taken.append(f"netns {topo.control_netns(lab)}")
    if taken:
        raise UsageError(f"lab name {lab} is in use by resources without a lab record: "
                         f"{', '.join(taken[:5])}", hint="`nestednet cleanup` removes leftovers")


def create(request: CreateRequest, notify: Notify = lambda phase, node: None) -> dict:
    """Build the lab with the request's node design; returns its summary including
    per-phase timings."""
    shape, plan = validate(request)
    design = designs.named(request.design)
    if os.geteuid() != 0:
        raise EnvironmentProblem("nestednet create needs root (namespaces, veths, OVS)")
    started = time.monotonic()
    client = docker_engine.connect()
    for image in design.required_images():
        images.require(client, image)
    _check_user_images(client, request)
    host_ovs = Ovsdb()
    record = LabRecord(request.lab)
    clock = PhaseClock()
    try:
        with lock.hold(request.lab, "create", root=record.path.parent, wait=0):
            _check_free(request.lab, record, client, host_ovs, shape)
            record.claim()
            try:
                datapath = ovs_datapath()
                offloads = VethOffloads.choose(datapath, host_ovs.switch_config())
                meta = initial_meta(request, shape, plan, datapath,
                                    design.parent_security(client), kind=design.kind,
                                    veth_offloads=offloads.as_dict(),
                                    **design.extra_meta(request, shape))
                record.write_meta(meta)
                clock.spans[PREPARE_PHASE] = [(started, time.monotonic())]
                build = Build(request, shape, plan, record, client, host_ovs, datapath,
                              offloads, clock, notify)
                design.prepare(build)
                with clock.span(LAB_PHASE):
                    design.lab_networks(build)
                _build_nodes(build, design.build_node)
                with clock.span(HOST_PORTS_PHASE):
                    attach_host_ports(build)
            except BaseException as exc:
                with deferred_sigint():
                    removed = roll_back(record, client, host_ovs, exc)
                if isinstance(exc, KeyboardInterrupt):
                    raise Interrupted(
                        f"create of lab {request.lab} interrupted (Ctrl-C); rolled back, "
                        f"removed {len(removed.items)} resources: {', '.join(removed.items)}"
                    ) from exc
                raise
            return complete(record, meta, started, clock)
    finally:
        design.close()
        host_ovs.close()


def _build_nodes(build: Build, build_node) -> None:
    """Every node in parallel (``request.jobs`` at a time); the first failure cancels
    the nodes not yet started, waits for the running ones and is raised."""
    with ThreadPoolExecutor(max_workers=build.request.jobs,
                            thread_name_prefix="nestednet-node") as pool:
        futures = [pool.submit(build_node, build, i) for i in build.shape.node_numbers()]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:
            build.cancelled.set()
            raise
        for f in done:
            if f.exception() is not None:
                build.cancelled.set()
                for other in futures:
                    other.cancel()
                wait(futures)
                raise f.exception()


def attach_host_ports(build: Build) -> None:
    """The ports the nodes' builders held back (nestednet.lab.wiring.HostPorts), one
    transaction a bridge, their sockets then enlarged as a node's own switch's are: a
    flat baseline or a nested lab with overflowing sockets would misreport both
    (65,386 retransmits per inter-node stream, nestednet.datapath)."""
    build.host_ports.add_to(build.host_ovs)
    if reads_ports_by_socket(build.datapath):
        enlarge_port_buffers(parent_pid=0, node_ports=0, host_ports=build.host_ports.names())


def initial_meta(request: CreateRequest, shape: topo.Shape, plan: AddressPlan, datapath: str,
                 parent_security: str, **extra: object) -> dict:
    """The lab record written before anything is made (status "creating")."""
    return {
        "lab": request.lab, **extra, "status": "creating", "creator_pid": os.getpid(),
        "creator_start": process_start(os.getpid()),
        "nodes": shape.nodes, "iphys": shape.iphys, "cpus": request.cpus,
        "memory_mb": request.memory_mb, "datapath": datapath,
        "parent_security": parent_security,
        "routing": request.routing, "component_caps": list(request.component_caps),
        "images": dict(request.images),
        "plan": plan.as_dict(), "main_bridge": topo.main_bridge(request.lab),
        "ca": {"netns": topo.control_netns(request.lab),
               "bridge": topo.control_bridge(request.lab),
               "address": str(plan.ca_address()), "port": CA_PORT},
        "created_at": time.time(),
    }


def complete(record: LabRecord, meta: dict, started: float, clock: PhaseClock) -> dict:
    """Mark the lab complete in its record, with its create time and phase timings."""
    meta["status"] = "complete"
    meta["create_s"] = round(time.monotonic() - started, 3)
    meta["timings"] = clock.summary()
    record.write_meta(meta)
    return meta


def roll_back(record: LabRecord, client: docker.DockerClient, host_ovs: Ovsdb,
              error: BaseException) -> teardown.Removed:
    """Remove what a failed create made; the first error stays the one reported, and
    says what is left if removing fails too."""
    try:
        return teardown.delete_lab(record, client=client, ovs=host_ovs)
    except Exception as undo:
        if isinstance(error, NestedNetError):
            error.hint = (f"rolling back failed too ({undo}); "
                          "`nestednet cleanup` removes what is left")
        return teardown.Removed()
