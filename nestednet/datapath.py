"""Which Open vSwitch datapath a bridge runs on, and what that asks of its veths.

Fastest first (PLATFORM.md, two namespaces through one bridge, iperf3 4 s, 2-core host):
- the kernel datapath ("system") where the openvswitch module loads;
- otherwise the userspace datapath ("netdev") with userspace TSO
  (other_config:userspace-tso-enable=true, read by ovs-vswitchd only when it starts):
  8.97 Gbit/s, with the veths' TX offloads left on;
- the userspace datapath without TSO: 0.86 Gbit/s, and only with TX checksum offload off
  on every attached veth (with offloads on, TCP stalls);
- AF_XDP ports (type=afxdp) measured 2.38 Gbit/s, 1.66 without PMD threads busy-polling
  a core: slower than TSO, so never chosen; doctor only mentions them.

Retransmits on the userspace datapath (with or without TSO) are packets lost inside
ovs-vswitchd. Seen here: 21 % of packets without TSO and 13 % with TSO entered the
OVS-side veth (kernel link counters) but never left through the other port, with no
error or drop counter on the links or in OVS and no failed sendmmsg (strace). Its
AF_PACKET receive sockets overflow: they keep the default buffer (net.core.rmem_default,
208 KiB, about three 64 KiB TSO segments) while the one polling thread is busy, and
this kernel does not let a namespace raise that default. Confirmed by enlarging them
(same two-namespace test with TSO, iperf3 4 s, two runs on a quiet machine): 284,670
and 262,369 retransmits with the default, 315 and 395 with 4 MiB; 10.04 and 8.02 Gbit/s
against 12.41 and 10.13.

So a lab's port sockets get a larger receive buffer (PORT_RCVBUF_BYTES, set from
outside: nestednet.adapters.packet_sockets): every port of each nested node's internal
OVS, and in the host's OVS only the lab's own ports (a nested lab's iPHY ports; a flat
node's every port, on its own bridge and on the main bridge).

The host's OVS belongs to the user: NestedNet reads its TSO setting and never changes it
(scripts/setup sets it only when it starts OVS itself); of its sockets, only those of
the ports a lab adds get the larger buffer, and they go with the lab. Each node's
internal OVS belongs to NestedNet, and the node parent starts it with TSO on.
"""

from __future__ import annotations

from dataclasses import dataclass

SYSTEM = "system"
NETDEV = "netdev"
TSO_KEY = "userspace-tso-enable"
PORT_RCVBUF_BYTES = 4 * 1024 * 1024
"""Receive buffer of each port socket of a node's userspace switch (the kernel doubles it):
room for ~128 TSO segments while the switch's one thread is busy elsewhere."""


@dataclass(frozen=True)
class Datapath:
    """The datapath of one ovs-vswitchd (the host's, or a node's internal one)."""

    kind: str
    """SYSTEM or NETDEV: the bridges' datapath_type."""
    userspace_tso: bool = False

    @property
    def veth_offloads(self) -> bool:
        """Whether veths attached to this switch keep their TX offloads on.

        Only the userspace datapath without TSO needs them off (else TCP stalls).
        """
        return self.kind == SYSTEM or self.userspace_tso

    def describe(self) -> str:
        if self.kind == SYSTEM:
            return "kernel datapath (openvswitch module)"
        return "userspace datapath (netdev) " + ("with TSO" if self.userspace_tso
                                                else "without TSO")


@dataclass(frozen=True)
class VethOffloads:
    """Whether a lab's veths keep their TX offloads, by the switch they attach to.

    Chosen once at create and kept in the lab record, so a component re-wired later
    (restart, swap) gets veths like the ones it had.
    """

    main: bool
    """Veths on the host's OVS: the main bridge (and a flat node's switch)."""
    nodes: bool
    """Veths on a node's internal OVS."""

    @classmethod
    def choose(cls, kind: str, host_config: dict[str, str]) -> VethOffloads:
        return cls(from_config(kind, host_config).veth_offloads,
                   node_datapath(kind).veth_offloads)

    @classmethod
    def from_meta(cls, meta: dict) -> VethOffloads:
        """The lab record's choice; labs made before there was one have offloads off."""
        saved = meta.get("veth_offloads") or {}
        return cls(bool(saved.get("main", False)), bool(saved.get("nodes", False)))

    def as_dict(self) -> dict[str, bool]:
        return {"main": self.main, "nodes": self.nodes}


def from_config(kind: str, other_config: dict[str, str]) -> Datapath:
    """The datapath of a switch whose Open_vSwitch other_config is ``other_config``."""
    tso = kind == NETDEV and other_config.get(TSO_KEY, "false").lower() == "true"
    return Datapath(kind, tso)


def node_datapath(kind: str) -> Datapath:
    """A node's internal OVS: the node parent starts it with userspace TSO on."""
    return Datapath(kind, kind == NETDEV)


def reads_ports_by_socket(kind: str) -> bool:
    """Whether a switch on datapath ``kind`` reads its ports through AF_PACKET sockets
    (the userspace datapath's system ports) whose receive buffers can be enlarged."""
    return kind == NETDEV


def advice(host: Datapath, iface_types: list[str]) -> str:
    """What would be faster than ``host`` here, or "" when nothing would."""
    if host.kind == SYSTEM or host.userspace_tso:
        return ""
    hint = (f"inter-node traffic crosses the host OVS without TSO (about 10x slower): "
            f"`ovs-vsctl set Open_vSwitch . other_config:{TSO_KEY}=true`, then restart "
            "ovs-vswitchd (scripts/setup does both when it starts OVS itself)")
    if "afxdp" in iface_types:
        hint += "; AF_XDP ports exist too but measured slower than TSO here"
    return hint
