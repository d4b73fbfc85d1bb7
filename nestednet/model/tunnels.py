"""The data plane of a multi-host lab: tunnels between main bridges, links as flows.

Pure. Every host keeps its own main bridge (`<lab>-main`, fail_mode=secure). The main
bridges of every pair of hosts that hold nodes are joined by ONE VXLAN tunnel port per
pair (VNI = the lab's base VNI + the pair's index). A link is still only flows: between
iPHYs on one host, the usual pair (port a -> port b, b -> a); between hosts, four
rules, two per host. The key that tells links apart inside a pair's tunnel is an
802.1Q tag: the receiving iPHY's slot on its host (its rank among that host's iPHYs).
An iPHY is in at most one link (Algorithm 1), so the tag names the link, needs no
allocation and no state besides the flows, and the far host's rule pops it and
outputs to that one port. A tag is 12 bits, so a host holds at most 4094 iPHYs.

VXLAN adds 50 bytes and the tag 4: iPHYs of a multi-host lab use a smaller MTU
(`inner_mtu`), or full-size frames would be dropped at the tunnel port.

The control net (GNABs <-> the CA) is a second, separate set of tunnels
(`control_tunnels`): on every host a Linux bridge where that host's GNAB control veths
attach, joined to the CA's control namespace on the CLI machine by one VXLAN per host
(a star: hosts never talk control among themselves, so it cannot loop). Its VNIs come
from the top of the lab's reserved range, above every host pair's
(`CONTROL_VNI_OFFSET`), so the two sets never collide.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from nestednet.errors import UsageError
from nestednet.model import topology as topo
from nestednet.model.addressing import AddressPlan
from nestednet.model.placement import HostSet, Placement

VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50
TAG_OVERHEAD = 4
MAX_SLOT = 4094
TUNNEL_OFPORT_BASE = 65000
"""Tunnel ports ask for ofport BASE + peer host index: above every iPHY port number."""
VNI_PAIRS = 4096
"""VNIs reserved per lab (one per host pair: 64 hosts make 2016 pairs)."""
MAX_HOSTS = 64
"""Hosts in a hosts file at most (its schema's maxItems)."""
CONTROL_VNI_OFFSET = VNI_PAIRS - MAX_HOSTS
"""Host i's control tunnel has VNI base + CONTROL_VNI_OFFSET + i: the top 64 of the
lab's range, which no host pair reaches (64 hosts make 2016 pairs)."""
OPENFLOW_PORT_FIRST = 16700
OPENFLOW_PORTS = 1000
"""A lab's main bridges listen for OpenFlow on one TCP port in
[OPENFLOW_PORT_FIRST, OPENFLOW_PORT_FIRST + OPENFLOW_PORTS) unless the hosts file says
which (`openflow_port`): the range a firewall between the CLI machine and the hosts
must let through."""
DPID_MARK = 0x4E4E
"""The top 16 bits of every main bridge's datapath id ("NN")."""


def inner_mtu(underlay_mtu: int = 1500) -> int:
    """The largest iPHY frame payload that crosses a tunnel whole."""
    return underlay_mtu - VXLAN_OVERHEAD - TAG_OVERHEAD


def control_mtu(underlay_mtu: int = 1500) -> int:
    """The GNABs' control interface MTU in a multi-host lab: the control VXLAN carries
    no tag, only its own 50 bytes."""
    return underlay_mtu - VXLAN_OVERHEAD


def vni_base(lab: str, hosts: HostSet) -> int:
    """The hosts file's `vni`, or one derived from the lab name (labs sharing hosts get
    different VNIs; a clash is refused by the kernel when the port is made)."""
    if hosts.vni is not None:
        return hosts.vni
    return 1 + (zlib.crc32(lab.encode()) % 4095) * VNI_PAIRS


def openflow_port(lab: str, hosts: HostSet) -> int:
    """The TCP port of the OpenFlow listener on every main bridge of ``lab``: the hosts
    file's `openflow_port`, or one derived from the lab name as `vni_base` derives VNIs
    (labs sharing hosts get different ports; a clash is caught by the datapath id a
    session checks, `datapath_id`)."""
    if hosts.openflow_port is not None:
        return hosts.openflow_port
    return OPENFLOW_PORT_FIRST + zlib.crc32(b"openflow:" + lab.encode()) % OPENFLOW_PORTS


def datapath_id(lab: str, host_index: int) -> int:
    """The datapath id fixed on ``lab``'s main bridge of host number ``host_index``: an
    OpenFlow session reads it from the switch's FEATURES reply and refuses a switch
    that is not this bridge (another lab's listener on the same port, a stale one)."""
    return (DPID_MARK << 48) | ((zlib.crc32(lab.encode()) & 0xFFFFFFFF) << 16) | host_index


@dataclass(frozen=True)
class Tunnel:
    """One end of a host pair's tunnel: a port on ``host``'s main bridge."""

    host: str
    peer: str
    name: str
    ofport: int
    local_ip: str
    remote_ip: str
    vni: int


def tunnels(lab: str, hosts: HostSet, placement: Placement) -> dict[str, list[Tunnel]]:
    """Host name -> its tunnel ends, one per other host that holds nodes."""
    used = [h for h in hosts.hosts if h.name in set(placement.values())]
    base = vni_base(lab, hosts)
    out: dict[str, list[Tunnel]] = {h.name: [] for h in used}
    pair = 0
    for i, a in enumerate(used):
        for b in used[i + 1:]:
            vni = base + pair
            pair += 1
            ia, ib = hosts.index(a.name), hosts.index(b.name)
            out[a.name].append(Tunnel(a.name, b.name, topo.tunnel_port(lab, ib),
                                      TUNNEL_OFPORT_BASE + ib, a.address, b.address, vni))
            out[b.name].append(Tunnel(b.name, a.name, topo.tunnel_port(lab, ia),
                                      TUNNEL_OFPORT_BASE + ia, b.address, a.address, vni))
    return out


def slots(shape: topo.Shape, placement: Placement) -> dict[topo.Endpoint, int]:
    """Every iPHY's slot on its host (1-based): the tag its incoming cross-host frames carry."""
    out: dict[topo.Endpoint, int] = {}
    for host in sorted(set(placement.values())):
        nodes = sorted(n for n, h in placement.items() if h == host)
        for rank, node in enumerate(nodes):
            for iphy in range(1, shape.iphys + 1):
                slot = rank * shape.iphys + iphy
                if slot > MAX_SLOT:
                    raise UsageError(f"host {host} would hold {len(nodes) * shape.iphys} iPHYs; "
                                     f"a cross-host link tag names at most {MAX_SLOT}",
                                     hint="spread the nodes over more hosts")
                out[topo.Endpoint(node, iphy)] = slot
    return out


@dataclass(frozen=True)
class HostFlow:
    """One OpenFlow rule on one host's main bridge."""

    host: str
    in_port: int
    out_port: int
    match_tag: int | None = None
    """Coming out of a tunnel: match this 802.1Q tag and pop it."""
    push_tag: int | None = None
    """Going into a tunnel: push this tag."""


@dataclass(frozen=True)
class DataPlane:
    """Everything the flows of a multi-host lab's links depend on."""

    lab: str
    plan: AddressPlan
    placement: Placement
    tunnels: Mapping[str, list[Tunnel]]
    slots: Mapping[topo.Endpoint, int]
    openflow_port: int = OPENFLOW_PORT_FIRST
    """Where every main bridge of the lab listens for OpenFlow (`openflow_port`)."""
    dpids: Mapping[str, int] | None = None
    """Host name -> its main bridge's datapath id (`datapath_id`)."""

    @classmethod
    def of(cls, lab: str, plan: AddressPlan, hosts: HostSet, placement: Placement) -> DataPlane:
        missing = [n for n in plan.shape.node_numbers() if n not in placement]
        if missing:
            raise UsageError(f"nodes without a host: {', '.join(f'n{n}' for n in missing)}")
        for node in placement:
            plan.shape.check_node(topo.node_name(node))
        biggest = plan.port_number(plan.shape.nodes, plan.shape.iphys)
        if biggest >= TUNNEL_OFPORT_BASE:
            raise UsageError(f"{biggest} iPHYs: main-bridge port numbers would reach the "
                             f"tunnel ports ({TUNNEL_OFPORT_BASE})")
        return cls(lab, plan, placement, tunnels(lab, hosts, placement),
                   slots(plan.shape, placement), openflow_port(lab, hosts),
                   {h: datapath_id(lab, hosts.index(h)) for h in set(placement.values())})

    def dpid(self, host: str) -> int:
        """The datapath id of ``host``'s main bridge."""
        assert self.dpids is not None
        return self.dpids[host]

    def host_of(self, end: topo.Endpoint) -> str:
        return self.placement[end.node]

    def tunnel(self, host: str, peer: str) -> Tunnel:
        for t in self.tunnels[host]:
            if t.peer == peer:
                return t
        raise KeyError((host, peer))

    def link_flows(self, a: topo.Endpoint, b: topo.Endpoint) -> list[HostFlow]:
        """The rules that make link a-b: 2 on one host, or 2 on each of two hosts."""
        pa, pb = self.plan.port_number(a.node, a.iphy), self.plan.port_number(b.node, b.iphy)
        ha, hb = self.host_of(a), self.host_of(b)
        if ha == hb:
            return [HostFlow(ha, pa, pb), HostFlow(ha, pb, pa)]
        ta, tb = self.tunnel(ha, hb).ofport, self.tunnel(hb, ha).ofport
        return [HostFlow(ha, pa, ta, push_tag=self.slots[b]),
                HostFlow(ha, ta, pa, match_tag=self.slots[a]),
                HostFlow(hb, pb, tb, push_tag=self.slots[a]),
                HostFlow(hb, tb, pb, match_tag=self.slots[b])]

    def hosts_of_link(self, a: topo.Endpoint, b: topo.Endpoint) -> list[str]:
        return sorted({self.host_of(a), self.host_of(b)})


@dataclass(frozen=True)
class ControlTunnel:
    """The control net's tunnel between one host and the CA's machine (the CLI machine).

    On the host, ``host_device`` (a VXLAN device, local ``host_ip``) is a port of the
    host's control bridge (`topo.control_bridge`). On the CA's machine, ``ca_device``
    (local ``ca_ip``) is made in the machine's own namespace, so its UDP socket stays on
    the underlay there, then moved into the lab's control namespace as a port of the
    CA's control bridge: the control namespace gets a tunnel and no route to the
    underlay."""

    host: str
    host_device: str
    ca_device: str
    host_ip: str
    ca_ip: str
    vni: int


def control_tunnels(lab: str, hosts: HostSet, placement: Placement,
                    ca_ip: str) -> list[ControlTunnel]:
    """One control tunnel per host that holds nodes, in hosts-file order. ``ca_ip``: the
    CA machine's address on the underlay (the one it reaches the hosts from)."""
    base = vni_base(lab, hosts)
    used = set(placement.values())
    if len(hosts.hosts) > MAX_HOSTS:
        raise UsageError(f"{len(hosts.hosts)} hosts: a lab spans at most {MAX_HOSTS}")
    out = []
    for host in hosts.hosts:
        if host.name not in used:
            continue
        if host.address == ca_ip:
            raise UsageError(f"host {host.name} has the CA machine's own address {ca_ip}",
                             hint="the CA's control tunnels need the hosts to be other "
                                  "machines (or emulated ones) on the underlay")
        i = hosts.index(host.name)
        out.append(ControlTunnel(host.name, topo.control_tunnel_host(lab),
                                 topo.control_tunnel_ca(lab, i), host.address, ca_ip,
                                 base + CONTROL_VNI_OFFSET + i))
    return out
