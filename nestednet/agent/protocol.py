"""The CA <-> GNAB control protocol: one JSON object per line over TCP.

Standard library only, because this package is baked into the component image; the
CA imports the same module, so both ends agree on every message by construction.

Agent -> CA
    HELLO      {node, iphys: [{name, inter_ip, up}], links: [...what the agent believes]}
    LINK_REQ   {req_id, src_node, dst_node, src_iphy, step?, sent?}
               (step: the last STEP the agent had; sent: Unix time it was sent)
CA -> agent
    ID         {node, node_id, control_ip, links: [{peer, local_iphy, peer_iphy}],
                iphys: [name, ...]}  (the iPHYs the scenario gives this node; optional)
                directory?: {node: {address, iphys: {name: inter_ip}}}  (every node's
                node address and iPHY inter addresses: what --routing direct routes by)
    STEP       {step, time, peers: [node, ...], links: [{peer, local_iphy, peer_iphy}],
                full?: [node, ...]}  (visible, unlinked peers with no free iPHY left)
    FULL       {peers: [node, ...]}  (visible peers that have just used their last iPHY)
    LINK_OK    {req_id, src_node, dst_node, src_iphy, dst_iphy}
    LINK_FAIL  {req_id, src_node, dst_node, src_iphy, reason}
    LINK_UP    {peer, local_iphy, peer_iphy}   (to the destination of an accepted request)
    ERROR      {error}                          (answer to a malformed message)

STEP is the only message a new scenario step sends: the new visible peers and the
node's links after the links that visibility lost were taken down, together. An
agent that replaces its view with it acts on the CA's state at that step and never
on a half-updated one (visibility old, a link already gone), which is what made
agents ask again for links the CA had just removed. Messages on one connection
arrive in the order the CA's single thread sent them, so every LINK_OK/LINK_UP
after a STEP is news on top of it; within a batch of decisions the LINK_UPs come before
the LINK_OKs, and both before the LINK_FAILs. Within a step iPHYs are only taken, never
freed, so a peer reported full (in STEP or FULL) stays so until the next STEP and
the agent does not ask it: the CA would refuse it with no_free_iphy.
"""

from __future__ import annotations

import json

HELLO = "HELLO"
LINK_REQ = "LINK_REQ"
ID = "ID"
STEP = "STEP"
LINK_OK = "LINK_OK"
LINK_FAIL = "LINK_FAIL"
LINK_UP = "LINK_UP"
FULL = "FULL"
ERROR = "ERROR"

MAX_LINE = 64 * 1024
"""Longest message accepted; a peer that sends more is cut off, not buffered forever."""

# Fields a message type may carry, with their JSON types (checked when present).
_OPTIONAL: dict[str, dict[str, type | tuple[type, ...]]] = {
    LINK_REQ: {"step": int, "sent": (int, float)},
    STEP: {"full": list},
    ID: {"directory": dict},
}

# Fields each message type must carry, with their JSON types.
_REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    HELLO: {"node": str, "iphys": list},
    LINK_REQ: {"req_id": int, "src_node": str, "dst_node": str, "src_iphy": str},
    ID: {"node": str, "node_id": int, "control_ip": str, "links": list},
    STEP: {"step": int, "time": (int, float), "peers": list, "links": list},
    LINK_OK: {"req_id": int, "src_node": str, "dst_node": str, "src_iphy": str,
              "dst_iphy": str},
    LINK_FAIL: {"req_id": int, "dst_node": str, "reason": str},
    LINK_UP: {"peer": str, "local_iphy": str, "peer_iphy": str},
    FULL: {"peers": list},
    ERROR: {"error": str},
}


class ProtocolError(ValueError):
    """A line that is not a valid message; the receiver answers ERROR and carries on."""


def encode(kind: str, **fields: object) -> bytes:
    message = {"type": kind, **fields}
    validate(message)
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict:
    if len(line) > MAX_LINE:
        raise ProtocolError(f"message longer than {MAX_LINE} bytes")
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    validate(message)
    return message


def validate(message: object) -> None:
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    kind = message.get("type")
    if kind not in _REQUIRED:
        raise ProtocolError(f"unknown message type {kind!r}")
    for field, expected in _REQUIRED[kind].items():
        value = message.get(field)
        if value is None:
            raise ProtocolError(f"{kind}: missing field {field!r}")
        if isinstance(value, bool) or not isinstance(value, expected):
            raise ProtocolError(f"{kind}: field {field!r} has the wrong type")
    for field, expected in _OPTIONAL.get(kind, {}).items():
        value = message.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, expected)):
            raise ProtocolError(f"{kind}: field {field!r} has the wrong type")
    if kind == HELLO:
        for i, iphy in enumerate(message["iphys"]):
            if not isinstance(iphy, dict) or not isinstance(iphy.get("name"), str):
                raise ProtocolError(f"HELLO: iphys[{i}] needs a name")
    for field in ("peers", "full"):
        if kind in (STEP, FULL) and not all(isinstance(p, str) for p in message.get(field, [])):
            raise ProtocolError(f"{kind}: {field} must be node names")
    if kind in (ID, STEP):
        for i, link in enumerate(message["links"]):
            if not isinstance(link, dict) or not all(
                    isinstance(link.get(k), str) for k in ("peer", "local_iphy", "peer_iphy")):
                raise ProtocolError(f"{kind}: links[{i}] needs peer, local_iphy and peer_iphy")


class LineReader:
    """Splits a byte stream into lines, refusing any line longer than MAX_LINE."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > MAX_LINE:
            self._buffer = b""
            raise ProtocolError(f"message longer than {MAX_LINE} bytes")
        return [line for line in lines if line.strip()]
