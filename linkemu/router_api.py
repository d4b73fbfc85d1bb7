"""Client of the os-ken rest_router REST API, with its replies turned into clear errors.

rest_router answers in three ways that matter: HTTP 200 with
``[{"switch_id": ..., "command_result": [{"result": "success"|"failure", "details": ...}]}]``,
HTTP 404 ``{"result": "failure", "details": "Router SW is not connected. ..."}`` when the
bridge has not connected, and - for malformed values - HTTP 500 with a Python
traceback, because its error path reads ``exception.message`` (Python 2 only). So
values are checked here before they are sent, and a 500 is still explained.
"""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass
from ipaddress import AddressValueError, IPv4Address, IPv4Interface, NetmaskValueError
from typing import Any

from nestednet.errors import EnvironmentProblem, UsageError

_HINT_START = "start it with `linkemu router start` (or `linkemu testbed up`)"


@dataclass(frozen=True)
class RouterData:
    """What rest_router holds for one datapath (VLAN-less part)."""

    dpid: str
    addresses: dict[str, int]
    """address ("198.18.0.1/24") -> address_id"""
    routes: dict[str, tuple[int, str]]
    """destination -> (route_id, gateway); only routes whose gateway answered ARP"""

    def as_dict(self) -> dict:
        return {"dpid": self.dpid, "addresses": sorted(self.addresses),
                "routes": [{"destination": d, "gateway": g}
                           for d, (_, g) in sorted(self.routes.items())]}


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket (where linkemu.router serves rest_router)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class RouterApi:
    """One rest_router instance, at a unix socket (``unix:PATH``)."""

    def __init__(self, socket_path: str, *, timeout: float = 10.0) -> None:
        self.socket_path = str(socket_path)
        self.base = f"unix:{self.socket_path}"
        self.timeout = timeout

    # --- reads -------------------------------------------------------------------

    def answering(self) -> bool:
        """Whether the REST server answers at all (any HTTP reply counts)."""
        try:
            self._request("GET", "/router/all")
        except NotConnected:
            return True
        except EnvironmentProblem:
            return False
        return True

    def connected(self, dpid: str) -> bool:
        """Whether the datapath ``dpid`` has joined the router."""
        try:
            self._request("GET", f"/router/{dpid}")
        except NotConnected:
            return False
        return True

    def get(self, dpid: str) -> RouterData:
        reply = self._request("GET", f"/router/{dpid}")
        addresses: dict[str, int] = {}
        routes: dict[str, tuple[int, str]] = {}
        for switch in reply:
            for network in switch.get("internal_network", []):
                if network.get("vlan_id"):
                    continue
                for a in network.get("address", []):
                    addresses[a["address"]] = int(a["address_id"])
                for r in network.get("route", []):
                    routes[r["destination"]] = (int(r["route_id"]), r["gateway"])
        return RouterData(dpid, addresses, routes)

    # --- writes ------------------------------------------------------------------

    def add_address(self, dpid: str, address: str) -> int:
        """Register a router address such as "198.18.0.1/24"; returns its address_id."""
        _check_interface("address", address)
        return self.post(dpid, {"address": address}, "Add address")

    def add_route(self, dpid: str, destination: str, gateway: str) -> int:
        """Route ``destination`` (a network) via ``gateway``; returns its route_id."""
        _check_interface("destination", destination)
        _check_address("gateway", gateway)
        return self.post(dpid, {"destination": destination, "gateway": gateway}, "Add route")

    def post(self, dpid: str, body: dict[str, str], success: str = "Add") -> int:
        """POST ``body`` as given (no local checks); the id rest_router assigned."""
        return self._command(dpid, "POST", body, success)

    def delete_all(self, dpid: str) -> None:
        """Delete every route, then every address (routes pin their gateway's address).

        rest_router deletes a route only by the flows the switch lists for it, and waits
        a limited time for that list (os_ken_compat.REPLY_TIMEOUT_S). When the list
        comes later (seen in the software-emulated VM with a backlog of packet-ins) it
        deletes nothing and says "Data is nothing"; that is caught here by reading the
        routes back, rather than surfacing as a refused address delete.
        """
        for body in ({"route_id": "all"}, {"address_id": "all"}):
            try:
                self._command(dpid, "DELETE", body, "Delete")
            except UsageError as exc:
                if "Data is nothing" not in str(exc):
                    raise
            if "route_id" in body:
                left = self.get(dpid).routes
                if left:
                    raise EnvironmentProblem(
                        f"the router did not delete its routes ({', '.join(sorted(left))}): "
                        "it deletes them through the switch's flow list, which did not "
                        "come in time (a controller busy with packet-ins, e.g. traffic "
                        "to many new hosts or to a gateway itself, or a slow machine)",
                        hint="try again when the traffic is lower; `linkemu router status` "
                             "shows what the router holds")

    # --- plumbing ----------------------------------------------------------------

    def _command(self, dpid: str, method: str, body: dict[str, str], success: str) -> int:
        reply = self._request(method, f"/router/{dpid}", body)
        results = [r for switch in reply for r in switch.get("command_result", [])]
        if not results:
            raise EnvironmentProblem(f"router at {self.base} gave no result for "
                                     f"{method} {json.dumps(body)}: {reply!r}")
        for result in results:
            details = str(result.get("details", ""))
            if result.get("result") != "success":
                raise UsageError(f"router refused {json.dumps(body)}: {_explain(details)}",
                                 hint=_hint(details))
        details = str(results[0].get("details", ""))
        if not details.startswith(success):
            raise EnvironmentProblem(f"router answered {details!r} to {json.dumps(body)}")
        digits = "".join(ch if ch.isdigit() else " " for ch in details.split("=")[-1]).split()
        return int(digits[0]) if digits else 0

    def _request(self, method: str, path: str, body: dict[str, str] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        what = f"{method} {path}" + (f" {json.dumps(body)}" if body is not None else "")
        connection = _UnixConnection(self.socket_path, self.timeout)
        try:
            connection.request(method, path, body=data,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            status, payload = response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise EnvironmentProblem(f"router REST API not answering at {self.base}: {exc}",
                                     hint=_HINT_START) from None
        finally:
            connection.close()
        try:
            if status < 400:
                return json.loads(payload or b"null")
        except json.JSONDecodeError as exc:
            raise EnvironmentProblem(f"router at {self.base} sent a non-JSON reply to "
                                     f"{what}: {exc}") from None
        self._refused(status, payload.decode(errors="replace"), what)

    def _refused(self, code: int, raw: str, what: str) -> None:
        """A reply of HTTP ``code`` >= 400, as the error it means."""
        if code == 404:
            raise NotConnected(_details(raw) or raw.strip())
        if code == 500:
            last = (raw.strip().splitlines() or ["(empty reply)"])[-1]
            raise UsageError(
                f"router rejected {what}: HTTP 500 ({last}). rest_router crashes instead "
                "of answering when a value is malformed",
                hint="check the addresses; the router log has the full traceback")
        if code == 400:
            raise UsageError(f"router rejected {what}: {_details(raw) or raw.strip()}")
        raise EnvironmentProblem(f"router at {self.base} answered HTTP {code} to "
                                 f"{what}: {raw.strip()[:200]}")


class NotConnected(EnvironmentProblem):
    """HTTP 404 from rest_router: the datapath has not joined (or never existed)."""

    def __init__(self, details: str) -> None:
        super().__init__(
            f"the bridge is not connected to the router ({details})",
            hint="`linkemu router status` shows whether the bridge reached the controller")


def _details(raw: str) -> str:
    try:
        reply = json.loads(raw)
    except json.JSONDecodeError:
        return ""
    return str(reply.get("details", "")) if isinstance(reply, dict) else ""


_EXPLANATIONS = {
    "Address overlaps": "the address overlaps a network the router already has",
    "Destination overlaps": "a route to that destination already exists",
    "address is not registered": "the gateway is in none of the router's networks; add the "
                                 "router address of that network first",
    "is used as default gateway": "the gateway is one of the router's own addresses",
    "Skip delete": "an address cannot be deleted while a route uses it",
}


def _explain(details: str) -> str:
    for key, text in _EXPLANATIONS.items():
        if key in details:
            return f"{text} (rest_router: {details})"
    return details or "no details given"


def _hint(details: str) -> str | None:
    if "overlaps" in details:
        return "`linkemu router status` shows what the router holds already"
    return None


def _check_interface(field: str, value: str) -> None:
    try:
        IPv4Interface(value)
    except (AddressValueError, NetmaskValueError, ValueError) as exc:
        raise UsageError(f"router {field} {value!r} is not an IPv4 address with a prefix "
                         f"(like 198.18.0.1/24): {exc}") from None
    if "/" not in value:
        raise UsageError(f"router {field} {value!r} needs a prefix length (like 198.18.0.1/24)")


def _check_address(field: str, value: str) -> None:
    try:
        IPv4Address(value)
    except (AddressValueError, ValueError) as exc:
        raise UsageError(f"router {field} {value!r} is not an IPv4 address: {exc}") from None
