"""Wiring one component: its veths, addresses and switch ports.

Used when a node is built and again when a restarted component comes back with a
fresh network namespace (its old veths died with the old one). Each veth pair is
made with both ends already in their namespaces and under their final names (TX
offloads on or off as the switch it joins needs: nestednet.datapath.VethOffloads; the
control link joins a Linux bridge, so on): no end is moved afterwards, because a move
holds the kernel's rtnl lock through an RCU grace period (netlink.add_veth). The end
that stays on the host side is recorded before the pair is made (write-ahead), so a
crash at any instant leaves nothing in the host namespace that `cleanup` cannot find;
deleting it removes its peer too. The other pairs live only in namespaces of the lab's
own containers and go with them.

Wiring also makes a component ready to route (issue 17): the GNAB's loopback gets
the node address, and the kernel settings a router needs are written from here,
because /proc/sys is read-only inside a container even with CAP_NET_ADMIN
(`component_sysctls`). Every component is told its node's other components' intra-node
MACs as permanent neighbour entries (`AddressPlan.intra_neighbours` says why), so that
net needs no ARP.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyroute2 import NetlinkError

from nestednet.adapters import netlink, ovsdb, packet_sockets
from nestednet.datapath import PORT_RCVBUF_BYTES, VethOffloads
from nestednet.errors import EnvironmentProblem
from nestednet.lab.record import VETH, LabRecord
from nestednet.model import topology as topo
from nestednet.model.addressing import AddressPlan

if TYPE_CHECKING:  # not imported: the per-host helper wires without python-ovs
    from nestednet.adapters.ovsdb import Ovsdb

LAB_ID = "org.nestednet.lab"


@dataclass
class NodeHandles:
    """What wiring needs to reach one node.

    The node's *host side* (where its veth pairs are made, its iPHYs' main-bridge ports
    live and its GNAB's control end joins a control bridge) is this machine's own
    namespace for one-host labs; for a node on another host of a multi-host lab it is
    wired by that host's helper (nestednet.hostd), in whose namespace the host side is
    (``host_netns`` None there), ``host_ovs`` and ``node_ovs`` collect the OVSDB calls the
    client then applies, and the record names the host (``where``). Pids are those of
    the process doing the wiring: this machine's, or the host's as the helper reads them
    (nestednet.adapters.netlink.set_proc_root).
    """

    lab: str
    node: int
    parent_pid: int
    node_ovs: Ovsdb
    host_ovs: Ovsdb | PortBatch
    """The host's switch, or what holds its ports back (`create`: HostPorts)."""
    plan: AddressPlan
    record: LabRecord
    offloads: VethOffloads
    host_netns: str | None = None
    """The host side's network namespace (a /proc/PID/ns/net path); None: this machine's."""
    where: str = "host"
    """The host's name in the lab record ("host": this machine)."""
    control_on_host: bool = False
    """False: the GNAB's control end is made in the lab's control namespace here, on the
    CA's bridge. True (multi-host): it stays on its host, on that host's control bridge,
    which a tunnel joins to the CA (nestednet.lab.multihost.make_control_net)."""
    inter_mtu: int | None = None
    """MTU of the iPHYs' inter-node interfaces (None: the kernel's default)."""
    control_mtu: int | None = None
    """MTU of the GNAB's control interface (None: the kernel's default)."""


def _ids(handles: NodeHandles, component: int) -> dict[str, str]:
    return {LAB_ID: handles.lab, "org.nestednet.node": topo.node_name(handles.node),
            "org.nestednet.component": topo.component_name(component)}


PATH_TTL = 255
"""Initial TTL / hop limit in every component: the most a packet can carry."""


def component_sysctls(component: int) -> dict[str, str]:
    """Kernel settings of a component's namespace (keys as under /proc/sys).

    iPHYs forward. Reverse-path filtering is off in them: with more than one path
    between nodes, the way back may use another interface than the way in. No ICMP
    redirects are sent or followed: on the inter-node net, which looks like one
    subnet but where only linked iPHYs hear each other, a redirect would point at a
    neighbour that cannot be reached. IPv6 is on (Docker turns it off for
    network-less containers) because routing daemons such as babeld speak over IPv6
    link-local addresses even when they carry IPv4 routes. Packets start with the
    largest TTL and hop limit: a path costs two IP hops per node it crosses (the iPHY in,
    the iPHY out), so with the usual 64 nothing, not even an echo reply, crosses more
    than about 31 nodes.
    """
    ifaces = [topo.CHILD_INTRA_IF] + ([topo.CHILD_INTER_IF] if component else [])
    settings: dict[str, str] = {"net/ipv4/ip_default_ttl": str(PATH_TTL),
                                "net/ipv6/conf/all/hop_limit": str(PATH_TTL),
                                "net/ipv6/conf/default/hop_limit": str(PATH_TTL)}
    for conf in ("all", "default", *ifaces):
        settings[f"net/ipv6/conf/{conf}/disable_ipv6"] = "0"
        settings[f"net/ipv6/conf/{conf}/accept_dad"] = "0"
        settings[f"net/ipv4/conf/{conf}/accept_redirects"] = "0"
        settings[f"net/ipv4/conf/{conf}/send_redirects"] = "0"
        if component:
            settings[f"net/ipv4/conf/{conf}/rp_filter"] = "0"
    if component:
        settings["net/ipv4/ip_forward"] = "1"
        settings["net/ipv6/conf/all/forwarding"] = "1"
    return settings


def add_veth(host: netlink.IPRoute, record: LabRecord, name: str, peer: str, *,
             offloads: bool, where: str = "host", netns: str | None = None,
             name_in: netlink.Where = None, peer_in: netlink.Where = None) -> None:
    """Record ``name`` (on host ``where``), then make the pair from ``host``'s namespace
    ``netns``, each end made in its own namespace (``name_in``, ``peer_in``: None for
    ``host``'s) under its final name. Refused (nothing recorded) when a name that would
    land in ``host``'s namespace is taken, so a record never names an interface someone
    else made; the ends made elsewhere go into namespaces of this lab's own containers."""
    for taken in (n for n, place in ((name, name_in), (peer, peer_in))
                  if place is None and netlink.exists(host, n)):
        raise EnvironmentProblem(f"cannot create veth {name}/{peer}: {taken} exists already"
                                 + ("" if where == "host" else f" on {where}"),
                                 hint="`nestednet cleanup` removes leftovers of crashed labs")
    record.add(VETH, name, where)
    netlink.add_veth(host, name, peer, offloads=offloads, netns=netns, a_in=name_in,
                     b_in=peer_in)


def recorded_names(lab: str, node: int, components: list[int]) -> list[str]:
    """The interface names `wire_component` records for ``components`` of ``node``: what
    a caller that wires through another process (the per-host helper, nestednet.hostd)
    writes to the lab record before asking it to wire."""
    names = []
    for index in components:
        names.append(topo.veth_name(lab, node, "intra-parent", index))
        names.append(topo.veth_name(lab, node, "control-host" if index == 0 else "inter-host",
                                    index))
    return names


def wire_component(h: NodeHandles, component: int, child_pid: int) -> None:
    """Connect component ``component`` (0 = GNAB) whose host pid is ``child_pid``."""
    lab, node = h.lab, h.node
    intra_parent, outer = recorded_names(lab, node, [component])
    with netlink.route(h.host_netns) as host:
        add_veth(host, h.record, intra_parent, topo.CHILD_INTRA_IF, offloads=h.offloads.nodes,
                 where=h.where, netns=h.host_netns, name_in=h.parent_pid, peer_in=child_pid)
        if component == 0:
            add_veth(host, h.record, outer, topo.CHILD_CONTROL_IF, offloads=True,
                     where=h.where, netns=h.host_netns, peer_in=child_pid,
                     name_in=None if h.control_on_host else topo.control_netns(lab))
            if h.control_on_host:
                netlink.port_up(host, outer, master=topo.control_bridge(lab),
                                namespace=h.host_netns)
            outer_address, outer_mtu = h.plan.control_address(node), h.control_mtu
        else:
            add_veth(host, h.record, outer, topo.CHILD_INTER_IF, offloads=h.offloads.main,
                     where=h.where, netns=h.host_netns, peer_in=child_pid)
            netlink.port_up(host, outer, namespace=h.host_netns)
            outer_address, outer_mtu = h.plan.inter_address(node, component), h.inter_mtu
    netlink.write_sysctls(netlink.netns_path(child_pid), component_sysctls(component))
    outer_if = topo.CHILD_CONTROL_IF if component == 0 else topo.CHILD_INTER_IF
    with netlink.route(netlink.netns_path(child_pid)) as child:
        netlink.configure(child, "lo", h.plan.node_address(node) if component == 0 else None)
        netlink.configure(child, topo.CHILD_INTRA_IF, h.plan.intra_address(component),
                          mac=h.plan.mac_address(node, component, 1))
        netlink.add_neighbours(child, topo.CHILD_INTRA_IF,
                               h.plan.intra_neighbours(node, component))
        netlink.configure(child, outer_if, outer_address,
                          mac=h.plan.mac_address(node, component, 2), mtu=outer_mtu)
    with netlink.route(netlink.netns_path(h.parent_pid)) as parent:
        netlink.port_up(parent, intra_parent, namespace=netlink.netns_path(h.parent_pid))
    h.node_ovs.add_port(topo.node_bridge(lab), intra_parent, external_ids=_ids(h, component))
    if component == 0:
        if not h.control_on_host:
            with netlink.route(topo.control_netns(lab)) as ctl:
                netlink.port_up(ctl, outer, master=topo.control_bridge(lab),
                                namespace=topo.control_netns(lab))
    else:
        h.host_ovs.add_port(topo.main_bridge(lab), outer, external_ids=_ids(h, component),
                            ofport=h.plan.port_number(node, component))


class PortBatch:
    """A switch's `add_port` calls held back, then made as one `add_ports` per bridge:
    ovs-vswitchd reconfigures once for a node's ports instead of once per port, and each
    reconfiguration of the host's main bridge walks all its ports."""

    def __init__(self) -> None:
        self.ports: dict[str, list[tuple[str, dict]]] = {}

    def add_port(self, bridge: str, port: str, **kwargs: object) -> None:
        self.ports.setdefault(bridge, []).append((port, kwargs))

    def add_to(self, switch: Ovsdb) -> None:
        for bridge, ports in self.ports.items():
            switch.add_ports(bridge, ports)


class HostPorts(PortBatch):
    """Every port a create adds to the host's switch, held until all nodes are built
    and then added in one transaction a bridge (nestednet.lab.create).

    ovs-vswitchd reconfigures its bridges at every link change in its namespace (its
    interface notifier), not only at OVSDB transactions, and each reconfiguration and
    the status refresh after it visit every port it has: with ports added node by node,
    a create's cost in the host switch grows with the square of the lab. Ports that
    join at the end make each of those passes cheap. Nothing reaches a component
    through the host switch during a create (the main bridge has no flows yet), so
    nothing waits for them. Shared by the create's node builders, hence the lock."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def add_port(self, bridge: str, port: str, **kwargs: object) -> None:
        with self.lock:
            super().add_port(bridge, port, **kwargs)

    def add_ports(self, bridge: str, ports: list[tuple[str, dict]]) -> None:
        with self.lock:
            self.ports.setdefault(bridge, []).extend(ports)

    def names(self) -> list[str]:
        with self.lock:
            return [port for ports in self.ports.values() for port, _ in ports]


def wire_node(h: NodeHandles, datapath: str, children: dict[int, int]) -> None:
    """A node's internal bridge, then each component (index -> its pid in the parent's
    pid namespace), then all their switch ports at once on each switch; a netlink
    refusal is named with its component, node and host."""
    h.node_ovs.add_bridge(topo.node_bridge(h.lab), datapath_type=datapath,
                          external_ids={LAB_ID: h.lab}, fail_mode="standalone")
    pids = netlink.host_pids(h.parent_pid, list(children.values()))
    node_ports, host_ports = PortBatch(), PortBatch()
    batched = dataclasses.replace(h, node_ovs=node_ports, host_ovs=host_ports)
    for index, inner_pid in children.items():
        try:
            wire_component(batched, index, pids[inner_pid])
        except NetlinkError as exc:
            where = "" if h.where == "host" else f" on host {h.where}"
            raise EnvironmentProblem(f"wiring {topo.component_name(index)} of node "
                                     f"n{h.node}{where} failed: {exc}") from exc
    node_ports.add_to(h.node_ovs)
    host_ports.add_to(h.host_ovs)


def unwire_component(h: NodeHandles, component: int) -> None:
    """Drop the switch ports and veths of a component whose namespace was replaced (a
    restart), before re-wiring it.

    Each veth end is deleted in the namespace where `wire_component` made it (the
    intra-net end in the parent, the control end on the control bridge's side): the old
    namespace's death takes the pairs with it only once nothing holds it, and a user's
    component's sidecar holds it until its own restart, after which the kernel frees it
    asynchronously; re-wiring before that met the old ends (seen: `swap --restart` of a
    user's iPHY on a swarm lab, EEXIST on the intra-net end)."""
    intra_parent, outer = recorded_names(h.lab, h.node, [component])
    h.node_ovs.del_port(intra_parent)
    if component > 0:
        h.host_ovs.del_port(outer)
    control_side = h.host_netns if h.control_on_host else topo.control_netns(h.lab)
    for veth, netns in ((intra_parent, netlink.netns_path(h.parent_pid)),
                        (outer, h.host_netns if component else control_side)):
        with netlink.route(netns) as ipr:
            netlink.delete(ipr, veth)


def enlarge_port_buffers(parent_pid: int, node_ports: int, host_ports: list[str],
                         timeout: float = 10.0) -> int:
    """Give a node's port sockets PORT_RCVBUF_BYTES (nestednet.datapath says why): all
    ``node_ports`` of a nested node's own switch (none for a flat node, whose switch is
    in the host's OVS), and in the host's switch only this node's veths ``host_ports``
    (the host's OVS is the user's: its other ports stay as they are). Returns how many
    sockets have it.

    ovs-vswitchd opens a port's socket shortly after the port's OVSDB row is written, so
    this waits (briefly) until all are there. A performance setting only: where the
    kernel refuses (no pidfd_getfd, no ptrace right) the defaults stay, and the lab works
    as before, with more retransmits."""
    deadline = time.monotonic() + timeout
    node_done = host_done = 0
    while True:
        try:
            if node_done < node_ports and (pid := _node_vswitchd(parent_pid)) is not None:
                node_done = packet_sockets.set_receive_buffers(pid, PORT_RCVBUF_BYTES)
            if host_done < len(host_ports) and (pid := _host_vswitchd()) is not None:
                host_done = packet_sockets.set_receive_buffers(
                    pid, PORT_RCVBUF_BYTES, {socket.if_nametoindex(n) for n in host_ports})
        except OSError:
            break
        if ((node_done >= node_ports and host_done >= len(host_ports))
                or time.monotonic() > deadline):
            break
        time.sleep(0.05)
    return node_done + host_done


def _node_vswitchd(parent_pid: int) -> int | None:
    """Host pid of the node's ovs-vswitchd: it detaches, so the parent's entrypoint (PID
    1 of the parent's namespace) is its parent."""
    with open(f"/proc/{parent_pid}/task/{parent_pid}/children") as f:
        for pid in f.read().split():
            try:
                with open(f"/proc/{pid}/comm") as comm:
                    if comm.read().strip() == "ovs-vswitchd":
                        return int(pid)
            except OSError:
                continue
    return None


def _host_vswitchd() -> int | None:
    try:
        return int(ovsdb.HOST_VSWITCHD_PIDFILE.read_text().strip())
    except (OSError, ValueError):
        return None
