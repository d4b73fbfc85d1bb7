"""Flat labs: the same topology built the Containernet way, as the evaluation baseline.

The NestedNet paper compares nested nodes with Containernet, where a node is one
container and its components are processes in it. A flat lab is exactly that, with
everything else kept equal so that a benchmark compares only the node design:

* node i is ONE container `<lab>-n<i>` from the component image (it has what the
  components run: iperf3, ping, python3, the GNAB agent); no inner engine and no
  per-node OVS daemons. PID 1 is a small shell that starts one process per
  component (`nestednet-component` with NESTEDNET_COMPONENT=gnab|iphyJ), so the
  GNAB runs its agent and the iPHYs idle, as their nested counterparts do;
* all components share that container's single network namespace. Each has its
  own interfaces, named after it: `gnab`, `iphyJ` (intra-node, same plan: GNAB .1,
  iPHY j .(10+j)), `iphyJ-inter` (inter-node, same address and main-bridge port as
  nested) and `ctl` (GNAB control link to the CA). Packets an iPHY sends to an
  inter-node peer leave through its own interface thanks to one policy-routing
  rule per iPHY (`from <its inter address> lookup table 100+J`);
* the node's switch is an OVS bridge `<lab>-s<i>` on the host's Open vSwitch
  (Containernet/Mininet keeps every switch in the host's OVS), with each
  component's intra interface as a port. Because all components' addresses are
  local to one namespace, the kernel delivers component-to-component traffic
  itself (the loopback path) and never through that switch: this is Containernet's
  behaviour, and the reason flat nodes isolate nothing;
* the main bridge, its port numbers and the link flows are those of nested labs,
  so `link add/del/list` work unchanged, as do `status`, `delete` and `cleanup`;
* --cpus/--memory are per component in nested labs; a process in a flat node has
  no cgroup of its own, so the node container gets (M+1) times the value (CPU
  capped at the machine's cores): Containernet's only knob.

`nestednet exec` in a flat lab runs in the node container with NESTEDNET_COMPONENT
and the component's addresses in the environment; a command that must act as one
component binds to its address (`iperf3 -B`, `ping -I`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from ipaddress import IPv4Interface
from pathlib import Path

import docker
import docker.errors

from nestednet import capabilities, images
from nestednet.adapters import docker_engine, netlink
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.lab.record import CONTAINER, OVS_BRIDGE, VETH, LabRecord
from nestednet.lab.wiring import LAB_ID
from nestednet.model import topology as topo
from nestednet.model.addressing import CA_PORT, AddressPlan

KIND = "flat"
PHASES = ("containers", "wiring")
ROUTE_TABLE_BASE = 100
CONTROL_IF = "ctl"

SUPERVISOR = """\
pids=
trap 'kill $pids 2>/dev/null; exit 0' TERM INT
for c in $NESTEDNET_COMPONENTS; do
    role=iphy; [ "$c" = gnab ] && role=gnab
    NESTEDNET_COMPONENT=$c NESTEDNET_ROLE=$role /usr/local/bin/nestednet-component &
    pids="$pids $!"
done
while :; do sleep 3600 & wait $!; done
"""
"""PID 1 of a flat node: one process per component, stopped together on SIGTERM."""

Notify = Callable[[str, int], None]


# --- names (pure) ----------------------------------------------------------------


def node_switch(lab: str, node: int) -> str:
    """The host OVS bridge standing in for node ``node``'s internal switch."""
    name = f"{lab}-s{node}"
    if len(name) > topo.IFNAME_MAX:
        raise UsageError(f"bridge name {name} longer than {topo.IFNAME_MAX} characters")
    return name


def intra_if(component: int) -> str:
    return topo.component_name(component)


def inter_if(iphy: int) -> str:
    return f"iphy{iphy}-inter"


def route_table(iphy: int) -> int:
    return ROUTE_TABLE_BASE + iphy


def container_limits(cpus: float | None, memory_mb: int | None, iphys: int,
                     cores: int) -> tuple[int | None, str | None]:
    """Per-component limits turned into whole-container ones: (nano_cpus, mem_limit)."""
    components = iphys + 1
    nano = int(min(cpus * components, cores) * 1e9) if cpus else None
    mem = f"{memory_mb * components}m" if memory_mb else None
    return nano, mem


def node_plan(plan: AddressPlan, node: int) -> list[dict]:
    """Every interface of flat node ``node``: name, address, and what it attaches to."""
    rows = []
    for index in range(plan.shape.iphys + 1):
        comp = topo.component_name(index)
        rows.append({"component": comp, "ifname": intra_if(index), "net": "intra",
                     "address": str(plan.intra_address(index))})
        if index == 0:
            rows.append({"component": comp, "ifname": CONTROL_IF, "net": "control",
                         "address": str(plan.control_address(node))})
        else:
            rows.append({"component": comp, "ifname": inter_if(index), "net": "inter",
                         "address": str(plan.inter_address(node, index)),
                         "table": route_table(index),
                         "ofport": plan.port_number(node, index)})
    return rows


def component_env(plan: AddressPlan, lab: str, node: int, component: int) -> dict[str, str]:
    """What `exec` tells a command about the component it acts for."""
    env = {"NESTEDNET_LAB": lab, "NESTEDNET_NODE": topo.node_name(node),
           "NESTEDNET_COMPONENT": topo.component_name(component),
           "NESTEDNET_ROLE": "gnab" if component == 0 else "iphy",
           "NESTEDNET_INTRA": str(plan.intra_address(component).ip)}
    if component > 0:
        env["NESTEDNET_INTER"] = str(plan.inter_address(node, component).ip)
    return env


def is_flat(meta: dict) -> bool:
    return meta.get("kind") == KIND


# --- create ------------------------------------------------------------------------


def create_flat(request, notify: Notify = lambda phase, node: None) -> dict:
    """Build a flat lab (``request`` is a create.CreateRequest); rolls back on any failure."""
    from nestednet.lab import create as lab_create

    shape, plan = lab_create.validate(request)
    if os.geteuid() != 0:
        raise EnvironmentProblem("nestednet create needs root (namespaces, veths, OVS)")
    client = docker_engine.connect()
    images.require(client, images.COMPONENT_IMAGE)
    host_ovs = Ovsdb()
    record = LabRecord(request.lab)
    clock = lab_create.PhaseClock()
    started = time.monotonic()
    try:
        lab_create._check_free(request.lab, record, client, host_ovs, shape)
        record.claim()
        datapath = capabilities.ovs_datapath()
        meta = lab_create.initial_meta(
            request, shape, plan, datapath, "flat (component image, default capabilities)",
            kind=KIND)
        record.write_meta(meta)
        try:
            with clock.span(lab_create.LAB_PHASE):
                lab_create._lab_networks(request.lab, record, host_ovs, datapath, plan)
            builder = _FlatBuilder(request, plan, record, client, host_ovs, datapath, clock,
                                   notify)
            builder.build_all()
        except BaseException as exc:
            lab_create.roll_back(record, client, host_ovs, exc)
            raise
        return lab_create.complete(record, meta, started, clock)
    finally:
        host_ovs.close()


class _FlatBuilder:
    def __init__(self, request, plan: AddressPlan, record: LabRecord,
                 client: docker.DockerClient, host_ovs: Ovsdb, datapath: str, clock,
                 notify: Notify) -> None:
        self.request, self.plan, self.record = request, plan, record
        self.client, self.host_ovs, self.datapath = client, host_ovs, datapath
        self.clock, self.notify = clock, notify

    def build_all(self) -> None:
        with ThreadPoolExecutor(max_workers=self.request.jobs,
                                thread_name_prefix="nestednet-flat") as pool:
            futures = [pool.submit(self.build, i) for i in self.plan.shape.node_numbers()]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    for other in futures:
                        other.cancel()
                    wait(futures)
                    raise f.exception()

    def build(self, node: int) -> None:
        from nestednet.lab.create import labels

        lab, shape = self.request.lab, self.plan.shape
        name = topo.parent_container(lab, node)
        nano, mem = container_limits(self.request.cpus, self.request.memory_mb, shape.iphys,
                                     os.cpu_count() or 1)
        env = {
            "NESTEDNET_LAB": lab, "NESTEDNET_NODE": topo.node_name(node),
            "NESTEDNET_COMPONENTS": " ".join(shape.components()),
            "NESTEDNET_CA": f"{self.plan.ca_address().ip}:{CA_PORT}",
            "NESTEDNET_IPHYS": ",".join(f"{topo.component_name(j)}="
                                        f"{self.plan.intra_address(j).ip}"
                                        for j in range(1, shape.iphys + 1)),
        }
        with self.clock.span("containers"):
            self.record.add(CONTAINER, name)
            try:
                container = docker_engine.start_container(
                    self.client, images.COMPONENT_IMAGE, name=name,
                    labels=labels(lab, node=topo.node_name(node), role="flat-node"),
                    command=["sh", "-c", SUPERVISOR], environment=env,
                    hostname=topo.node_name(node), mem_limit=mem, nano_cpus=nano)
            except docker.errors.DockerException as exc:
                raise EnvironmentProblem(f"starting flat node {name} failed: "
                                         f"{docker_engine.explain(exc)}") from exc
        self.notify("containers", node)
        with self.clock.span("wiring"):
            container.reload()
            self.wire(node, int(container.attrs["State"]["Pid"]))
        self.notify("wiring", node)

    def wire(self, node: int, pid: int) -> None:
        lab, plan = self.request.lab, self.plan
        switch = node_switch(lab, node)
        self.host_ovs.add_bridge(switch, datapath_type=self.datapath,
                                 external_ids={LAB_ID: lab}, fail_mode="standalone")
        self.record.add(OVS_BRIDGE, switch)
        nsname = netlink.netns_path(pid)

        def veth(role: str, index: int) -> str:
            return topo.veth_name(lab, node, role, index)

        ids = {LAB_ID: lab, "org.nestednet.node": topo.node_name(node)}
        with netlink.route() as host:
            for index in range(plan.shape.iphys + 1):
                port, inside = veth("intra-parent", index), veth("intra-child", index)
                netlink.add_veth(host, port, inside)
                self.record.add(VETH, port)
                netlink.move(host, inside, pid, intra_if(index))
                netlink.up(host, port)
                comp_ids = {**ids, "org.nestednet.component": topo.component_name(index)}
                self.host_ovs.add_port(switch, port, external_ids=comp_ids)
                if index == 0:
                    outer, inside = veth("control-host", 0), veth("control-child", 0)
                    netlink.add_veth(host, outer, inside)
                    self.record.add(VETH, outer)
                    netlink.move(host, inside, pid, CONTROL_IF)
                    netlink.move(host, outer, topo.control_netns(lab))
                    with netlink.route(topo.control_netns(lab)) as ctl:
                        netlink.configure(ctl, outer, master=topo.control_bridge(lab))
                else:
                    outer, inside = veth("inter-host", index), veth("inter-child", index)
                    netlink.add_veth(host, outer, inside)
                    self.record.add(VETH, outer)
                    netlink.move(host, inside, pid, inter_if(index))
                    netlink.up(host, outer)
                    self.host_ovs.add_port(topo.main_bridge(lab), outer, external_ids=comp_ids,
                                           ofport=plan.port_number(node, index))
        rows = node_plan(plan, node)
        _sysctls(nsname, [r["ifname"] for r in rows])
        with netlink.route(nsname) as ns:
            netlink.up(ns, "lo")
            for row in rows:
                address = IPv4Interface(row["address"])
                netlink.configure(ns, row["ifname"], address)
                if row["net"] == "inter":
                    # One table per iPHY: its inter-node packets leave by its own port.
                    ns.route("add", dst=str(address.network), oif=netlink.index(ns,
                             row["ifname"]), prefsrc=str(address.ip), table=row["table"])
                    ns.rule("add", src=str(address.ip), src_len=32, table=row["table"],
                            priority=row["table"])


def _sysctls(namespace: str, ifnames: list[str]) -> None:
    """ARP answered and announced per interface, no reverse-path filter (many iPHYs share
    one subnet in one namespace)."""
    settings = {"net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2",
                "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0"}
    settings |= {f"net/ipv4/conf/{name}/rp_filter": "0" for name in ifnames}
    try:
        netlink.write_sysctls(namespace, settings)
    except OSError as exc:
        raise EnvironmentProblem(f"setting sysctls in a flat node failed: {exc}") from exc


# --- using a flat lab -------------------------------------------------------------------


def _container(lab, node: int):
    name = topo.parent_container(lab.record.lab, node)
    try:
        return lab.client.containers.get(name)
    except docker.errors.NotFound as exc:
        raise EnvironmentProblem(f"flat node {name} is gone",
                                 hint=f"`nestednet delete --lab {lab.record.lab}`") from exc


def exec_in(lab, node: str, component: str, command: list[str],
            out: Callable[[bytes], None], err: Callable[[bytes], None]) -> int:
    """`nestednet exec` in a flat lab: the node container, acting for ``component``."""
    from nestednet.model.addressing import plan_from_dict

    number = lab.shape.check_node(node)
    index = lab.shape.check_component(component)
    if not command:
        raise UsageError("no command given: nestednet exec NODE COMPONENT -- CMD...")
    container = _container(lab, number)
    if container.status != "running":
        raise UsageError(f"{node} is not running (it is {container.status})")
    env = component_env(plan_from_dict(lab.shape, lab.meta["plan"]), lab.record.lab, number,
                        index)
    api = lab.client.api
    exec_id = api.exec_create(container.id, command, stdout=True, stderr=True,
                              environment=env)["Id"]
    for stdout, stderr in api.exec_start(exec_id, stream=True, demux=True):
        if stdout:
            out(stdout)
        if stderr:
            err(stderr)
    code = api.exec_inspect(exec_id).get("ExitCode")
    return 127 if code is None else int(code)


def component_pids(container_pid: int) -> dict[str, int]:
    """Component name -> host pid of its process (children of the node's PID 1)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            status = Path(f"/proc/{entry}/status").read_text()
            ppid = int(next(ln.split()[1] for ln in status.splitlines()
                            if ln.startswith("PPid:")))
            if ppid != container_pid:
                continue
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            for item in env:
                if item.startswith(b"NESTEDNET_COMPONENT="):
                    found[item.split(b"=", 1)[1].decode()] = int(entry)
    return found


def node_status(lab, number: int, plan: AddressPlan) -> dict:
    """One node of `nestednet status` for a flat lab (components are processes)."""
    from nestednet.lab.status import component_addresses, node_container

    entry, container, pid = node_container(lab, number)
    entry["kind"] = KIND
    if container is None:
        return entry
    pids = component_pids(pid) if pid else {}
    components = []
    for index, component in enumerate(lab.shape.components()):
        components.append({"component": component,
                           "state": "running" if component in pids else "not running",
                           "pid": pids.get(component),
                           **component_addresses(plan, number, index),
                           "interface": intra_if(index)})
    entry["components"] = components
    return entry
