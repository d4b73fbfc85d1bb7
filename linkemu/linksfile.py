"""Read a links file (thesis Linksimulation format or linkemu's native format) into a EmulatedLinks.

Everything is checked before anything is returned, and every complaint names the
place in the file (``Linkproperties[0].delay_2_forward: unknown unit 'mx'``), so a
bad file costs the user one look, and nothing downstream ever sees half a table.

Thesis format, as printed in Fig. 4.6 of the seed thesis (thesis-nestednet-linkemu.txt)::

    {"Linksimulation": {
      "Routerpairs": [{"Routerid": 1, "Clientcount": 3, "Client_IP1": "...",
                       "Client_IP2": "...", "Client_IP3": "...", "Server_IP": "..."}],
      "Linkproperties": [{"Routerid": 1, "properties": [{
          "throughput_1_forward": "46Mbps", "delay_1_forward": "11ms",
          "packetloss_1_forward": "0", ... _backward ..., ... clients 2, 3 ...}]}]}}

and the flattened alias accepted before we had the figure: ``Routerpairs`` and
``Linkproperties`` at the top level, each ``Linkproperties`` entry holding the property
keys itself. Both shapes are checked by ``schemas/links-thesis.schema.json`` first.
In the flattened shape ``Linkproperties`` may be aligned with ``Routerpairs`` (entry i
belongs to router i) instead of naming ``Routerid``, and a single object stands for a
single router. Delay and packet loss default to 0 (the figure omits
``packetloss_3_forward``); throughput is required each way. Client n of router R
becomes client ``C<n>`` of router ``R<id>`` (link name ``R1-C2``); no jitter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib import resources
from ipaddress import AddressValueError, IPv4Address
from pathlib import Path
from typing import Any, NamedTuple

import jsonschema

from linkemu import router_plan
from linkemu.model import DIRECTIONS, EmulatedLinks, Emulator, Link, LinkShape
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


def load(path: str | Path) -> EmulatedLinks:
    """Parse and validate the file at ``path``; raise LinksFileError (exit 2) when unusable."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LinksFileError("", f"cannot read the links file: {exc.strerror}",
                             source=source) from exc
    except UnicodeDecodeError as exc:
        raise LinksFileError("", f"not UTF-8 text (byte {exc.start})", source=source) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LinksFileError("", f"not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}", source=source) from exc
    except RecursionError:
        raise LinksFileError("", "not valid JSON: nested too deeply", source=source) from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise LinksFileError("", f"not usable JSON: {exc}".split(";")[0],
                             source=source) from None
    try:
        return parse(data)
    except LinksFileError as exc:
        raise LinksFileError(exc.path, exc.reason, source=source) from None


def parse(data: Any) -> EmulatedLinks:
    """Parse an already-decoded document of either format."""
    if not isinstance(data, dict):
        raise LinksFileError("", "the top level must be a JSON object")
    if {PRINTED_ROOT, "Routerpairs", "Linkproperties"} & set(data):
        table, origins = _parse_thesis(data)
    elif "links" in data:
        table, origins = _parse_native(data)
    else:
        raise LinksFileError("", "neither a thesis file (Linksimulation, or Routerpairs + "
                             "Linkproperties) nor a native one (links)")
    _check_table(table, origins)
    _check_routable(table, origins)
    return table


def _check_routable(table: EmulatedLinks, origins: list[str]) -> None:
    """The router plan's address checks, located at the link that brought the address."""
    if table.emulator.netns is not None:
        return  # no router part (see shaping.router_part)
    try:
        router_plan.plan(table)
    except router_plan.AddressProblem as exc:
        for link, at in zip(table.links, origins, strict=True):
            if exc.address in (link.client_ip, link.server_ip):
                raise LinksFileError(at, str(exc)) from None
        raise
    except UsageError:
        pass  # other router problems are not one link's: `apply` reports them as before


# --- native format ----------------------------------------------------------------


def _json_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _validate(schema_doc: dict, data: Any, prefix: list[str | int] | None = None) -> None:
    """Raise the deepest schema error at its JSON path; a missing or unknown key is named."""
    validator = jsonschema.Draft202012Validator(
        schema_doc, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.path)), e.message))
    if not errors:
        return
    first = min(errors, key=lambda e: -len(e.path))
    path = [*(prefix or []), *first.absolute_path]
    instance = first.instance
    if first.validator == "required" and isinstance(instance, dict):
        missing = [k for k in first.validator_value if k not in instance]
        raise LinksFileError(_json_path([*path, missing[0]]), "missing")
    if first.validator == "additionalProperties" and isinstance(instance, dict):
        known = set(first.schema.get("properties", {}))
        patterns = list(first.schema.get("patternProperties", {}))
        extra = sorted(k for k in instance if k not in known
                       and not any(re.search(p, k) for p in patterns))
        if extra:
            expected = ", ".join([*known, *patterns])
            raise LinksFileError(_json_path([*path, extra[0]]),
                                 f"unknown key (expected {expected})")
    raise LinksFileError(_json_path(path), first.message)


def _parse_native(data: dict) -> tuple[EmulatedLinks, list[str]]:
    _validate(schema(), data)
    emulator = _emulator(data.get("emulator", {}))
    links = []
    for i, entry in enumerate(data["links"]):
        at = f"links[{i}]"
        shapes = {}
        for direction in DIRECTIONS:
            spec = entry[direction]
            where = f"{at}.{direction}"
            shapes[direction] = _shape(
                rate=(spec.get("rate"), f"{where}.rate"),
                delay=(spec.get("delay", "0"), f"{where}.delay"),
                jitter=(spec.get("jitter", "0"), f"{where}.jitter"),
                loss=(spec.get("loss", "0"), f"{where}.loss"))
        links.append(Link(router=entry["router"], client=entry["client"],
                          client_ip=_ip(f"{at}.client_ip", entry["client_ip"]),
                          server_ip=_ip(f"{at}.server_ip", entry["server_ip"]),
                          forward=shapes["forward"], backward=shapes["backward"]))
    return (EmulatedLinks(links=tuple(links), emulator=emulator),
            [f"links[{i}]" for i in range(len(links))])


# --- thesis format ----------------------------------------------------------------

_PROPERTY = re.compile(r"^(throughput|delay|packetloss)_(\d+)_(forward|backward)$")
PRINTED_ROOT = "Linksimulation"


class _Router(NamedTuple):
    name: str
    clients: list[IPv4Address]
    server_ip: IPv4Address
    at: str


def thesis_schema() -> dict:
    """The thesis format's JSON Schema: ``$defs/printed`` and ``$defs/flattened``."""
    text = resources.files("linkemu").joinpath("schemas/links-thesis.schema.json").read_text()
    return json.loads(text)


def _parse_thesis(data: dict) -> tuple[EmulatedLinks, list[str]]:
    """Either shape of Fig. 4.6: validate against its schema, then read routers and links."""
    printed = PRINTED_ROOT in data
    full = thesis_schema()
    _validate({**full, "$ref": f"#/$defs/{'printed' if printed else 'flattened'}"}, data)
    body, root = (data[PRINTED_ROOT], PRINTED_ROOT) if printed else (data, "")
    routers = _thesis_routers(_as_list(body["Routerpairs"]), _join(root, "Routerpairs"))
    props_at = _join(root, "Linkproperties")
    by_router = _match_properties(_as_list(body["Linkproperties"]), props_at, routers,
                                  printed)
    links: list[Link] = []
    origins: list[str] = []
    for router in routers:
        entry, at = by_router[router.name]
        values = _property_values(entry, at, printed)
        home = f"{at}.properties[0]" if printed else at
        for n, client_ip in enumerate(router.clients, start=1):
            links.append(_thesis_link(router, n, client_ip, values, home))
            origins.append(f"{router.at}.Client_IP{n}")
    emulator = data.get("emulator", {})
    native = schema()
    _validate({**native["properties"]["emulator"], "$defs": native["$defs"]}, emulator,
              prefix=["emulator"])
    return EmulatedLinks(links=tuple(links), emulator=_emulator(emulator)), origins


def _as_list(value: Any) -> list:
    return [value] if isinstance(value, dict) else value


def _join(root: str, key: str) -> str:
    return f"{root}.{key}" if root else key


def _thesis_routers(pairs: list[dict], at_pairs: str) -> list[_Router]:
    """Routers with their clients and server; Client_IP1..Clientcount, no more, no fewer."""
    routers: list[_Router] = []
    for i, pair in enumerate(pairs):
        at = f"{at_pairs}[{i}]"
        name = _router_name(pair["Routerid"])
        count = int(pair["Clientcount"])  # the schema's "integer" also admits 3.0
        for key in pair:
            match = re.fullmatch(r"Client_IP(\d+)", key)
            if match and int(match.group(1)) > count:
                raise LinksFileError(f"{at}.{key}", f"unknown key for a router with "
                                     f"Clientcount {count}")
        clients = []
        for n in range(1, count + 1):
            key = f"Client_IP{n}"
            if key not in pair:
                raise LinksFileError(f"{at}.{key}", f"missing (Clientcount is {count})")
            clients.append(_ip(f"{at}.{key}", pair[key]))
        if any(r.name == name for r in routers):
            raise LinksFileError(f"{at}.Routerid", f"router {name} appears twice")
        routers.append(_Router(name, clients, _ip(f"{at}.Server_IP", pair["Server_IP"]), at))
    return routers


def _property_values(entry: dict, at: str, printed: bool) -> dict[tuple[str, int, str],
                                                                    tuple[Any, str]]:
    """(kind, client, direction) -> (value, its JSON path), from either shape."""
    groups = ([(obj, f"{at}.properties[{j}]") for j, obj in enumerate(entry["properties"])]
              if printed else [(entry, at)])
    out: dict[tuple[str, int, str], tuple[Any, str]] = {}
    for obj, where in groups:
        for key, value in obj.items():
            match = _PROPERTY.match(key)
            if match:
                out[(match.group(1), int(match.group(2)), match.group(3))] = (
                    value, f"{where}.{key}")
    return out


def _thesis_link(router: _Router, n: int, client_ip: IPv4Address,
                 values: dict[tuple[str, int, str], tuple[Any, str]], home: str) -> Link:
    """Client n's link; delay and packet loss default to 0 (Fig. 4.6 omits some)."""
    shapes = {}
    for direction in DIRECTIONS:
        if ("throughput", n, direction) not in values:
            raise LinksFileError(f"{home}.throughput_{n}_{direction}",
                                 "missing: every client needs a throughput each way")
        shapes[direction] = _shape(
            rate=values[("throughput", n, direction)],
            delay=values.get(("delay", n, direction), ("0", "")),
            jitter=("0", ""), loss=values.get(("packetloss", n, direction), ("0", "")))
    return Link(router=router.name, client=f"C{n}", client_ip=client_ip,
                server_ip=router.server_ip, forward=shapes["forward"],
                backward=shapes["backward"])


def _router_name(value: Any) -> str:
    """Routerid 1 (or 1.0, which the schema's "integer" admits) -> router R1; a name
    (schema-checked) stays itself."""
    text = str(int(value) if isinstance(value, float) else value).strip()
    return f"R{text}" if text.isdigit() else text


def _emulator(raw: dict[str, Any]) -> Emulator:
    """An Emulator from its (schema-checked) JSON form; router sides become RouterSides."""
    sides = {key: router_plan.side_from_native(raw[key], f"emulator.{key}")
             for key in ("client_side", "server_side") if key in raw}
    return Emulator(**{**raw, **sides})


def _match_properties(props: list, key: str, routers: list[_Router],
                      printed: bool) -> dict[str, tuple[dict, str]]:
    """Pair each router with its Linkproperties entry: by Routerid if given, else by position.

    Every property key must name a client its router has.
    """
    counts = {r.name: len(r.clients) for r in routers}
    out: dict[str, tuple[dict, str]] = {}
    for i, entry in enumerate(props):
        at = f"{key}[{i}]"
        if "Routerid" in entry:
            name = _router_name(entry["Routerid"])
            if name not in counts:
                raise LinksFileError(f"{at}.Routerid", f"router {name} is not in Routerpairs "
                                     f"(known: {', '.join(counts)})")
        elif i < len(routers):
            name = routers[i].name
        else:
            raise LinksFileError(at, f"no Routerid and no router at position {i} in "
                                 "Routerpairs")
        if name in out:
            raise LinksFileError(at, f"second set of properties for router {name}")
        out[name] = (entry, at)
        for (_, n, _), (_, where) in _property_values(entry, at, printed).items():
            if n > counts[name]:
                raise LinksFileError(where, f"client {n} does not exist: router {name} has "
                                     f"Clientcount {counts[name]}")
    for router in routers:
        if router.name not in out:
            raise LinksFileError(key, f"no properties for router {router.name}")
    return out


# --- shared -----------------------------------------------------------------------


def _ip(at: str, value: Any) -> IPv4Address:
    if not isinstance(value, str):
        raise LinksFileError(at, "must be an IPv4 address string")
    try:
        return IPv4Address(value.strip())
    except AddressValueError:
        raise LinksFileError(at, f"{value!r} is not an IPv4 address") from None


def _shape(*, rate: tuple[Any, str], delay: tuple[Any, str], jitter: tuple[Any, str],
           loss: tuple[Any, str]) -> LinkShape:
    """A LinkShape from (value, JSON path) pairs; an error names the offending value's path."""
    def one(value_at: tuple[Any, str], parse: Callable[[Any], Any]) -> Any:
        value, where = value_at
        try:
            return parse(value)
        except ValueError as exc:
            raise LinksFileError(where, str(exc)) from None

    shape = LinkShape(rate_bps=one(rate, units.parse_rate), delay_us=one(delay, units.parse_time),
                  jitter_us=one(jitter, units.parse_time), loss_pct=one(loss, units.parse_loss))
    if shape.jitter_us > shape.delay_us:
        raise LinksFileError(jitter[1], "jitter larger than the delay would need "
                             "negative delays")
    return shape


def _check_table(table: EmulatedLinks, origins: list[str]) -> None:
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


def to_native(table: EmulatedLinks) -> dict:
    """The table as a native-format document (what `linkemu edit` and the state file write)."""
    def shape(s: LinkShape) -> dict:
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
