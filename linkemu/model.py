"""The link table: what linkemu is asked to emulate, as plain values.

Both input formats (the thesis's Linksimulation file and the native format) parse
into this, and everything downstream (router plan, tc plan, `show`) reads it. No
side effects here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from ipaddress import IPv4Address, IPv4Interface


@dataclass(frozen=True)
class Shape:
    """The properties of one direction of one link."""

    rate_bps: int
    delay_us: int = 0
    jitter_us: int = 0
    loss_pct: float = 0.0

    def with_changes(self, **changes: int | float) -> Shape:
        return replace(self, **changes)


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
    forward: Shape
    backward: Shape

    @property
    def name(self) -> str:
        return f"{self.router}-{self.client}"

    def shape(self, direction: str) -> Shape:
        return self.forward if direction == FORWARD else self.backward


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
class LinkTable:
    links: tuple[Link, ...]
    emulator: Emulator = Emulator()

    def by_name(self) -> dict[str, Link]:
        return {link.name: link for link in self.links}

    def routers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(link.router for link in self.links))
