"""The nested node design: a Docker-in-Docker parent per node, a child container per component.

Per node the phases are: image (clone the inner data-root template), parents (start
the Docker-in-Docker parent), inner daemons (wait for its engine and OVS), children
(GNAB + iPHY containers through the inner engine) and wiring (veths, addresses,
switch ports). The lab-wide image template is made once, before the nodes.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import docker.errors

from nestednet import images
from nestednet.adapters import cgroups, docker_engine, netlink
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.nodes import (
    PARENT_CAPSET_OPTIONS,
    PARENT_PRIVILEGED_OPTIONS,
    parent_security_mode,
)
from nestednet.datapath import VethOffloads, reads_ports_by_socket
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.lab import engine, node_image, wiring
from nestednet.lab.design import (
    Build,
    NodeDesign,
    Write,
    component_addresses,
    component_environment,
    labels,
    node_container,
    run_in_child,
)
from nestednet.lab.nodes import Lab
from nestednet.lab.record import CONTAINER
from nestednet.lab.wiring import NodeHandles, enlarge_port_buffers, wire_node
from nestednet.model import topology as topo
from nestednet.model.addressing import AddressPlan, plan_from_dict
from nestednet.routing import strategies
from nestednet.routing.strategy import RoutingStrategy

TEMPLATE_PHASE = "image template"
"""Once per component image id (seconds); later creates reuse it (milliseconds)."""

USER_CODE_DIR = "/opt/nestednet/user"
"""Where swapped-in code lands; the component entrypoint runs `run` or `main.py` from it,
and it comes first on PYTHONPATH (so a `nestednet/agent` package there replaces the agent)."""


class NestedDesign(NodeDesign):
    kind = "nested"
    phases = ("image", "parents", "inner daemons", "children", "wiring")
    routings = tuple(strategies.STRATEGIES)
    user_images = True

    def __init__(self) -> None:
        self.security: dict = {}
        self.template = None
        self.user_archives: list[Path] = []
        self.node_schema: dict | None = None
        """The nodes' OVSDB schema, from the first node connected (all run one image)."""
        self.parent_environment: dict[str, str] = {}
        """What every node's parent is started with, read once before the first node (a
        bad setting stops the create there: nestednet.lab.engine.parent_environment)."""

    def required_images(self) -> tuple[str, ...]:
        return (images.COMPONENT_IMAGE, images.DIND_IMAGE)

    def parent_security(self, client: docker.DockerClient) -> str:
        mode = parent_security_mode(images.DIND_IMAGE)
        self.security = (PARENT_PRIVILEGED_OPTIONS if mode == "privileged"
                         else PARENT_CAPSET_OPTIONS)
        return mode

    def prepare(self, build: Build) -> None:
        self.parent_environment = engine.parent_environment()
        with build.clock.span(TEMPLATE_PHASE):
            self.template = node_image.template_for(build.client, self.security)
            self.user_archives = [images.image_archive(build.client, ref)
                                  for _role, ref in build.request.images]

    # --- create -------------------------------------------------------------------

    def build_node(self, build: Build, node: int) -> None:
        lab = build.request.lab
        node_dir = build.record.node_dir(node)
        state_dir, data_dir = node_dir / "state", node_dir / "docker"
        with build.phase("image", node):
            state_dir.mkdir(parents=True)
            node_image.clone(self.template, data_dir)
        name = topo.parent_container(lab, node)
        with build.phase("parents", node):
            build.record.add(CONTAINER, name)
            try:
                parent = docker_engine.start_container(
                    build.client, images.DIND_IMAGE, name=name,
                    labels=labels(lab, node=topo.node_name(node), role="parent"),
                    security=self.security, hostname=topo.node_name(node),
                    environment=self.parent_environment,
                    binds=node_image.parent_binds(state_dir, data_dir, self.template),
                    network_disabled=True)
            except docker.errors.DockerException as exc:
                raise EnvironmentProblem(f"starting node parent {name} failed: "
                                         f"{docker_engine.explain(exc)}") from exc
        with contextlib.ExitStack() as held:
            with build.phase("inner daemons", node):
                node_image.wait_ready(state_dir, parent)
                inner = held.enter_context(engine.using(state_dir, parent))
                node_ovs = held.enter_context(contextlib.closing(
                    Ovsdb(f"unix:{state_dir}/ovs/db.sock", schema=self.node_schema)))
                self.node_schema = node_ovs.schema
            with build.phase("children", node):
                load_user_images(self.user_archives, inner)
                children = start_children(build, inner, node)
            with build.phase("wiring", node):
                parent_pid = int(parent.attrs["State"]["Pid"])
                wire_node(NodeHandles(lab, node, parent_pid, node_ovs, build.host_ports,
                                      build.plan, build.record, build.offloads),
                          build.datapath, children)
                if reads_ports_by_socket(build.datapath):
                    enlarge_port_buffers(parent_pid, len(children), [])
                routing = strategies.named(build.request.routing)
                for index in children:
                    start_routing(inner, routing, build.plan, node, index,
                                   sidecar=build.request.image_for(index) is not None)
        # Parked once built: its engine idles from here on (nestednet.lab.engine).
        engine.park([parent])

    # --- using a nested lab ---------------------------------------------------------

    def before_use(self, lab: Lab) -> None:
        with contextlib.suppress(EnvironmentProblem):  # a dead node is reported per node
            lab.wake_engines()

    def node_status(self, lab: Lab, number: int, plan: AddressPlan) -> dict:
        entry, parent, pid = node_container(lab, number)
        if parent is None:
            return entry
        states, ooms = {}, {}
        if parent.status == "running":
            try:
                with lab.inner(number) as inner:
                    children = inner.containers.list(all=True)
                states = {child.name: child.status for child in children}
                ooms = _oom_states(children, pid)
            except EnvironmentProblem:
                pass
        components = []
        for index, component in enumerate(lab.shape.components()):
            components.append({"component": component,
                               "state": states.get(component, "unknown"),
                               **ooms.get(component, {}),
                               **component_addresses(plan, number, index)})
        entry["components"] = components
        return entry

    def oom_counters(self, lab: Lab) -> dict[tuple[int, str], Path]:
        """Each child's memory cgroup: the inner engine starts children below the
        parent's own cgroup, so the host's cgroup tree holds them (nestednet.adapters
        .cgroups)."""
        counters = {}
        for number in lab.shape.node_numbers():
            parent = lab.parent(number)
            if parent.status != "running":
                continue
            # Read from the data root, which leaves a parked engine parked; its engine
            # is asked only for a node whose record lacks a component.
            children = [(c.name, c.id, c.pid) for c in docker_engine.stored_containers(
                lab.data_dir(number)).values() if c.running]
            if not set(lab.shape.components()) <= {name for name, _, _ in children}:
                with lab.inner(number) as inner:
                    children = [(c.name, c.id, int(c.attrs["State"].get("Pid") or 0))
                                for c in inner.containers.list()]
            found = child_oom_counters(children, int(parent.attrs["State"]["Pid"]))
            counters.update(((number, name), path) for name, path in found.items()
                            if name in lab.shape.components())
        return counters

    def exec_in(self, lab: Lab, node: str, component: str, command: list[str],
                out: Write, err: Write) -> int:
        number = lab.shape.check_node(node)
        lab.shape.check_component(component)
        if not command:
            raise UsageError("no command given: nestednet exec NODE COMPONENT -- CMD...")
        with lab.inner(number) as inner:
            return run_in_child(inner, lab.child(inner, component), node, component,
                                command, out, err)

    def swap(self, lab: Lab, node: str, component: str, path: Path, *,
             restart: bool) -> dict:
        """Copy ``path`` into the component's USER_CODE_DIR; with ``restart``, restart it
        alone.

        A restarted container gets a fresh network namespace, so the component is wired
        again (same names, addresses and main-bridge port numbers, so links survive).
        """
        number = lab.shape.check_node(node)
        index = lab.shape.check_component(component)
        if not path.exists():
            raise UsageError(f"{path} does not exist")
        with lab.inner(number) as inner:
            result, inner_pid = copy_code_in(inner, lab.child(inner, component), node,
                                             component, path, restart=restart)
        if inner_pid is None:
            return result
        parent = lab.parent(number)
        parent_pid = int(parent.attrs["State"]["Pid"])
        plan = plan_from_dict(lab.shape, lab.meta["plan"])
        with (Ovsdb(f"unix:{lab.state_dir(number)}/ovs/db.sock") as node_ovs,
              Ovsdb() as host_ovs):
            handles = wiring.NodeHandles(lab.record.lab, number, parent_pid, node_ovs,
                                         host_ovs, plan, lab.record,
                                         VethOffloads.from_meta(lab.meta))
            wiring.unwire_component(handles, index)
            pid = netlink.host_pids(parent_pid, [inner_pid])[inner_pid]
            wiring.wire_component(handles, index, pid)
        if reads_ports_by_socket(lab.meta.get("datapath", "")):
            enlarge_port_buffers(parent_pid, lab.shape.iphys + 1, [
                topo.veth_name(lab.record.lab, number, "inter-host", index)] if index else [])
        with lab.inner(number) as inner:
            start_routing(inner, strategies.named(lab.meta.get("routing", "none")), plan,
                           number, index, sidecar=sidecar_of(inner, component) is not None)
        return result


def copy_code_in(inner: docker.DockerClient, child, node: str, component: str, path: Path,
                 *, restart: bool) -> tuple[dict, int | None]:
    """`swap`'s first half, for every design with a child per component: ``path`` into
    the child's USER_CODE_DIR, then, with ``restart``, the child (and its sidecar)
    restarted. Returns swap's result and the child's new pid in the parent (None when not
    restarted); a restarted child has a fresh network namespace, to be wired again."""
    if child.status == "running":
        child.exec_run(["rm", "-rf", USER_CODE_DIR])
    if not child.put_archive(USER_CODE_DIR.rsplit("/", 1)[0], _archive(path)):
        raise UsageError(f"copying {path} into {node} {component} failed")
    result = {"node": node, "component": component, "copied": str(path),
              "to": USER_CODE_DIR, "restarted": False}
    if not restart:
        return result, None
    child.restart(timeout=5)
    child.reload()
    sidecar = sidecar_of(inner, component)
    if sidecar is not None:  # it must join the restarted component's new namespace
        sidecar.restart(timeout=5)
    result["restarted"] = True
    return result, int(child.attrs["State"]["Pid"])


def start_children(build: Build, inner: docker.DockerClient, node: int) -> dict[int, int]:
    """Start the GNAB and the iPHYs; returns component index -> pid in the parent.

    The GNAB starts first and alone: a node's children share one containerd shim
    (images/dind/shim-group), and two starts racing to create that shim's socket can
    delete each other's ("try create new shim socket 2x: chmod ...: no such file or
    directory", seen in a 5-node create). Once the shim runs, later starts join it, so
    the iPHYs start concurrently: a start is mostly waiting (containerd, shim, runc),
    measured 0.57 s per child one after another against 0.31 s each two at a time.
    """
    pids = {0: _start_child(build, inner, node, 0)}
    iphys = range(1, build.shape.iphys + 1)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(iphys))),
                            thread_name_prefix=f"nestednet-n{node}") as pool:
        pids.update(zip(iphys, pool.map(lambda index: _start_child(build, inner, node, index),
                                        iphys), strict=True))
    return pids


SIDECAR_SUFFIX = "-nestednet"
"""A component from a user's image gets a sidecar `<component>-nestednet` from the
component image, sharing its network namespace: NestedNet's own processes (the GNAB
agent, routing daemons, direct's route listener) run there, so a user's image needs
neither Python nor babeld, only a process that keeps running."""


def load_user_images(archives: list[Path], inner: docker.DockerClient) -> None:
    """Users' images into this node's engine (from the host's, as `docker save`
    archives made once per create; layers the component image already brought are
    not written again)."""
    for archive in archives:
        with open(archive, "rb") as tar:
            try:
                inner.images.load(tar.read())
            except docker.errors.DockerException as exc:
                raise EnvironmentProblem(f"loading image archive {archive.name} into a node "
                                         f"failed: {docker_engine.explain(exc)}") from exc


def _start_child(build: Build, inner: docker.DockerClient, node: int, index: int) -> int:
    lab, request = build.request.lab, build.request
    component = topo.component_name(index)
    user_image = request.image_for(index)
    environment = component_environment(build.plan, lab, node, index,
                                        strategies.named(request.routing))
    common = {"labels": labels(lab, node=topo.node_name(node), component=component),
              "security": {"cap_add": list(request.component_caps)}
              if request.component_caps else None}
    try:
        child = docker_engine.start_container(
            inner, build.client.images.get(user_image).id if user_image
            else images.COMPONENT_IMAGE, name=component,
            environment={**environment, "NESTEDNET_SIDECAR": component + SIDECAR_SUFFIX}
            if user_image else environment,
            hostname=f"{topo.node_name(node)}-{component}",
            mem_limit=f"{request.memory_mb}m" if request.memory_mb else None,
            nano_cpus=int(request.cpus * 1e9) if request.cpus else None,
            # Wiring gives a child all its interfaces. Without a Docker network sandbox its
            # start costs less than half the CPU (no set-ipv6 and libnetwork-setkey
            # re-execs of dockerd): measured 0.7 against 1.5-1.7 CPU-s for five children.
            # A user's component keeps one: its sidecar joins it with container:<id>.
            network_disabled=not user_image, **common)
        if user_image:
            docker_engine.start_container(
                inner, images.COMPONENT_IMAGE, name=component + SIDECAR_SUFFIX,
                environment=environment, network_mode=f"container:{child.id}", **common)
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"starting {component} in node n{node} failed: "
                                 f"{docker_engine.explain(exc)}") from exc
    # start_container inspected it after the start: no second round trip to the engine.
    if child.status != "running":
        raise EnvironmentProblem(f"{component} in node n{node} stopped at once (image "
                                 f"{user_image or images.COMPONENT_IMAGE})",
                                 hint="a component's image must run a process that stays up")
    return int(child.attrs["State"]["Pid"])


def child_oom_counters(children: list[tuple[str, str, int]],
                       parent_pid: int) -> dict[str, Path]:
    """Child name -> its oom_kill counter file (nestednet.adapters.cgroups.oom_counter),
    for children given as (name, container id, pid in the parent).

    A child's cgroup is its id below the parent's (cgroup v1: the parent's entrypoint
    gives the inner engine its own cgroup as parent) or below the parent's `nestednet`
    (v2), so most are found without a look at /proc; the rest through their pids (one
    walk of /proc per node)."""
    if not parent_pid:
        return {}
    parent_counter = cgroups.oom_counter(parent_pid)
    found: dict[str, Path] = {}
    missing = []
    for name, ident, pid in children:
        candidates = ([parent_counter.parent / ident / parent_counter.name,
                       parent_counter.parent / "nestednet" / ident / parent_counter.name]
                      if parent_counter is not None else [])
        path = next((c for c in candidates if c.exists()), None)
        if path is not None:
            found[name] = path
        else:
            missing.append((name, pid))
    inner = dict(missing)
    if any(inner.values()):
        here = netlink.host_pids(parent_pid, [p for p in inner.values() if p])
        for name, pid in inner.items():
            counter = cgroups.oom_counter(here[pid]) if pid in here else None
            if counter is not None:
                found[name] = counter
    return found


def _oom_states(children: list, parent_pid: int) -> dict[str, dict]:
    """Each child's memory-limit record for `status`: ``oom_kills`` counted by its
    cgroup (processes killed there, the main one or an exec'd one; None: not counted)
    and Docker's ``oom_killed`` (its main process died of it)."""
    counters = child_oom_counters([(c.name, c.id, int(c.attrs["State"].get("Pid") or 0))
                                   for c in children if c.status == "running"], parent_pid)
    return {child.name: {
        "oom_kills": cgroups.oom_kills(counters[child.name])
        if child.name in counters else None,
        "oom_killed": bool(child.attrs.get("State", {}).get("OOMKilled"))}
        for child in children}


def sidecar_of(inner: docker.DockerClient, component: str):
    try:
        return inner.containers.get(component + SIDECAR_SUFFIX)
    except docker.errors.NotFound:
        return None


def start_routing(inner: docker.DockerClient, routing: RoutingStrategy, plan: AddressPlan,
                   node: int, index: int, *, sidecar: bool) -> None:
    """Start the strategy's daemon in a wired component, or in its sidecar (after
    wiring: it needs the interfaces and the kernel settings wiring writes)."""
    command = routing.daemon(plan, node, index)
    if not command:
        return
    component = topo.component_name(index)
    target = component + SIDECAR_SUFFIX if sidecar else component
    try:
        exec_id = inner.api.exec_create(target, command, stdout=True, stderr=True)["Id"]
        output = inner.api.exec_start(exec_id)
        code = inner.api.exec_inspect(exec_id).get("ExitCode")
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"starting {routing.name} routing in {component} of node "
                                 f"n{node} failed: {docker_engine.explain(exc)}") from exc
    if code != 0:
        text = output.decode(errors="replace").strip()[-300:]
        raise EnvironmentProblem(
            f"starting {routing.name} routing in {component} of node n{node} failed "
            f"(exit {code}): {text or command[0] + ' gave no output'}",
            hint=f"{command[0]} must be in the component's image")


def _archive(path: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        if path.is_dir():
            for entry in sorted(path.iterdir()):
                tar.add(entry, arcname=f"user/{entry.name}")
        else:
            tar.add(path, arcname=f"user/{path.name}")
    return buffer.getvalue()
