"""The tc plan: which qdiscs, classes and filters shape a set of ports, as plain data.

Pure: no netlink here. The shaping library of NestedNet: a caller describes, per
port, the directed flows to shape (`Leaf`: source and destination IPv4 address and a
`LinkShape`), this module turns them into tc requests (`TcPlan`), and the executor
(nestednet.adapters.tc) performs them over netlink. `linkemu apply --dry-run` prints
a plan and `linkemu set` builds single-class changes from the same functions, so what
is printed is exactly what is done.

Tree per port::

    root qdisc 1:  (hfsc|htb, default class 1:ffff)
      class 1:1     ceiling, line rate
        class 1:ffff  default, line rate: unclassified traffic (ARP, other hosts) passes
        class 1:<10+i> one leaf per flow i, at the flow's rate
          qdisc <10+i>:  netem: delay, jitter, loss, limit from the bandwidth-delay product
    filter u32 on 1:, prio 1: IPv4 source + destination of flow i -> 1:<10+i>

Handles depend only on the flow's position on its port, so a change finds a flow's
class and netem again without reading the kernel.

A port that carries exactly one flow (an iPHY's port on a lab's main bridge: every
iPHY is in at most one link) needs no filters: `port_tree_ops` makes the flow's
class the root's default, so everything leaving the port is shaped::

    root qdisc 1:  (htb, default class 1:10)
      class 1:1     ceiling, line rate
        class 1:10  the link's rate
          qdisc 10:  netem (left out in rate-only mode) Rates are bytes per second
(pyroute2's integer form; HFSC curves are 32-bit bytes/s), times integer
microseconds, loss a percentage.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from ipaddress import IPv4Address
from typing import Any

from nestednet.model.units import HFSC_MAX_BYTES_PER_S

SHAPERS = ("hfsc", "htb")
ROOT_HANDLE = "1:0"
CEILING_CLASS = "1:1"
DEFAULT_MINOR = 0xFFFF
DEFAULT_CLASS = "1:ffff"
FIRST_LEAF = 0x10
FILTER_PRIO = 1
ETH_P_IP = 0x0800

LINE_RATE_BPS = 10_000_000_000
"""Ceiling and default-class rate when links add up to less: a 10 Gbit/s "wire"."""
MTU_BYTES = 1514
NETEM_MIN_LIMIT = 1000
"""netem's own default; below a BDP that needs more we keep it."""
BDP_HEADROOM = 2.0
"""The queue also holds the standing backlog TCP builds while the rate is the bottleneck."""


@dataclass(frozen=True)
class LinkShape:
    """The properties of one direction of one link: rate, delay, jitter, loss."""

    rate_bps: int
    delay_us: int = 0
    jitter_us: int = 0
    loss_pct: float = 0.0
    keep_order: bool = False
    """netem keeps packets in order despite jitter (see `netem_params`)."""

    def with_changes(self, **changes: int | float) -> LinkShape:
        return replace(self, **changes)


@dataclass(frozen=True)
class Leaf:
    """One shaped flow on a port: IPv4 packets from ``src`` to ``dst``, shaped by ``shape``.

    ``name`` says which link and direction it is, in the plan's descriptions.
    """

    name: str
    src: IPv4Address
    dst: IPv4Address
    shape: LinkShape


@dataclass(frozen=True)
class TcOp:
    """One netlink tc request, ready for pyroute2's ``tc(command, kind, index, handle, ...)``."""

    port: str
    command: str
    kind: str
    handle: str
    params: dict[str, Any] = field(default_factory=dict)
    what: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TcPlan:
    """Everything the tc part of `apply` does, in order, and which qdisc kinds it needs."""

    shaper: str
    netns: str | None
    ports: tuple[str, ...]
    ops: tuple[TcOp, ...]
    requires: tuple[str, ...]

    def for_port(self, port: str) -> list[TcOp]:
        return [op for op in self.ops if op.port == port]

    def as_dict(self) -> dict[str, Any]:
        return {"shaper": self.shaper, "netns": self.netns, "ports": list(self.ports),
                "requires": list(self.requires), "ops": [op.as_dict() for op in self.ops]}


def leaf_class(index: int) -> str:
    return f"1:{FIRST_LEAF + index:x}"


def leaf_qdisc(index: int) -> str:
    return f"{FIRST_LEAF + index:x}:0"


def u32_key(ip: IPv4Address, offset: int) -> str:
    """A u32 key matching one IPv4 address at ``offset`` (12 source, 16 destination)."""
    return f"0x{int(ip):08X}/0xffffffff+{offset}"


U32_FIELDS = {12: "src", 16: "dst"}
"""What an IPv4 u32 key at each offset matches."""


def describe_u32_key(key: str) -> str:
    """A u32 key as a person reads it: ``0xC612000D/0xffffffff+12`` -> ``src 198.18.0.13``
    (keys that are not one whole IPv4 address at a known offset come back as they are)."""
    value, _, rest = key.partition("/")
    mask, _, offset = rest.partition("+")
    try:
        field = U32_FIELDS[int(offset)]
        if int(mask, 16) != 0xFFFFFFFF:
            return key
        return f"{field} {IPv4Address(int(value, 16))}"
    except (KeyError, ValueError):
        return key


def bytes_per_s(rate_bps: int) -> int:
    return max(1, rate_bps // 8)


def netem_limit(shape: LinkShape) -> int:
    """Packets netem may hold: twice the bandwidth-delay product, never below netem's 1000.

    The default 1000 drops at high BDP (1 Gbit/s x 50 ms is ~4100 full frames in
    flight), which would show up as loss nobody configured.
    """
    bdp_bytes = shape.rate_bps / 8 * (shape.delay_us + shape.jitter_us) / 1e6
    return max(NETEM_MIN_LIMIT, math.ceil(BDP_HEADROOM * bdp_bytes / MTU_BYTES))


def netem_params(shape: LinkShape) -> dict[str, Any]:
    """The full netem parameter set: pyroute2's change resets whatever is left out.

    ``keep_order`` also gives netem the link's rate: with a rate set, netem schedules
    each packet no earlier than the one before it (the queue's last send time is its
    reference point), so jitter delays packets but never reorders them. The cost is
    one packet's serialisation time at that rate, spent again in netem (HTB already
    paces at the same rate, so netem never becomes the bottleneck).
    """
    params: dict[str, Any] = {"delay": shape.delay_us, "jitter": shape.jitter_us,
                              "loss": shape.loss_pct, "limit": netem_limit(shape)}
    if shape.keep_order:
        params["rate"] = min(bytes_per_s(shape.rate_bps), HFSC_MAX_BYTES_PER_S)
    return params


def htb_burst(rate_bps: int) -> int:
    """About 10 ms of traffic, at least two frames: keeps the rate exact with coarse timers."""
    return max(2 * MTU_BYTES, bytes_per_s(rate_bps) // 100)


def class_params(shaper: str, rate_bps: int) -> dict[str, Any]:
    """Parameters of a class capped at ``rate_bps`` (a leaf, the ceiling or the default)."""
    rate = bytes_per_s(rate_bps)
    if shaper == "hfsc":
        curve = {"m2": min(rate, HFSC_MAX_BYTES_PER_S)}
        return {"rsc": curve, "fsc": curve, "usc": curve}
    burst = htb_burst(rate_bps)
    quantum = min(max(rate // 10, MTU_BYTES), 200_000)
    return {"rate": rate, "ceil": rate, "burst": burst, "cburst": burst, "quantum": quantum}


def _share_params(shaper: str, rate_bps: int) -> dict[str, Any]:
    """Ceiling/default classes: link-share + upper limit only (no real-time guarantee)."""
    if shaper == "htb":
        return class_params(shaper, rate_bps)
    curve = {"m2": min(bytes_per_s(rate_bps), HFSC_MAX_BYTES_PER_S)}
    return {"fsc": curve, "usc": curve}


def needs_netem(shape: LinkShape) -> bool:
    return bool(shape.delay_us or shape.jitter_us or shape.loss_pct)


def line_rate(leaves: Sequence[Leaf]) -> int:
    total = sum(leaf.shape.rate_bps for leaf in leaves)
    return min(max(LINE_RATE_BPS, total), HFSC_MAX_BYTES_PER_S * 8)


def filter_keys(leaf: Leaf) -> list[str]:
    return [u32_key(leaf.src, 12), u32_key(leaf.dst, 16)]


def tc_plan(ports: Mapping[str, Sequence[Leaf]], shaper: str = "hfsc", *,
            netem: bool = True, netns: str | None = None) -> TcPlan:
    """One shaping tree per port of ``ports`` (in its order), in namespace ``netns``.

    ``netem=False`` builds rate-only leaves (the kernel's default pfifo under each
    class) for a kernel without sch_netem; it is refused when a flow needs delay,
    jitter or loss, because that flow would silently lose its properties.
    """
    if shaper not in SHAPERS:
        raise ValueError(f"unknown shaper {shaper!r}")
    if not netem and any(needs_netem(leaf.shape) for leaves in ports.values()
                         for leaf in leaves):
        raise ValueError("links with delay, jitter or loss need netem leaves")
    ops: list[TcOp] = []
    for port, leaves in ports.items():
        ops += _port_ops(port, leaves, shaper, netem)
    requires = (shaper, "u32") + (("netem",) if netem else ())
    return TcPlan(shaper=shaper, netns=netns, ports=tuple(ports), ops=tuple(ops),
                  requires=requires)


def _port_ops(port: str, leaves: Sequence[Leaf], shaper: str, netem: bool) -> list[TcOp]:
    line = line_rate(leaves)
    ops = [TcOp(port, "add", shaper, ROOT_HANDLE, {"default": DEFAULT_MINOR},
                f"{shaper} root, unclassified traffic to {DEFAULT_CLASS}"),
           TcOp(port, "add-class", shaper, CEILING_CLASS,
                {"parent": ROOT_HANDLE, **_share_params(shaper, line)},
                f"ceiling at line rate {line} bit/s"),
           TcOp(port, "add-class", shaper, DEFAULT_CLASS,
                {"parent": CEILING_CLASS, **_share_params(shaper, line)},
                "default class at line rate (ARP and unmatched traffic)")]
    for i, leaf in enumerate(leaves):
        ops.append(TcOp(port, "add-class", shaper, leaf_class(i),
                        {"parent": CEILING_CLASS, **class_params(shaper, leaf.shape.rate_bps)},
                        f"{leaf.name} rate {leaf.shape.rate_bps} bit/s"))
        if netem:
            ops.append(TcOp(port, "add", "netem", leaf_qdisc(i),
                            {"parent": leaf_class(i), **netem_params(leaf.shape)},
                            f"{leaf.name} delay/jitter/loss"))
        ops.append(TcOp(port, "add-filter", "u32", "0:0",
                        {"parent": ROOT_HANDLE, "prio": FILTER_PRIO, "protocol": ETH_P_IP,
                         "target": leaf_class(i), "keys": filter_keys(leaf)},
                        f"{leaf.name}: src+dst IPv4 -> {leaf_class(i)}"))
    return ops


def change_ops(port: str, shaper: str, index: int, old: Leaf, new: LinkShape, *,
               netem: bool = True) -> list[TcOp]:
    """In-place changes for flow ``index`` (``old``) on ``port``: class rate and full netem
    set, only what differs."""
    return leaf_change_ops(port, shaper, index, old.name, old.shape, new, netem=netem)


def leaf_change_ops(port: str, shaper: str, index: int, name: str, old: LinkShape,
                    new: LinkShape, *, netem: bool = True) -> list[TcOp]:
    """`change_ops` for a flow known by its name and shape only (no addresses needed)."""
    ops = []
    if new.rate_bps != old.rate_bps:
        ops.append(TcOp(port, "change-class", shaper, leaf_class(index),
                        {"parent": CEILING_CLASS, **class_params(shaper, new.rate_bps)},
                        f"{name} rate {new.rate_bps} bit/s"))
    if netem and netem_params(new) != netem_params(old):
        ops.append(TcOp(port, "change", "netem", leaf_qdisc(index),
                        {"parent": leaf_class(index), **netem_params(new)},
                        f"{name} delay/jitter/loss"))
    return ops


def port_tree_ops(port: str, name: str, shape: LinkShape, shaper: str = "htb", *,
                  netem: bool = True) -> list[TcOp]:
    """The filterless tree of a port that carries one flow (see the module docstring).

    With ``netem`` the netem leaf is always there, even at zero delay, so a later
    step that adds delay is a `change`, never a new object.
    """
    if shaper not in SHAPERS:
        raise ValueError(f"unknown shaper {shaper!r}")
    if not netem and needs_netem(shape):
        raise ValueError(f"{name}: delay, jitter or loss need a netem leaf")
    line = min(max(LINE_RATE_BPS, shape.rate_bps), HFSC_MAX_BYTES_PER_S * 8)
    ops = [TcOp(port, "add", shaper, ROOT_HANDLE, {"default": FIRST_LEAF},
                f"{shaper} root, everything to {leaf_class(0)}"),
           TcOp(port, "add-class", shaper, CEILING_CLASS,
                {"parent": ROOT_HANDLE, **_share_params(shaper, line)},
                f"ceiling at line rate {line} bit/s"),
           TcOp(port, "add-class", shaper, leaf_class(0),
                {"parent": CEILING_CLASS, **class_params(shaper, shape.rate_bps)},
                f"{name} rate {shape.rate_bps} bit/s")]
    if netem:
        ops.append(TcOp(port, "add", "netem", leaf_qdisc(0),
                        {"parent": leaf_class(0), **netem_params(shape)},
                        f"{name} delay/jitter/loss"))
    return ops
