"""The address plan of a lab (pure).

Documented plan (the paper's defaults):

* intra-node net, the same in every node (nodes are isolated from each other):
  192.168.0.0/24, GNAB .1, iPHY j .(10+j);
* inter-node net, one address per iPHY across the lab: 192.168.2.0/24, iPHY j of
  node i gets host number (i-1)*M + j. When N*M needs more addresses the net widens
  to 192.168.2.0/23 (510 iPHYs); beyond that a /23 cannot grow without covering the
  intra-node net, so the net becomes the first aligned block above it that holds them:
  192.168.4.0/22 (1,022), 192.168.8.0/21, ... up to 192.168.128.0/17 (32,766), all in
  192.168.0.0/16;
* control net, between every GNAB and the communication assistant (CA):
  10.99.0.0/16, the CA .0.1, the GNAB of node i the (1+i)-th address after it;
* node addresses, one routable identity per node (not in the paper, whose intra
  addresses repeat in every node): 10.100.0.0/16, node i gets the i-th address
  (10.100.0.1 for n1, ..., 10.100.1.0 for n256) as a /32 on its GNAB's loopback.
  Routing (nestednet.routing) announces these and only these; a GNAB's routes to
  them carry its own node address as preferred source, so replies come back to the
  node and not to the replier's own GNAB at 192.168.0.1.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

from nestednet.errors import UsageError
from nestednet.model.topology import Shape

INTRA_NET = IPv4Network("192.168.0.0/24")
INTER_BASE = IPv4Network("192.168.2.0/24")
INTER_SPACE = IPv4Network("192.168.0.0/16")
"""Where the inter-node net may grow (RFC 1918's 192.168 block)."""
CONTROL_NET = IPv4Network("10.99.0.0/16")
NODE_NET = IPv4Network("10.100.0.0/16")
GNAB_HOST = 1
IPHY_HOST_OFFSET = 10
CA_PORT = 6100
"""TCP port the CA listens on in the control namespace (recorded for the CA)."""


def inter_network(shape: Shape, base: IPv4Network = INTER_BASE,
                  intra: IPv4Network = INTRA_NET,
                  within: IPv4Network = INTER_SPACE) -> IPv4Network:
    """The smallest aligned network in ``within``, at or above ``base``, that holds one
    address per iPHY and stays clear of ``intra``.

    Small labs keep the paper's 192.168.2.0/24; the block moves up only when a prefix
    grown in place would cover the intra-node net, so a lab's plan never changes the
    meaning of 192.168.0.x."""
    needed = shape.nodes * shape.iphys
    for prefix in range(base.prefixlen, within.prefixlen - 1, -1):
        net = _block(prefix, base, intra, within)
        if net is not None and net.num_addresses - 2 >= needed:
            return net
    raise UsageError(
        f"{shape.nodes} nodes x {shape.iphys} iPHYs = {needed} inter-node addresses do not "
        f"fit the plan: the inter-node net stays in {within}, clear of the intra-node net "
        f"{intra} (at most {_capacity(base, intra, within)} iPHYs in all)")


def _block(prefix: int, base: IPv4Network, intra: IPv4Network,
           within: IPv4Network) -> IPv4Network | None:
    """The first /prefix block in ``within``, at or above ``base``, clear of ``intra``."""
    size = 1 << (32 - prefix)
    address = -(-int(base.network_address) // size) * size
    while address + size <= int(within.broadcast_address) + 1:
        net = IPv4Network(f"{IPv4Address(address)}/{prefix}")
        if not net.overlaps(intra):
            return net
        address += size
    return None


def _capacity(base: IPv4Network, intra: IPv4Network, within: IPv4Network) -> int:
    for prefix in range(within.prefixlen, base.prefixlen + 1):
        net = _block(prefix, base, intra, within)
        if net is not None:
            return net.num_addresses - 2
    return 0


@dataclass(frozen=True)
class AddressPlan:
    """Every address of a lab, computed from its shape."""

    shape: Shape
    intra: IPv4Network = INTRA_NET
    inter: IPv4Network = INTER_BASE
    control: IPv4Network = CONTROL_NET
    node: IPv4Network = NODE_NET

    @classmethod
    def for_shape(cls, shape: Shape) -> AddressPlan:
        if shape.iphys + IPHY_HOST_OFFSET > INTRA_NET.num_addresses - 2:
            raise UsageError(f"{shape.iphys} iPHYs do not fit the intra-node net {INTRA_NET}")
        if shape.nodes + 1 > CONTROL_NET.num_addresses - 2:
            raise UsageError(f"{shape.nodes} nodes do not fit the control net {CONTROL_NET}")
        if shape.nodes > NODE_NET.num_addresses - 2:
            raise UsageError(f"{shape.nodes} nodes do not fit the node-address net {NODE_NET}")
        return cls(shape, inter=inter_network(shape))

    def intra_address(self, component: int) -> IPv4Interface:
        """Component 0 is the GNAB, j the j-th iPHY."""
        host = GNAB_HOST if component == 0 else IPHY_HOST_OFFSET + component
        return IPv4Interface(f"{self.intra.network_address + host}/{self.intra.prefixlen}")

    def inter_address(self, node: int, iphy: int) -> IPv4Interface:
        host = self.port_number(node, iphy)
        return IPv4Interface(f"{self.inter.network_address + host}/{self.inter.prefixlen}")

    def port_number(self, node: int, iphy: int) -> int:
        """The iPHY's index across the lab: its inter-net host number and main-bridge ofport."""
        return (node - 1) * self.shape.iphys + iphy

    def ca_address(self) -> IPv4Interface:
        return IPv4Interface(f"{self.control.network_address + 1}/{self.control.prefixlen}")

    def control_address(self, node: int) -> IPv4Interface:
        return IPv4Interface(
            f"{self.control.network_address + 1 + node}/{self.control.prefixlen}")

    def node_address(self, node: int) -> IPv4Interface:
        """Node ``node``'s routable identity, a /32 on its GNAB's loopback."""
        return IPv4Interface(f"{self.node.network_address + node}/32")

    def node_of(self, address: IPv4Address) -> int | None:
        """The node whose node address this is, or None."""
        offset = int(address) - int(self.node.network_address)
        return offset if 1 <= offset <= self.shape.nodes else None

    def mac_address(self, node: int, component: int, interface: int) -> str:
        """A fixed, locally administered MAC for a component's interface (1 intra,
        2 inter or control): a component restarted by `swap --restart` comes back on new
        veths with the same MAC, so its neighbours' ARP entries for it stay right. With
        random MACs, n1 -> n2 over a babel route got no answer for 25 s after n2's iPHY
        was restarted, while babel (on IPv6 link-local addresses, learned afresh) showed
        every route in place."""
        return (f"02:4e:{node >> 8 & 0xFF:02x}:{node & 0xFF:02x}:{component & 0xFF:02x}:"
                f"{interface & 0xFF:02x}")

    def intra_neighbours(self, node: int, component: int) -> list[tuple[IPv4Address, str]]:
        """(address, MAC) of every other component on node ``node``'s intra-node net:
        what ``component`` is told once, so it never has to ask by ARP.

        The wiring knows every MAC (``mac_address``), and ARP on that net proved fragile
        under load: in a 120 x 4 lab some GNABs' polls found iPHYs silent because the
        first ARP request was lost and the kernel's retry came a second later (the
        echo answered after 700-1,030 ms, or not within the poll)."""
        return [(self.intra_address(other).ip, self.mac_address(node, other, 1))
                for other in range(self.shape.iphys + 1) if other != component]

    def as_dict(self) -> dict:
        return {"intra": str(self.intra), "inter": str(self.inter),
                "control": str(self.control), "node": str(self.node),
                "ca": str(self.ca_address().ip),
                "gnab": str(self.intra_address(0).ip),
                "iphy": f"{self.intra.network_address}+{IPHY_HOST_OFFSET}+j"}


def plan_from_dict(shape: Shape, data: dict) -> AddressPlan:
    return AddressPlan(shape, IPv4Network(data["intra"]), IPv4Network(data["inter"]),
                       IPv4Network(data["control"]), IPv4Network(data.get("node", str(NODE_NET))))


def address_owner(plan: AddressPlan, address: IPv4Address) -> tuple[int, int] | None:
    """(node, iphy) owning an inter-node address, or None."""
    offset = int(address) - int(plan.inter.network_address)
    if not 1 <= offset <= plan.shape.nodes * plan.shape.iphys:
        return None
    return (offset - 1) // plan.shape.iphys + 1, (offset - 1) % plan.shape.iphys + 1
