"""Read a links file (thesis Linksimulation format or linkemu's native format) into a LinkTable.

Everything is checked before anything is returned, and every complaint names the
place in the file (``Linkproperties[0].delay_2_forward: unknown unit 'mx'``), so a
bad file costs the user one look, and nothing downstream ever sees half a table.

Thesis format (Fig. 4.6 of the seed thesis, as we read its description)::

    {"Routerpairs": [{"Routerid": 1, "Clientcount": 3,
                      "Client_IP1": "...", "Client_IP2": "...", "Client_IP3": "...",
                      "Server_IP": "..."}],
     "Linkproperties": [{"Routerid": 1,
                         "throughput_1_forward": "46Mbps", "delay_1_forward": "11ms",
                         "packetloss_1_forward": "0", ... _backward ...}]}

``Linkproperties`` is a list aligned with ``Routerpairs`` (entry i belongs to
router i) or a list of objects each naming its ``Routerid`` (any order); a single
object is accepted for a single router. Client n of router R becomes client
``C<n>`` of router ``R<id>`` (link name ``R1-C2``); the thesis format has no jitter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib import resources
from ipaddress import AddressValueError, IPv4Address
from pathlib import Path
from typing import Any

import jsonschema

from linkemu import router_plan
from linkemu.model import DIRECTIONS, Emulator, Link, LinkTable, Shape
from nestednet.errors import UsageError
from nestednet.model import units

MAX_LINKS = 0xFFFF - 0x20
"""Leaf class minors start at 0x10 and 0xffff is the default class (see tcplan)."""

FORMAT_HINT = "the links file formats are described in linkemu/README.md"


class LinksFileError(UsageError):
    """A links file that cannot be used; the message starts with the path inside the file."""

    def __init__(self, path: str, reason: str, *, source: str | None = None) -> None:
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {reason}" if path else f"{where}{reason}",
                         hint=FORMAT_HINT)
        self.path = path
        self.reason = reason


def schema() -> dict:
    """The native format's JSON Schema (shipped as package data)."""
    text = resources.files("linkemu").joinpath("schemas/links.schema.json").read_text()
    return json.loads(text)


def load(path: str | Path) -> LinkTable:
    """Parse and validate the file at ``path``; raise LinksFileError (exit 2) when unusable."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LinksFileError("", f"cannot read the links file: {exc.strerror}",
                             source=source) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LinksFileError("", f"not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}", source=source) from exc
    try:
        return parse(data)
    except LinksFileError as exc:
        raise LinksFileError(exc.path, exc.reason, source=source) from None


def parse(data: Any) -> LinkTable:
    """Parse an already-decoded document of either format."""
    if not isinstance(data, dict):
        raise LinksFileError("", "the top level must be a JSON object")
    if "Routerpairs" in data or "Linkproperties" in data:
        table, origins = _parse_thesis(data)
    elif "links" in data:
        table, origins = _parse_native(data)
    else:
        raise LinksFileError("", "neither a thesis file (Routerpairs + Linkproperties) "
                             "nor a native one (links)")
    _check_table(table, origins)
    return table


# --- native format ----------------------------------------------------------------


def _json_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _parse_native(data: dict) -> tuple[LinkTable, list[str]]:
    validator = jsonschema.Draft202012Validator(
        schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.path)), e.message))
    if errors:
        first = min(errors, key=lambda e: -len(e.path))
        raise LinksFileError(_json_path(first.absolute_path), first.message)
    emulator = _emulator(data.get("emulator", {}))
    links = []
    for i, entry in enumerate(data["links"]):
        at = f"links[{i}]"
        shapes = {}
        for direction in DIRECTIONS:
            spec = entry[direction]
            shapes[direction] = _shape(
                f"{at}.{direction}", rate=("rate", spec.get("rate")),
                delay=("delay", spec.get("delay", "0")),
                jitter=("jitter", spec.get("jitter", "0")),
                loss=("loss", spec.get("loss", "0")))
        links.append(Link(router=entry["router"], client=entry["client"],
                          client_ip=_ip(f"{at}.client_ip", entry["client_ip"]),
                          server_ip=_ip(f"{at}.server_ip", entry["server_ip"]),
                          forward=shapes["forward"], backward=shapes["backward"]))
    return (LinkTable(links=tuple(links), emulator=emulator),
            [f"links[{i}]" for i in range(len(links))])


# --- thesis format ----------------------------------------------------------------

_PROPERTY = re.compile(r"^(throughput|delay|packetloss)_(\d+)_(forward|backward)$")


def _router_name(value: Any, at: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise LinksFileError(at, "Routerid must be a number or a name")
    text = str(value).strip()
    if not re.fullmatch(r"[A-Za-z0-9_.]{1,32}", text):
        raise LinksFileError(at, f"Routerid {value!r} may only hold letters, digits, _ and .")
    return f"R{text}" if text.isdigit() else text


def _parse_thesis(data: dict) -> tuple[LinkTable, list[str]]:
    unknown = sorted(set(data) - {"Routerpairs", "Linkproperties", "emulator", "description"})
    if unknown:
        raise LinksFileError(unknown[0], "unknown key (expected Routerpairs, Linkproperties)")
    for key in ("Routerpairs", "Linkproperties"):
        if key not in data:
            raise LinksFileError(key, "missing (a thesis file has Routerpairs and "
                                 "Linkproperties)")
    pairs = data["Routerpairs"]
    if isinstance(pairs, dict):
        pairs = [pairs]
    if not isinstance(pairs, list) or not pairs:
        raise LinksFileError("Routerpairs", "must be a non-empty list of router objects")
    props = data["Linkproperties"]
    props_key = "Linkproperties"
    if isinstance(props, dict):
        props = [props]
    if not isinstance(props, list):
        raise LinksFileError(props_key, "must be a list of objects (one per router)")

    routers: list[tuple[str, list[IPv4Address], IPv4Address, int]] = []
    for i, pair in enumerate(pairs):
        at = f"Routerpairs[{i}]"
        if not isinstance(pair, dict):
            raise LinksFileError(at, "must be an object")
        if "Routerid" not in pair:
            raise LinksFileError(f"{at}.Routerid", "missing: every router needs its Routerid")
        router = _router_name(pair["Routerid"], f"{at}.Routerid")
        count = pair.get("Clientcount")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise LinksFileError(f"{at}.Clientcount", "must be a whole number >= 1")
        allowed = {"Routerid", "Clientcount", "Server_IP"} | {
            f"Client_IP{n}" for n in range(1, count + 1)}
        extra = sorted(set(pair) - allowed)
        if extra:
            raise LinksFileError(f"{at}.{extra[0]}", f"unknown key for a router with "
                                 f"Clientcount {count}")
        clients = []
        for n in range(1, count + 1):
            key = f"Client_IP{n}"
            if key not in pair:
                raise LinksFileError(f"{at}.{key}", f"missing (Clientcount is {count})")
            clients.append(_ip(f"{at}.{key}", pair[key]))
        if "Server_IP" not in pair:
            raise LinksFileError(f"{at}.Server_IP", "missing")
        routers.append((router, clients, _ip(f"{at}.Server_IP", pair["Server_IP"]), i))

    names = [r[0] for r in routers]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise LinksFileError(f"Routerpairs[{i}].Routerid", f"router {name} appears twice")

    by_router = _match_properties(props, props_key, routers)
    links = []
    origins = []
    for router, clients, server_ip, position in routers:
        entry, at = by_router[router]
        count = len(clients)
        seen: dict[tuple[str, int, str], Any] = {}
        for key, value in entry.items():
            if key == "Routerid":
                continue
            match = _PROPERTY.match(key)
            if not match:
                raise LinksFileError(f"{at}.{key}", "unknown key (expected throughput_<n>_"
                                     "forward|backward, delay_<n>_..., packetloss_<n>_...)")
            kind, n, direction = match.group(1), int(match.group(2)), match.group(3)
            if not 1 <= n <= count:
                raise LinksFileError(f"{at}.{key}", f"client {n} does not exist: router "
                                     f"{router} has Clientcount {count}")
            seen[(kind, n, direction)] = value
        for n, client_ip in enumerate(clients, start=1):
            shapes = {}
            for direction in DIRECTIONS:
                if ("throughput", n, direction) not in seen:
                    raise LinksFileError(f"{at}.throughput_{n}_{direction}",
                                         "missing: every client needs a throughput each way")
                shapes[direction] = _shape(
                    at,
                    rate=(f"throughput_{n}_{direction}", seen[("throughput", n, direction)]),
                    delay=(f"delay_{n}_{direction}", seen.get(("delay", n, direction), "0")),
                    jitter=("jitter", "0"),
                    loss=(f"packetloss_{n}_{direction}",
                          seen.get(("packetloss", n, direction), "0")))
            origins.append(f"Routerpairs[{position}].Client_IP{n}")
            links.append(Link(router=router, client=f"C{n}", client_ip=client_ip,
                              server_ip=server_ip, forward=shapes["forward"],
                              backward=shapes["backward"]))
    emulator = data.get("emulator", {})
    if not isinstance(emulator, dict):
        raise LinksFileError("emulator", "must be an object")
    full = schema()
    try:
        jsonschema.validate(emulator, {**full["properties"]["emulator"], "$defs": full["$defs"]})
    except jsonschema.ValidationError as exc:
        raise LinksFileError(_json_path(["emulator", *exc.absolute_path]), exc.message) from None
    return LinkTable(links=tuple(links), emulator=_emulator(emulator)), origins


def _emulator(raw: dict[str, Any]) -> Emulator:
    """An Emulator from its (schema-checked) JSON form; router sides become RouterSides."""
    sides = {key: router_plan.side_from_native(raw[key], f"emulator.{key}")
             for key in ("client_side", "server_side") if key in raw}
    return Emulator(**{**raw, **sides})


def _match_properties(props: list, key: str, routers: list) -> dict[str, tuple[dict, str]]:
    """Pair each router with its Linkproperties entry: by Routerid if given, else by position."""
    out: dict[str, tuple[dict, str]] = {}
    for i, entry in enumerate(props):
        at = f"{key}[{i}]"
        if not isinstance(entry, dict):
            raise LinksFileError(at, "must be an object")
        if "Routerid" in entry:
            name = _router_name(entry["Routerid"], f"{at}.Routerid")
            if name not in {r[0] for r in routers}:
                raise LinksFileError(f"{at}.Routerid", f"router {name} is not in Routerpairs "
                                     f"(known: {', '.join(r[0] for r in routers)})")
        elif i < len(routers):
            name = routers[i][0]
        else:
            raise LinksFileError(at, f"no Routerid and no router at position {i} in "
                                 "Routerpairs")
        if name in out:
            raise LinksFileError(at, f"second set of properties for router {name}")
        out[name] = (entry, at)
    for router, *_ in routers:
        if router not in out:
            raise LinksFileError(key, f"no properties for router {router}")
    return out


# --- shared -----------------------------------------------------------------------


def _ip(at: str, value: Any) -> IPv4Address:
    if not isinstance(value, str):
        raise LinksFileError(at, "must be an IPv4 address string")
    try:
        return IPv4Address(value.strip())
    except AddressValueError:
        raise LinksFileError(at, f"{value!r} is not an IPv4 address") from None


def _one(at: str, key: str, value: Any, parse: Callable[[Any], Any]) -> Any:
    try:
        return parse(value)
    except ValueError as exc:
        raise LinksFileError(f"{at}.{key}", str(exc)) from None


def _shape(at: str, *, rate: tuple[str, Any], delay: tuple[str, Any], jitter: tuple[str, Any],
           loss: tuple[str, Any]) -> Shape:
    shape = Shape(rate_bps=_one(at, *rate, units.parse_rate),
                  delay_us=_one(at, *delay, units.parse_time),
                  jitter_us=_one(at, *jitter, units.parse_time),
                  loss_pct=_one(at, *loss, units.parse_loss))
    if shape.jitter_us > shape.delay_us:
        raise LinksFileError(f"{at}.{jitter[0]}", "jitter larger than the delay would need "
                             "negative delays")
    return shape


def _check_table(table: LinkTable, origins: list[str]) -> None:
    if not table.links:
        raise LinksFileError("links", "no links")
    if len(table.links) > MAX_LINKS:
        raise LinksFileError("links", f"{len(table.links)} links; at most {MAX_LINKS}")
    emu = table.emulator
    if emu.client_port == emu.server_port:
        raise LinksFileError("emulator", "client_port and server_port must differ")
    names: dict[str, str] = {}
    pairs: dict[tuple[IPv4Address, IPv4Address], str] = {}
    for link, at in zip(table.links, origins, strict=True):
        if link.client_ip == link.server_ip:
            raise LinksFileError(at, f"client IP and server IP are both {link.client_ip}")
        if link.name in names:
            raise LinksFileError(at, f"duplicate client {link.name} (also {names[link.name]})")
        names[link.name] = at
        pair = (link.client_ip, link.server_ip)
        if pair in pairs:
            raise LinksFileError(at, f"duplicate client: {link.client_ip} -> {link.server_ip} "
                                 f"is already a link ({pairs[pair]}); tc could not tell the "
                                 "two apart")
        pairs[pair] = at


def to_native(table: LinkTable) -> dict:
    """The table as a native-format document (what `linkemu edit` and the state file write)."""
    def shape(s: Shape) -> dict:
        return {"rate": units.format_rate(s.rate_bps), "delay": units.format_time(s.delay_us),
                "jitter": units.format_time(s.jitter_us), "loss": units.format_loss(s.loss_pct)}

    emu = table.emulator
    emulator: dict[str, Any] = {"bridge": emu.bridge, "client_port": emu.client_port,
                                "server_port": emu.server_port}
    if emu.netns is not None:
        emulator["netns"] = emu.netns
    for key in ("client_side", "server_side"):
        side = getattr(emu, key)
        if side is not None:
            emulator[key] = router_plan.side_to_native(side)
    return {"emulator": emulator, "links": [
        {"router": link.router, "client": link.client, "client_ip": str(link.client_ip),
         "server_ip": str(link.server_ip), "forward": shape(link.forward),
         "backward": shape(link.backward)} for link in table.links]}
