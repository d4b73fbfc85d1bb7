"""`--routing direct`: the routes the GNAB agent keeps, in its node's every component.

The thesis (§3.3-3.4): after LINK_OK "the GNAB adds this link to its routing table
and forwards it to its components". Here, for every link the agent believes in
(peer node P, through local iPHY j to P's iPHY k):

* GNAB:     P's node address via iPHY j's intra address, source = own node address
* iPHY j:   P's node address via P's iPHY k's inter address (out `inter`)
* iPHY i≠j: P's node address via iPHY j's intra address
* every iPHY also routes its own node's address to the GNAB (192.168.0.1).

Only linked peers are reachable: nothing is relayed. The agent applies the GNAB's
routes itself and sends every iPHY its full set over the intra-node net (UDP,
ROUTE_PORT), on every change and again every poll, so a lost datagram or a
restarted iPHY heals. In each iPHY a small listener (this module's main, started by
the component entrypoint) accepts sets only from the GNAB's intra address and makes
the kernel table match: routes tagged with protocol ROUTE_PROTO that are not in the
set go, the others are replaced.

Standard library only (the module is baked into the component image, which has no
pyroute2), so the kernel is driven with `ip -batch`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass

log = logging.getLogger("nestednet.routes")

ROUTE_PROTO = 201
"""Kernel route protocol number marking routes the direct strategy owns."""
ROUTE_PORT = 6102
"""UDP port of the route listener in every iPHY (intra-node net only)."""
INTRA_IF = "intra"
INTER_IF = "inter"

Run = Callable[..., subprocess.CompletedProcess]


@dataclass(frozen=True, order=True)
class Route:
    dst: str
    via: str
    dev: str
    src: str = ""


@dataclass(frozen=True)
class Peer:
    """What a node must know of a linked peer to route to it."""

    address: str
    iphys: dict[str, str]
    """The peer's iPHY name -> inter-node address."""


def node_routes(links: dict[str, tuple[str, str]], directory: dict[str, Peer],
                iphys: dict[str, str], own_address: str, gnab_intra: str,
                own_inter: dict[str, str] | None = None) -> dict[str, list[Route]]:
    """Every component's routes ("gnab" and each iPHY name) for the given links.

    ``links`` maps peer -> (local iPHY, peer iPHY), as the agent keeps them; peers
    missing from ``directory`` (or iPHYs it does not know) get no route. An iPHY's
    routes prefer its inter address (``own_inter``) as source: its ICMP errors then
    come from an address no other node has (intra addresses repeat in every node).
    """
    inter = own_inter or {}
    out: dict[str, list[Route]] = {"gnab": []}
    out.update({name: [Route(f"{own_address}/32", gnab_intra, INTRA_IF, inter.get(name, ""))]
                for name in iphys})
    for peer, (local, remote) in sorted(links.items()):
        info = directory.get(peer)
        if info is None or local not in iphys or remote not in info.iphys:
            continue
        dst = f"{info.address}/32"
        out["gnab"].append(Route(dst, iphys[local], INTRA_IF, own_address))
        for name in iphys:
            out[name].append(Route(dst, info.iphys[remote] if name == local else iphys[local],
                                   INTER_IF if name == local else INTRA_IF,
                                   inter.get(name, "")))
    return out


def batch(current: list[str], wanted: list[Route]) -> str:
    """`ip -batch` lines turning the ROUTE_PROTO routes ``current`` (destinations) into
    ``wanted``."""
    lines = [f"route del {dst} proto {ROUTE_PROTO}"
             for dst in sorted(set(current) - {_plain(r.dst) for r in wanted})]
    for r in sorted(wanted):
        src = f" src {r.src}" if r.src else ""
        lines.append(f"route replace {r.dst} via {r.via} dev {r.dev} proto {ROUTE_PROTO}{src}")
    return "".join(line + "\n" for line in lines)


def _plain(dst: str) -> str:
    """`ip -j route` prints a /32 destination without its length."""
    return dst.removesuffix("/32")


def apply(wanted: list[Route], run: Run = subprocess.run) -> bool:
    """Make this namespace's ROUTE_PROTO routes exactly ``wanted``; False on failure."""
    shown = run(["ip", "-j", "route", "show", "proto", str(ROUTE_PROTO)],
                capture_output=True, text=True, check=False)
    current = [r["dst"] for r in json.loads(shown.stdout or "[]")] if shown.returncode == 0 \
        else []
    done = run(["ip", "-force", "-batch", "-"], input=batch(current, wanted),
               capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log.warning("installing routes failed: %s", done.stderr.strip()[:300])
    return done.returncode == 0


def encode(routes: list[Route]) -> bytes:
    return json.dumps({"routes": [asdict(r) for r in routes]}).encode()


def decode(data: bytes) -> list[Route]:
    return [Route(**item) for item in json.loads(data)["routes"]]


class RouteSync:
    """The GNAB side: apply its own routes on change, send each iPHY its set."""

    def __init__(self, iphys: dict[str, str], own_address: str, gnab_intra: str,
                 run: Run = subprocess.run,
                 send: Callable[[bytes, str], None] | None = None) -> None:
        self.iphys, self.own, self.gnab_intra = iphys, own_address, gnab_intra
        self.directory: dict[str, Peer] = {}
        self._run = run
        self._send = send or _udp_send
        self._applied: list[Route] | None = None

    def learn(self, directory: dict) -> None:
        """The directory an ID message carries (node -> {address, iphys})."""
        self.directory = {node: Peer(str(entry["address"]), dict(entry["iphys"]))
                          for node, entry in directory.items()}

    def sync(self, links: dict[str, tuple[str, str]], me: str = "", *,
             resend: bool = False) -> None:
        """Apply the GNAB's routes if they changed; send the iPHYs theirs if they
        changed or ``resend``. ``me`` is this node's name in the directory."""
        own = self.directory.get(me)
        routes = node_routes(links, self.directory, self.iphys, self.own, self.gnab_intra,
                             own.iphys if own else None)
        changed = routes["gnab"] != self._applied
        if changed and apply(routes["gnab"], self._run):
            self._applied = routes["gnab"]
        if changed or resend:
            for name, address in self.iphys.items():
                self._send(encode(routes[name]), address)


def _udp_send(data: bytes, address: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(data, (address, ROUTE_PORT))
        except OSError as exc:
            log.info("route set for %s not sent: %s", address, exc)


def listen(gnab_intra: str) -> None:
    """The iPHY side: apply every route set the GNAB sends, forever."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", ROUTE_PORT))
    last: list[Route] | None = None
    while True:
        data, (sender, _port) = sock.recvfrom(65536)
        if sender != gnab_intra:
            continue
        try:
            routes = decode(data)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring a bad route set: %s", exc)
            continue
        if routes != last and apply(routes):
            last = routes


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s routes %(message)s")
    listen(os.environ.get("NESTEDNET_GNAB_INTRA", "192.168.0.1"))
