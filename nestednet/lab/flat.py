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
from ipaddress import IPv4Interface
from pathlib import Path

import docker
import docker.errors

from nestednet import images
from nestednet.adapters import docker_engine, netlink
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.lab.design import (
    Build,
    NodeDesign,
    Write,
    component_addresses,
    gnab_environment,
    labels,
    node_container,
)
from nestednet.lab.nodes import Lab
from nestednet.lab.record import CONTAINER, OVS_BRIDGE
from nestednet.lab.wiring import LAB_ID, add_veth
from nestednet.model import topology as topo
from nestednet.model.addressing import AddressPlan, plan_from_dict

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


# --- the design ----------------------------------------------------------------------


class FlatDesign(NodeDesign):
    kind = KIND
    phases = PHASES
    title = "flat "

    def required_images(self) -> tuple[str, ...]:
        return (images.COMPONENT_IMAGE,)

    def parent_security(self, client: docker.DockerClient) -> str:
        return "flat (component image, Docker's default capabilities plus --component-caps)"

    def build_node(self, build: Build, node: int) -> None:
        lab, shape, plan = build.request.lab, build.shape, build.plan
        name = topo.parent_container(lab, node)
        nano, mem = container_limits(build.request.cpus, build.request.memory_mb, shape.iphys,
                                     os.cpu_count() or 1)
        env = {"NESTEDNET_LAB": lab, "NESTEDNET_NODE": topo.node_name(node),
               "NESTEDNET_COMPONENTS": " ".join(shape.components()), **gnab_environment(plan)}
        with build.phase("containers", node):
            build.record.add(CONTAINER, name)
            try:
                container = docker_engine.start_container(
                    build.client, images.COMPONENT_IMAGE, name=name,
                    labels=labels(lab, node=topo.node_name(node), role="flat-node"),
                    command=["sh", "-c", SUPERVISOR], environment=env,
                    hostname=topo.node_name(node), mem_limit=mem, nano_cpus=nano,
                    security={"cap_add": list(build.request.component_caps)}
                    if build.request.component_caps else None,
                    network_disabled=True)
            except docker.errors.DockerException as exc:
                raise EnvironmentProblem(f"starting flat node {name} failed: "
                                         f"{docker_engine.explain(exc)}") from exc
        with build.phase("wiring", node):
            container.reload()
            pid = int(container.attrs["State"]["Pid"])
            _wire(build, node, pid)

    def node_status(self, lab: Lab, number: int, plan: AddressPlan) -> dict:
        """Components are processes: their state is whether the process runs."""
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

    def exec_in(self, lab: Lab, node: str, component: str, command: list[str],
                out: Write, err: Write) -> int:
        """The node container, acting for ``component`` (its addresses in the environment)."""
        number = lab.shape.check_node(node)
        index = lab.shape.check_component(component)
        if not command:
            raise UsageError("no command given: nestednet exec NODE COMPONENT -- CMD...")
        lab.check_alive(number)
        container = _container(lab, number)
        env = component_env(plan_from_dict(lab.shape, lab.meta["plan"]), lab.record.lab,
                            number, index)
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

    def swap(self, lab: Lab, node: str, component: str, path: Path, *,
             restart: bool) -> dict:
        lab.shape.check_node(node)
        lab.shape.check_component(component)
        raise UsageError(f"lab {lab.record.lab} is flat: its components are processes in one "
                         "container, not containers that can be swapped and restarted",
                         hint="use a nested lab (create without --flat) for swap")


def _wire(build: Build, node: int, pid: int) -> None:
    """A flat node's interfaces: veths into its one namespace, its switch on the host."""
    lab, plan = build.request.lab, build.plan
    switch = node_switch(lab, node)
    build.record.add(OVS_BRIDGE, switch)
    build.host_ovs.add_bridge(switch, datapath_type=build.datapath,
                              external_ids={LAB_ID: lab}, fail_mode="standalone")
    nsname = netlink.netns_path(pid)

    def veth(role: str, index: int) -> str:
        return topo.veth_name(lab, node, role, index)

    ids = {LAB_ID: lab, "org.nestednet.node": topo.node_name(node)}
    with netlink.route() as host:
        for index in range(plan.shape.iphys + 1):
            port = veth("intra-parent", index)
            add_veth(host, build.record, port, intra_if(index), offloads=build.offloads.main,
                     peer_in=pid)
            netlink.port_up(host, port)
            comp_ids = {**ids, "org.nestednet.component": topo.component_name(index)}
            build.host_ports.add_port(switch, port, external_ids=comp_ids)
            if index == 0:
                outer = veth("control-host", 0)
                add_veth(host, build.record, outer, CONTROL_IF, offloads=True,
                         name_in=topo.control_netns(lab), peer_in=pid)
                with netlink.route(topo.control_netns(lab)) as ctl:
                    netlink.port_up(ctl, outer, master=topo.control_bridge(lab),
                                    namespace=topo.control_netns(lab))
            else:
                outer = veth("inter-host", index)
                add_veth(host, build.record, outer, inter_if(index),
                         offloads=build.offloads.main, peer_in=pid)
                netlink.port_up(host, outer)
                build.host_ports.add_port(topo.main_bridge(lab), outer, external_ids=comp_ids,
                                          ofport=plan.port_number(node, index))
    rows = node_plan(plan, node)
    _sysctls(nsname, [r["ifname"] for r in rows])
    with netlink.route(nsname) as ns:
        netlink.configure(ns, "lo", plan.node_address(node))
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


def _container(lab: Lab, node: int) -> docker.models.containers.Container:
    name = topo.parent_container(lab.record.lab, node)
    try:
        return lab.client.containers.get(name)
    except docker.errors.NotFound as exc:
        raise EnvironmentProblem(f"flat node {name} is gone",
                                 hint=f"`nestednet delete --lab {lab.record.lab}`") from exc


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
