"""Whether what the kernel holds on a shaped port is what was configured (pure).

The run's fidelity self-check (nestednet.ca.fidelity) reads each shaped port's tc
objects over netlink at the end of every step and compares them here with the tc shape
the shaping policy made from the link's properties (an unlimited rate is the line
rate; a rate-only run holds no delay, jitter or loss). Tolerances are the kernel's own
rounding: HTB keeps rates in whole bytes per second, netem delays in ticks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nestednet.model.tcplan import LinkShape

RATE_TOLERANCE = 0.005
"""Relative: whole bytes per second, and rate tables, stay far within it."""
DELAY_TOLERANCE_US = 2
LOSS_TOLERANCE_PCT = 0.001


def differences(shape: LinkShape, kernel: Mapping[str, Any] | None,
                netem: bool) -> list[str]:
    """What differs between the configured ``shape`` and the ``kernel``'s properties
    (nestednet.lab.shaping.kernel_properties); empty: they match."""
    if kernel is None:
        return ["no tree of ours on the port"]
    out = []
    rate = kernel.get("rate_bps")
    if rate is None or abs(rate - shape.rate_bps) > RATE_TOLERANCE * shape.rate_bps:
        out.append(f"rate {rate} bit/s, configured {shape.rate_bps}")
    if netem:
        for name, tolerance in (("delay_us", DELAY_TOLERANCE_US),
                                ("jitter_us", DELAY_TOLERANCE_US),
                                ("loss_pct", LOSS_TOLERANCE_PCT)):
            held, wanted = kernel.get(name), getattr(shape, name)
            if held is None or abs(held - wanted) > tolerance:
                out.append(f"{name.rsplit('_', 1)[0]} {held}, configured {wanted}")
    return out


class Tally:
    """A run's fidelity checks counted as they come: a long run makes one per shaped
    direction per step (a 2-hour 48-node soak: about 700,000), too many to keep."""

    KEPT = 20
    """Mismatches kept in full; the rest are counted."""

    def __init__(self) -> None:
        self.checks = 0
        self.matched = 0
        self.mismatched: list[dict[str, Any]] = []

    def add(self, record: Mapping[str, Any]) -> None:
        self.checks += 1
        if record.get("matched"):
            self.matched += 1
        elif len(self.mismatched) < self.KEPT:
            self.mismatched.append({k: record.get(k) for k in ("checked_step", "port",
                                                               "direction", "differences")})

    def result(self) -> dict[str, Any]:
        return {"checks": self.checks, "matched": self.matched,
                "mismatched": list(self.mismatched)}


def summary(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Fidelity events (their extra fields) -> checks, matched, the first mismatches."""
    tally = Tally()
    for r in records:
        tally.add(r)
    return tally.result()
