"""The helper's wire protocol: frames, requests and what a client may ask (pure).

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON (an object),
at most MAX_FRAME bytes: JSON rather than pickle because the peer is a remote process
whose input must be checked, not trusted. A request is ``{"op": NAME, "args": {...}}``;
its answer ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"kind", "message"}}``.
A client may send several requests before reading any answer (answers come in order),
or one ``batch`` (a list of requests run in order, stopping at the first error), so a
node's wiring costs one round trip. Two operations turn the connection into a stream
once answered: ``forward`` (raw bytes to and from a unix socket under the state
directory) and ``routes`` (frames of route changes).

Every argument is checked against `OPS` before anything runs: names, types, sizes
and the shape of names the helper may touch. An interface the helper deletes must start
with the lab's name and '-' (and lab names that would prefix other software's
interfaces are refused: nestednet.model.topology.RESERVED_LAB_RE), a state directory
must be ``<lab>-n<N>``, a forwarded socket one of a parent's two (`SOCKETS`). What only
the helper can know is checked there (nestednet.hostd.server, docs/multihost.md
section 5b): that a lab belongs to the client asking (its certificate's subject), that
a pid is one of that lab's node's processes, that tc ports, tunnel masters and
underlays are the lab's own or the host's underlay.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Mapping
from typing import Any

from nestednet.model.topology import RESERVED_LAB_RE

VERSION = 2
MAX_FRAME = 1024 * 1024
"""Largest request frame the helper accepts."""
MAX_ANSWER = 64 * 1024 * 1024
"""Largest answer frame a client accepts from the helper it authenticated (a `tc read`
of a host's ports is the biggest: about 1 KiB a port)."""
MAX_BATCH = 256
"""Requests in one batch (wiring sends 2)."""
MAX_LIST = 4096
"""Items in a list or object argument (names, pids, tc ops): a host holds at most
MAX_NODES nodes of a lab, each with up to 2 * (MAX_IPHYS + 1) interfaces."""
MAX_PIDS = 1000
"""Pids in one `pids` or `routes` request (a lab has at most 999 nodes)."""
HEADER = struct.Struct(">I")

LAB = re.compile(r"[a-z][a-z0-9]{0,7}")
"""A lab name as nestednet.model.topology.check_lab_name allows it (fullmatch)."""
IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
"""A Linux interface name (at most 15 bytes; fullmatch)."""
PARENT_DIR = re.compile(r"(?P<lab>[a-z][a-z0-9]{0,7})-n(?P<node>[1-9][0-9]{0,5})")
"""A parent's state directory (fullmatch)."""
SOCKETS = ("docker.sock", "ovs/db.sock")
"""The unix sockets of a parent's state directory a client may reach: its inner engine
and its node OVSDB."""
TC_FUNCTIONS = ("disable_offloads", "check_ports", "apply", "build", "port_indexes",
                "change_batch", "change", "remove_trees", "read", "snapshot")
"""nestednet.adapters.tc functions the helper runs in the host's namespace."""


class ProtocolError(ValueError):
    """A frame or request that breaks the protocol; the message says where."""


# --- frames -----------------------------------------------------------------------------


def encode(message: Mapping[str, Any], limit: int = MAX_FRAME) -> bytes:
    """One frame holding ``message``."""
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > limit:
        raise ProtocolError(f"frame of {len(body)} bytes is over the {limit} limit")
    return HEADER.pack(len(body)) + body


def frame_length(header: bytes | bytearray, limit: int = MAX_FRAME) -> int:
    """The body length a frame header announces (refused above ``limit``)."""
    if len(header) != HEADER.size:
        raise ProtocolError("connection closed inside a frame header")
    (length,) = HEADER.unpack(header)
    if length > limit:
        raise ProtocolError(f"frame of {length} bytes announced, over the {limit} limit")
    return length


def decode(body: bytes | bytearray) -> dict[str, Any]:
    """The message in a frame's body: a JSON object."""
    try:
        message = json.loads(bytes(body).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("frame nests JSON too deeply") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"frame holds a {type(message).__name__}, not an object")
    return message


def read_frame(recv_exact: Callable[[int], bytes | bytearray],
               limit: int = MAX_FRAME) -> dict[str, Any] | None:
    """The next message from a stream (``recv_exact(n)`` returns n bytes, or fewer at its
    end); None when the stream ended cleanly between frames. The header is checked
    before the body is read, so an oversized frame costs nothing."""
    header = recv_exact(HEADER.size)
    if not header:
        return None
    length = frame_length(header, limit)
    body = recv_exact(length)
    if len(body) != length:
        raise ProtocolError(f"connection closed inside a frame ({len(body)} of {length} bytes)")
    return decode(body)


# --- requests ---------------------------------------------------------------------------

# Argument types: a Python type, a tuple of them (None allowed as NoneType), or a checker.
NONE = type(None)
Spec = Mapping[str, Any]


def _list_of(kind: type, most: int = MAX_LIST) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return isinstance(value, list) and len(value) <= most and all(
            isinstance(v, kind) and not isinstance(v, bool) if kind is int
            else isinstance(v, kind) for v in value)
    check.__name__ = f"list of at most {most} {kind.__name__}"
    return check


def _int_map(value: Any) -> bool:
    return isinstance(value, dict) and len(value) <= MAX_PIDS and all(
        isinstance(k, str) and k.isdigit() and isinstance(v, int) and not isinstance(v, bool)
        for k, v in value.items())


_int_map.__name__ = f"object of at most {MAX_PIDS} digit-string keys to integers"


def _short_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= MAX_LIST


_short_list.__name__ = f"list of at most {MAX_LIST} items"


def _batch(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= MAX_BATCH


_batch.__name__ = f"list of at most {MAX_BATCH} requests"

OPS: dict[str, Spec] = {
    "hello": {},
    "link.exists": {"names": _list_of(str)},
    "link.vxlan": {"lab": str, "name": str, "vni": int, "local": str, "remote": str,
                   "port": int, "underlay": (str, NONE), "mtu": (int, NONE),
                   "master": (str, NONE)},
    "link.bridge": {"lab": str, "name": str},
    "link.list": {"lab": str},
    "link.delete": {"lab": str, "names": _list_of(str)},
    "state.mkdir": {"lab": str, "name": str},
    "state.parent": {"lab": str, "name": str},
    "state.list": {"lab": str},
    "state.remove": {"lab": str, "names": _list_of(str)},
    "pids": {"lab": str, "node": int, "parent": int, "inner": _list_of(int, MAX_PIDS)},
    "memory": {"lab": str, "node": int, "pid": int},
    "qdiscs": {},
    "wire.node": {"lab": str, "node": int, "parent_pid": int, "children": _int_map,
                  "shape": _list_of(int), "plan": dict, "datapath": str,
                  "offloads": dict, "where": str, "inter_mtu": (int, NONE),
                  "control_mtu": (int, NONE), "recorded": _list_of(str)},
    "wire.component": {"lab": str, "node": int, "parent_pid": int, "component": int,
                       "inner_pid": int, "shape": _list_of(int), "plan": dict,
                       "offloads": dict, "where": str, "inter_mtu": (int, NONE),
                       "control_mtu": (int, NONE), "recorded": _list_of(str)},
    "tc": {"lab": str, "function": str, "args": _short_list},
    "forward": {"lab": str, "parent": str, "socket": str},
    "routes": {"lab": str, "pids": _int_map},
    "batch": {"requests": _batch},
}
"""Every operation and its arguments (all required; a None-able one must still be sent)."""
SWITCH_CALLS = {"node": ("add_bridge", "add_port", "del_port"),
                "host": ("add_bridge", "add_port", "del_port")}
"""The OVSDB calls wiring makes on the helper's side, per switch (the node's, the host's
main bridge): collected there, applied by the client (`wire.*` answers)."""
STREAMS = ("forward", "routes")
"""Operations after whose answer the connection is a stream, not frames of requests."""


def _type_ok(value: Any, expected: Any) -> bool:
    if callable(expected) and not isinstance(expected, type):
        return bool(expected(value))
    kinds = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) and bool not in kinds:
        return False  # JSON true is not an integer here
    return isinstance(value, kinds)


def _type_name(expected: Any) -> str:
    if isinstance(expected, tuple):
        return " or ".join("null" if k is NONE else k.__name__ for k in expected)
    return getattr(expected, "__name__", str(expected))


def check_request(message: Mapping[str, Any], *, nested: bool = False) -> tuple[str, dict]:
    """(op, args) of a well-formed request; ProtocolError naming the first problem."""
    op = message.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise ProtocolError(f"op: {op!r} is not one of {', '.join(sorted(OPS))}")
    if nested and (op in STREAMS or op == "batch"):
        raise ProtocolError(f"op {op}: not allowed inside a batch")
    args = message.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError(f"{op}: args must be an object")
    spec = OPS[op]
    unknown = sorted(set(args) - set(spec))
    if unknown:
        raise ProtocolError(f"{op}: unknown argument(s) {', '.join(unknown)}")
    for name, expected in spec.items():
        if name not in args:
            raise ProtocolError(f"{op}: argument {name} is missing")
        if not _type_ok(args[name], expected):
            raise ProtocolError(f"{op}: argument {name} must be {_type_name(expected)}, "
                                f"not {type(args[name]).__name__}")
    _check_names(op, args)
    if op == "batch":
        for i, inner in enumerate(args["requests"]):
            if not isinstance(inner, dict):
                raise ProtocolError(f"batch: request #{i} is not an object")
            try:
                check_request(inner, nested=True)
            except ProtocolError as exc:
                raise ProtocolError(f"batch: request #{i}: {exc}") from None
    return op, args


def _check_names(op: str, args: Mapping[str, Any]) -> None:
    """What a request may touch: only what NestedNet names after a lab."""
    lab = args.get("lab")
    if lab is not None:
        if not LAB.fullmatch(lab):
            raise ProtocolError(f"{op}: lab {lab!r} is not a lab name")
        if RESERVED_LAB_RE.fullmatch(lab):
            raise ProtocolError(f"{op}: lab name {lab!r} is reserved (interfaces named "
                                f"{lab}-... belong to other software)")
    names = [args["name"]] if "name" in args else list(args.get("names", []))
    if op in ("link.vxlan", "link.bridge", "link.delete"):
        for name in names:
            if not is_lab_interface(name, lab):
                raise ProtocolError(f"{op}: interface {name!r} is not one of lab {lab}'s")
    if op == "link.vxlan":
        if args["master"] is not None and not is_lab_interface(args["master"], lab):
            raise ProtocolError(f"link.vxlan: master {args['master']!r} is not one of lab "
                                f"{lab}'s")
        if args["underlay"] is not None and not IFNAME.fullmatch(args["underlay"]):
            raise ProtocolError(f"link.vxlan: {args['underlay']!r} is not an interface name")
    if op == "link.exists":
        for name in names:
            if not IFNAME.fullmatch(name):
                raise ProtocolError(f"{op}: {name!r} is not an interface name")
    if op.startswith("state.") and op != "state.list":
        for name in names:
            match = PARENT_DIR.fullmatch(name)
            if not match or match["lab"] != lab:
                raise ProtocolError(f"{op}: {name!r} is not a parent directory of lab {lab}")
    if op == "forward":
        match = PARENT_DIR.fullmatch(args["parent"])
        if not match or match["lab"] != lab:
            raise ProtocolError(f"forward: {args['parent']!r} is not a parent of lab {lab}")
        if args["socket"] not in SOCKETS:
            raise ProtocolError(f"forward: socket {args['socket']!r} is not one of "
                                f"{', '.join(SOCKETS)}")
    if op == "tc" and args["function"] not in TC_FUNCTIONS:
        raise ProtocolError(f"tc: function {args['function']!r} is not one of "
                            f"{', '.join(TC_FUNCTIONS)}")
    if op.startswith("wire.") and not all(is_lab_interface(n, lab) for n in args["recorded"]):
        raise ProtocolError(f"{op}: recorded names must be lab {lab}'s")
    for key in ("pid", "parent", "parent_pid", "inner_pid", "node"):
        if key in args and isinstance(args[key], int) and args[key] < 1:
            raise ProtocolError(f"{op}: {key} must be a positive integer")
    if op in ("pids", "routes"):
        pids = args["inner"] if op == "pids" else list(args["pids"].values())
        if any(pid < 1 for pid in pids):
            raise ProtocolError(f"{op}: pids must be positive integers")


def is_lab_interface(name: Any, lab: str) -> bool:
    """Whether ``name`` is an interface name lab ``lab`` may hold: ``<lab>-...``."""
    return isinstance(name, str) and bool(IFNAME.fullmatch(name)) and \
        name.startswith(f"{lab}-")


def request(op: str, **args: Any) -> dict[str, Any]:
    """A request message (checked, so a client never sends what the helper refuses)."""
    message = {"op": op, "args": args}
    check_request(message)
    return message


def answer(result: Any) -> dict[str, Any]:
    return {"ok": True, "result": result}


ERROR_KINDS = ("protocol", "refused", "usage", "environment", "netlink", "internal")


def failure(kind: str, message: str) -> dict[str, Any]:
    assert kind in ERROR_KINDS
    return {"ok": False, "error": {"kind": kind, "message": message}}
