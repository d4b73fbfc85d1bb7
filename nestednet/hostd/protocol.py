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

Every argument is checked against `OPS` before anything runs: names, types, and the
shape of names the helper may touch. An interface the helper deletes must start with
the lab's name and '-', a state directory must be ``<lab>-n<N>``, a forwarded socket one
of a parent's two (`SOCKETS`): a client can make the helper touch nothing NestedNet did
not make. (Any client the helper accepts is trusted as the CLI machine is: it holds a
certificate of the hosts' PKI, section 5a.)
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Mapping
from typing import Any

VERSION = 1
MAX_FRAME = 16 * 1024 * 1024
"""Largest frame either side accepts (a `tc read` of many ports is the biggest answer)."""
HEADER = struct.Struct(">I")

LAB = re.compile(r"^[a-z][a-z0-9]{0,7}$")
"""A lab name as nestednet.model.topology.check_lab_name allows it."""
IFNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
"""A Linux interface name (at most 15 bytes)."""
PARENT_DIR = re.compile(r"^(?P<lab>[a-z][a-z0-9]{0,7})-n[1-9][0-9]{0,5}$")
SOCKETS = ("docker.sock", "ovs/db.sock")
"""The unix sockets of a parent's state directory a client may reach: its inner engine
and its node OVSDB."""
TC_FUNCTIONS = ("disable_offloads", "check_ports", "apply", "build", "port_indexes",
                "change_batch", "change", "remove_trees", "read", "snapshot")
"""nestednet.adapters.tc functions the helper runs in the host's namespace."""


class ProtocolError(ValueError):
    """A frame or request that breaks the protocol; the message says where."""


# --- frames -----------------------------------------------------------------------------


def encode(message: Mapping[str, Any]) -> bytes:
    """One frame holding ``message``."""
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes is over the {MAX_FRAME} limit")
    return HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """The body length a frame header announces (refused above MAX_FRAME)."""
    if len(header) != HEADER.size:
        raise ProtocolError("connection closed inside a frame header")
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes announced, over the {MAX_FRAME} limit")
    return length


def decode(body: bytes) -> dict[str, Any]:
    """The message in a frame's body: a JSON object."""
    try:
        message = json.loads(body.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"frame holds a {type(message).__name__}, not an object")
    return message


def read_frame(recv_exact: Callable[[int], bytes]) -> dict[str, Any] | None:
    """The next message from a stream (``recv_exact(n)`` returns n bytes, or fewer at its
    end); None when the stream ended cleanly between frames."""
    header = recv_exact(HEADER.size)
    if not header:
        return None
    length = frame_length(header)
    body = recv_exact(length)
    if len(body) != length:
        raise ProtocolError(f"connection closed inside a frame ({len(body)} of {length} bytes)")
    return decode(body)


# --- requests ---------------------------------------------------------------------------

# Argument types: a Python type, a tuple of them (None allowed as NoneType), or a checker.
NONE = type(None)
Spec = Mapping[str, Any]


def _list_of(kind: type) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return isinstance(value, list) and all(isinstance(v, kind) and not isinstance(v, bool)
                                               if kind is int else isinstance(v, kind)
                                               for v in value)
    check.__name__ = f"list of {kind.__name__}"
    return check


def _int_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and k.isdigit() and isinstance(v, int) and not isinstance(v, bool)
        for k, v in value.items())


_int_map.__name__ = "object of digit-string keys to integers"

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
    "pids": {"parent": int, "inner": _list_of(int)},
    "memory": {"pid": int},
    "qdiscs": {},
    "wire.node": {"lab": str, "node": int, "parent_pid": int, "children": _int_map,
                  "shape": _list_of(int), "plan": dict, "datapath": str,
                  "offloads": dict, "where": str, "inter_mtu": (int, NONE),
                  "control_mtu": (int, NONE), "recorded": _list_of(str)},
    "wire.component": {"lab": str, "node": int, "parent_pid": int, "component": int,
                       "inner_pid": int, "shape": _list_of(int), "plan": dict,
                       "offloads": dict, "where": str, "inter_mtu": (int, NONE),
                       "control_mtu": (int, NONE), "recorded": _list_of(str)},
    "tc": {"function": str, "args": list},
    "forward": {"lab": str, "parent": str, "socket": str},
    "routes": {"pids": _int_map},
    "batch": {"requests": list},
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
    if lab is not None and not LAB.match(lab):
        raise ProtocolError(f"{op}: lab {lab!r} is not a lab name")
    names = [args["name"]] if "name" in args else list(args.get("names", []))
    if op in ("link.vxlan", "link.bridge", "link.delete"):
        for name in names:
            if not IFNAME.match(name) or not name.startswith(f"{lab}-"):
                raise ProtocolError(f"{op}: interface {name!r} is not one of lab {lab}'s")
    if op == "link.exists":
        for name in names:
            if not IFNAME.match(name):
                raise ProtocolError(f"{op}: {name!r} is not an interface name")
    if op.startswith("state.") and op != "state.list":
        for name in names:
            match = PARENT_DIR.match(name)
            if not match or match["lab"] != lab:
                raise ProtocolError(f"{op}: {name!r} is not a parent directory of lab {lab}")
    if op == "forward":
        match = PARENT_DIR.match(args["parent"])
        if not match or match["lab"] != lab:
            raise ProtocolError(f"forward: {args['parent']!r} is not a parent of lab {lab}")
        if args["socket"] not in SOCKETS:
            raise ProtocolError(f"forward: socket {args['socket']!r} is not one of "
                                f"{', '.join(SOCKETS)}")
    if op == "tc" and args["function"] not in TC_FUNCTIONS:
        raise ProtocolError(f"tc: function {args['function']!r} is not one of "
                            f"{', '.join(TC_FUNCTIONS)}")
    if op.startswith("wire.") and not all(n.startswith(f"{lab}-") for n in args["recorded"]):
        raise ProtocolError(f"{op}: recorded names must be lab {lab}'s")
    for key in ("pid", "parent", "parent_pid", "inner_pid", "node"):
        if key in args and isinstance(args[key], int) and args[key] < 1:
            raise ProtocolError(f"{op}: {key} must be a positive integer")


def request(op: str, **args: Any) -> dict[str, Any]:
    """A request message (checked, so a client never sends what the helper refuses)."""
    message = {"op": op, "args": args}
    check_request(message)
    return message


def answer(result: Any) -> dict[str, Any]:
    return {"ok": True, "result": result}


ERROR_KINDS = ("protocol", "usage", "environment", "netlink", "internal")


def failure(kind: str, message: str) -> dict[str, Any]:
    assert kind in ERROR_KINDS
    return {"ok": False, "error": {"kind": kind, "message": message}}
