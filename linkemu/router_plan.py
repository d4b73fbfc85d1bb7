"""The router's addressing as data: the thesis's "IP address constructor".

From a link table (clients and servers) and the emulator's layout, compute what the
os-ken REST router must be told: one address per side (more only when a side's hosts
span several networks and no layout is given), and a static route for every network
of hosts that sits behind another router (the testbed's edge router). Pure: no
side effects; `linkemu apply --dry-run` prints it and linkemu.router POSTs it.
Every inconsistency is a UsageError raised before anything is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

from linkemu.model import EmulatedLinks, RouterSide
from nestednet.errors import UsageError

CLIENT = "client"
SERVER = "server"
SIDES = (CLIENT, SERVER)

HOST_NETWORK_PREFIX = 24
"""Hosts are grouped into networks of this size: the constructor gives the router one
address per such network when no layout is given, and routes such networks (not
single hosts) to a side's gateway."""


@dataclass(frozen=True)
class RouterAddress:
    side: str
    address: IPv4Interface

    def request(self) -> dict[str, str]:
        return {"address": str(self.address)}


@dataclass(frozen=True)
class RouterRoute:
    side: str
    destination: IPv4Network
    gateway: IPv4Address

    def request(self) -> dict[str, str]:
        return {"destination": str(self.destination), "gateway": str(self.gateway)}


@dataclass(frozen=True)
class RouterPlan:
    """What the REST router is configured with, in the order it must be POSTed."""

    bridge: str
    addresses: tuple[RouterAddress, ...]
    routes: tuple[RouterRoute, ...]

    def requests(self) -> list[dict[str, str]]:
        """The POST /router/<dpid> bodies: addresses first (routes need their gateway's
        address registered)."""
        return [a.request() for a in self.addresses] + [r.request() for r in self.routes]

    def gateway_for(self, side: str) -> IPv4Address:
        """The router's address that hosts on ``side`` (or their edge router) use."""
        for a in self.addresses:
            if a.side == side:
                return a.address.ip
        raise KeyError(side)

    def as_dict(self) -> dict:
        return {
            "bridge": self.bridge,
            "addresses": [{"side": a.side, "address": str(a.address)} for a in self.addresses],
            "routes": [{"side": r.side, "destination": str(r.destination),
                        "gateway": str(r.gateway)} for r in self.routes],
        }


def side_from_native(value: object, at: str) -> RouterSide:
    """``{"address": "198.18.0.1/24", "gateway": "198.18.0.2"}`` (gateway optional) from a
    native links file's ``emulator.client_side`` / ``emulator.server_side``."""
    if not isinstance(value, dict) or set(value) - {"address", "gateway"} or "address" not in value:
        raise UsageError(f"{at}: expected {{\"address\": \"A.B.C.D/M\", \"gateway\": "
                         f"\"A.B.C.D\"}} (gateway optional), got {value!r}")
    try:
        address = IPv4Interface(value["address"])
        if "/" not in str(value["address"]):
            raise ValueError("a prefix length is needed, like 198.18.0.1/24")
    except ValueError as exc:
        raise UsageError(f"{at}.address: {value['address']!r} is not an IPv4 address with a "
                         f"prefix: {exc}") from None
    gateway = value.get("gateway")
    try:
        return RouterSide(address, IPv4Address(gateway) if gateway is not None else None)
    except ValueError as exc:
        raise UsageError(f"{at}.gateway: {gateway!r} is not an IPv4 address: {exc}") from None


def side_to_native(side: RouterSide) -> dict[str, str]:
    result = {"address": str(side.address)}
    if side.gateway is not None:
        result["gateway"] = str(side.gateway)
    return result


class AddressProblem(UsageError):
    """A client or server address the router cannot serve; ``address`` says which, so
    the links file loader can name the link it came from."""

    def __init__(self, address: IPv4Address, message: str) -> None:
        super().__init__(message)
        self.address = address


def plan(table: EmulatedLinks) -> RouterPlan:
    """The router configuration for ``table``; UsageError if it cannot be consistent."""
    if not table.links:
        raise UsageError("the link table has no links: nothing to route")
    hosts = {CLIENT: _unique(link.client_ip for link in table.links),
             SERVER: _unique(link.server_ip for link in table.links)}
    for link in table.links:
        if link.client_ip == link.server_ip:
            raise UsageError(f"link {link.name}: client and server have the same address "
                             f"{link.client_ip}")
    both = set(hosts[CLIENT]) & set(hosts[SERVER])
    if both:
        raise UsageError(f"{_list(both)} used both as a client and as a server address")
    layout = {CLIENT: table.emulator.client_side, SERVER: table.emulator.server_side}

    addresses: list[RouterAddress] = []
    routes: list[RouterRoute] = []
    for side in SIDES:
        side_layout = layout[side]
        if side_layout is None:
            addresses.extend(_constructed_addresses(side, hosts[side]))
        else:
            a, r = _laid_out(side, side_layout, hosts[side])
            addresses.append(a)
            routes.extend(r)
    _check_consistent(addresses, routes, hosts)
    return RouterPlan(table.emulator.bridge, tuple(addresses), tuple(routes))


def _unique(values: object) -> list[IPv4Address]:
    return list(dict.fromkeys(values))  # type: ignore[arg-type]


def _list(addresses: object) -> str:
    return ", ".join(str(a) for a in sorted(addresses))  # type: ignore[call-overload]


def _host_network(ip: IPv4Address) -> IPv4Network:
    return IPv4Network(f"{ip}/{HOST_NETWORK_PREFIX}", strict=False)


def _constructed_addresses(side: str, hosts: list[IPv4Address]) -> list[RouterAddress]:
    """One router address per host network: its first free host address."""
    networks: dict[IPv4Network, list[IPv4Address]] = {}
    for ip in hosts:
        networks.setdefault(_host_network(ip), []).append(ip)
    result = []
    for network, members in networks.items():
        for ip in members:
            if ip in (network.network_address, network.broadcast_address):
                raise AddressProblem(ip, f"{side} address {ip} is not a host address of {network}")
        taken = set(members)
        free = next((ip for ip in network.hosts() if ip not in taken), None)
        if free is None:
            raise UsageError(f"no free address for the router in {network}: every host "
                             f"address there is a {side}")
        result.append(RouterAddress(side, IPv4Interface(f"{free}/{network.prefixlen}")))
    return result


def _laid_out(side: str, layout: RouterSide,
              hosts: list[IPv4Address]) -> tuple[RouterAddress, list[RouterRoute]]:
    own = layout.address.network
    if layout.address.ip in (own.network_address, own.broadcast_address) or own.prefixlen > 30:
        raise UsageError(f"router {side}-side address {layout.address} is not a usable host "
                         "address (network or broadcast address, or prefix longer than /30)")
    if layout.gateway is not None:
        if layout.gateway not in own:
            raise UsageError(f"{side}-side gateway {layout.gateway} is outside the router's "
                             f"{side}-side network {own}")
        if layout.gateway == layout.address.ip:
            raise UsageError(f"{side}-side gateway {layout.gateway} is the router's own address")
    routes: dict[IPv4Network, RouterRoute] = {}
    for ip in hosts:
        if ip == layout.address.ip:
            raise UsageError(f"{side} {ip} has the router's own {side}-side address")
        if ip in own:
            if ip in (own.network_address, own.broadcast_address):
                raise AddressProblem(ip, f"{side} address {ip} is not a host address of {own}")
            continue
        if layout.gateway is None:
            raise UsageError(f"{side} {ip} is outside the router's {side}-side network {own} "
                             f"and no {side}-side gateway is given to reach it")
        network = _host_network(ip)
        if network.overlaps(own):
            network = IPv4Network(f"{ip}/32")
        routes.setdefault(network, RouterRoute(side, network, layout.gateway))
    return RouterAddress(side, layout.address), list(routes.values())


def _check_consistent(addresses: list[RouterAddress], routes: list[RouterRoute],
                      hosts: dict[str, list[IPv4Address]]) -> None:
    for i, a in enumerate(addresses):
        for b in addresses[i + 1:]:
            if a.address.network.overlaps(b.address.network):
                raise UsageError(f"router addresses {a.address} ({a.side} side) and "
                                 f"{b.address} ({b.side} side) overlap: the two sides need "
                                 "separate networks")
    for r in routes:
        for a in addresses:
            if r.destination.overlaps(a.address.network):
                raise UsageError(f"route to {r.destination} ({r.side} side) overlaps the "
                                 f"router's {a.side}-side network {a.address.network}")
    for i, r in enumerate(routes):
        for q in routes[i + 1:]:
            if r.destination.overlaps(q.destination) and r.side != q.side:
                raise UsageError(f"{r.side} network {r.destination} and {q.side} network "
                                 f"{q.destination} overlap")
    for side, other in ((CLIENT, SERVER), (SERVER, CLIENT)):
        for ip in hosts[side]:
            for a in addresses:
                if a.side == other and ip in a.address.network:
                    raise UsageError(f"{side} {ip} lies in the router's {other}-side network "
                                     f"{a.address.network}")
