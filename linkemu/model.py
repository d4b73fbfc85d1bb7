"""The emulated links: what linkemu is asked to emulate, as plain values.

Both input formats (the thesis's Linksimulation file and the native format) parse
into `EmulatedLinks`, and everything downstream (router plan, tc plan, `show`) reads
it. The properties of one direction of a link are the shaping library's `LinkShape`
(nestednet.model.tcplan), which also turns these links into a tc plan. No side
effects here.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface

from nestednet.model import tcplan
from nestednet.model.tcplan import LinkShape

FORWARD = "forward"
"""client -> server: shaped on the emulator port facing the server."""
BACKWARD = "backward"
"""server -> client: shaped on the emulator port facing the clients."""
DIRECTIONS = (FORWARD, BACKWARD)


@dataclass(frozen=True)
class Link:
    """One client<->server pair through one router, with a shape per direction."""

    router: str
    client: str
    client_ip: IPv4Address
    server_ip: IPv4Address
    forward: LinkShape
    backward: LinkShape

    @property
    def name(self) -> str:
        return f"{self.router}-{self.client}"

    def shape(self, direction: str) -> LinkShape:
        return self.forward if direction == FORWARD else self.backward

    def leaf(self, direction: str) -> tcplan.Leaf:
        """This link's ``direction`` as a shaped flow: forward packets go client ->
        server, backward server -> client."""
        src, dst = ((self.client_ip, self.server_ip) if direction == FORWARD
                    else (self.server_ip, self.client_ip))
        return tcplan.Leaf(f"{self.name} {direction}", src, dst, self.shape(direction))


@dataclass(frozen=True)
class RouterSide:
    """The router's address on one side of the emulator, and the next hop there if any.

    ``gateway`` is the router (the thesis's edge router) behind which that side's hosts
    sit; None means the hosts are on the router's own network.
    """

    address: IPv4Interface
    gateway: IPv4Address | None = None


@dataclass(frozen=True)
class Emulator:
    """Where linkemu acts: the OVS bridge made a router, and its two host-side ports.

    Forward shaping sits on ``server_port`` egress, backward on ``client_port`` egress.
    The defaults are the names `linkemu testbed up` creates. ``client_side`` and
    ``server_side`` give the router's addressing; None lets the router plan construct
    it from the links' addresses (the thesis's "IP address constructor"). ``netns``
    names the network namespace holding the two ports (None: the host's own
    namespace), so an emulator can live inside a namespace, as the shaping kernel
    tests build it.
    """

    bridge: str = "le-br"
    client_port: str = "le-cli"
    server_port: str = "le-srv"
    client_side: RouterSide | None = None
    server_side: RouterSide | None = None
    netns: str | None = None

    def port_for(self, direction: str) -> str:
        return self.server_port if direction == FORWARD else self.client_port


@dataclass(frozen=True)
class EmulatedLinks:
    """Every link linkemu emulates, and the emulator they pass through."""

    links: tuple[Link, ...]
    emulator: Emulator = Emulator()

    def by_name(self) -> dict[str, Link]:
        return {link.name: link for link in self.links}

    def routers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(link.router for link in self.links))

    def shaped_ports(self) -> dict[str, list[tcplan.Leaf]]:
        """The flows each emulator port shapes: forward on the server side, backward on
        the client side, in link order (a link's position is its leaf handle)."""
        return {self.emulator.port_for(d): [link.leaf(d) for link in self.links]
                for d in DIRECTIONS}

    def tc_plan(self, shaper: str = "hfsc", *, netem: bool = True) -> tcplan.TcPlan:
        return tcplan.tc_plan(self.shaped_ports(), shaper, netem=netem,
                              netns=self.emulator.netns)

    def change_ops(self, shaper: str, index: int, direction: str, new: LinkShape, *,
                   netem: bool = True) -> list[tcplan.TcOp]:
        """In-place tc changes giving link ``index`` the shape ``new`` in ``direction``."""
        return tcplan.change_ops(self.emulator.port_for(direction), shaper, index,
                                 self.links[index].leaf(direction), new, netem=netem)
