"""The properties of one direction of one link: rate, delay, jitter and loss.

Units are linkemu's (model/units.py): rate in bit/s (None: not limited), delay
and jitter in integer microseconds (netem's unit), loss in percent. Explicit
values in a scenario and the link models' outputs both end up here, so the
shaping layer reads one type whatever the source.

Why the checks: a jitter above the delay makes netem clip negative delays to
zero (a skewed distribution nobody configured), and a rate above what the
shapers can express would be silently truncated.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nestednet.model.units import (
    MAX_DELAY_US,
    MAX_RATE_BPS,
    format_loss,
    format_rate,
    format_time,
    parse_loss,
    parse_rate,
    parse_time,
)

FIELDS = ("rate", "delay", "jitter", "loss")
NETEM_FIELDS = ("delay", "jitter", "loss")
"""What HTB alone cannot emulate: these need sch_netem."""


class PropertyError(ValueError):
    """A bad value; ``field`` names it so the caller can say where it sits in the file."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class LinkProperties:
    """One direction of one link, ready for tc: validated on construction."""

    rate_bps: int | None = None
    delay_us: int = 0
    jitter_us: int = 0
    loss_pct: float = 0.0

    def __post_init__(self) -> None:
        if self.rate_bps is not None and not 0 < self.rate_bps <= MAX_RATE_BPS:
            raise PropertyError("rate", f"rate {self.rate_bps} bit/s is outside "
                                        f"1..{MAX_RATE_BPS} bit/s")
        for name, value in (("delay", self.delay_us), ("jitter", self.jitter_us)):
            if not 0 <= value <= MAX_DELAY_US:
                raise PropertyError(name, f"{name} {value} us is outside 0..{MAX_DELAY_US} us")
        if self.jitter_us > self.delay_us:
            raise PropertyError("jitter", f"jitter {format_time(self.jitter_us)} exceeds the "
                                          f"delay {format_time(self.delay_us)}: netem would "
                                          "clip negative delays to zero")
        if not 0.0 <= self.loss_pct <= 100.0:
            raise PropertyError("loss", f"loss {self.loss_pct} % is outside 0..100 %")

    @property
    def netem_properties(self) -> tuple[str, ...]:
        """The properties set here that need sch_netem (empty: HTB alone can do it)."""
        values = {"delay": self.delay_us, "jitter": self.jitter_us, "loss": self.loss_pct}
        return tuple(name for name in NETEM_FIELDS if values[name])

    @property
    def tc_rate(self) -> str | None:
        """The rate as pyroute2 wants it: an integer with a lower-case suffix ("20mbit").

        pyroute2 refuses "1.5mbit" and "20Mbit" and reads a bare int as bytes/s, so
        the shortest exact integer form is chosen (1.5 Mbit/s -> "1500kbit").
        """
        if self.rate_bps is None:
            return None
        return format_rate(self.rate_bps).lower()

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers for events and --json output."""
        return {"rate_bps": self.rate_bps, "delay_us": self.delay_us,
                "jitter_us": self.jitter_us, "loss_pct": self.loss_pct}

    def as_document(self) -> dict[str, str]:
        """The scenario-file form (unit strings); parse_properties reads it back exactly."""
        doc = {} if self.rate_bps is None else {"rate": format_rate(self.rate_bps)}
        for name, value in (("delay", self.delay_us), ("jitter", self.jitter_us)):
            if value:
                doc[name] = format_time(value)
        if self.loss_pct:
            doc["loss"] = format_loss(self.loss_pct)
        return doc

    def describe(self) -> str:
        """Short human form: "20Mbit 5ms±1ms 0.5%"; "ideal" when nothing is set."""
        parts = [] if self.rate_bps is None else [format_rate(self.rate_bps)]
        if self.delay_us or self.jitter_us:
            jitter = f"±{format_time(self.jitter_us)}" if self.jitter_us else ""
            parts.append(format_time(self.delay_us) + jitter)
        if self.loss_pct:
            parts.append(format_loss(self.loss_pct))
        return " ".join(parts) or "ideal"


IDEAL = LinkProperties()
"""No shaping at all: what a link gets when neither the file nor a model says more."""


def parse_properties(doc: Mapping[str, Any]) -> LinkProperties:
    """Properties from unit strings {"rate": "20Mbit", "delay": "5ms", ...}.

    Omitted fields mean "not limited" (rate) or zero. Raises PropertyError naming
    the field, so the caller can locate it in the file.
    """
    values: dict[str, Any] = {}
    for name, parse, key in (("rate", parse_rate, "rate_bps"), ("delay", parse_time, "delay_us"),
                             ("jitter", parse_time, "jitter_us"),
                             ("loss", parse_loss, "loss_pct")):
        if name in doc:
            try:
                values[key] = parse(doc[name])
            except ValueError as exc:
                raise PropertyError(name, str(exc)) from None
    return LinkProperties(**values)


def seconds_to_us(seconds: float) -> int:
    """A model's delay in seconds as netem's integer microseconds (nearest)."""
    return round(seconds * 1e6)


def summarise(properties: Iterable[LinkProperties | None]) -> dict[str, Any]:
    """Min/median/max delay (us) and rate (bit/s) over one step's link directions.

    ``None`` entries (pairs a model says cannot link) are counted, not measured;
    unlimited rates are counted as ``unshaped`` and left out of the rate figures.
    """
    items = list(properties)
    present = [p for p in items if p is not None]
    rates = [p.rate_bps for p in present if p.rate_bps is not None]
    return {
        "directions": len(items),
        "no_link": len(items) - len(present),
        "unshaped": len(present) - len(rates),
        "delay_us": _spread([p.delay_us for p in present]),
        "rate_bps": _spread(rates),
        "max_loss_pct": max((p.loss_pct for p in present), default=None),
        "needs_netem": sorted({f for p in present for f in p.netem_properties}),
    }


def _spread(values: list[int]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def describe_link_steps(steps: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per step of LinkResolver.summary(): delay and rate min/median/max."""
    lines = []
    for step in steps:
        delay, rate = step["delay_us"], step["rate_bps"]
        parts = [f"step {step['index'] + 1} (t={step['time']:g} s): {step['directions']} "
                 "directions"]
        if delay is not None:
            parts.append("delay " + "/".join(format_time(round(delay[k]))
                                             for k in ("min", "median", "max")))
        if rate is not None:
            parts.append("rate " + "/".join(format_rate(round(rate[k]))
                                            for k in ("min", "median", "max")))
        if step["no_link"]:
            parts.append(f"{step['no_link']} cannot link")
        lines.append(", ".join(parts) + (" (min/median/max)" if len(parts) > 1 else ""))
    return lines
