"""Quantities as people write them in link files: "46Mbps", "11ms", "1.5Mbit", "10%".

Parsing is strict on purpose: a unit we do not know is an error, never a guess,
because a silently misread "10MBps" (bytes) as bits is a factor-8 wrong link.
Functions raise ValueError with a short reason; callers add the path in the file.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_NUMBER = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z%/]*)\s*$")

_RATE_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
_TIME_UNITS = {
    "us": Decimal(1), "usec": Decimal(1), "µs": Decimal(1),
    "ms": Decimal(1000), "msec": Decimal(1000),
    "s": Decimal(1_000_000), "sec": Decimal(1_000_000),
}

HFSC_MAX_BYTES_PER_S = 2**32 - 1
"""HFSC service curves are 32-bit bytes per second in the kernel ABI."""
MAX_RATE_BPS = HFSC_MAX_BYTES_PER_S * 8
"""About 34.36 Gbit/s: the largest rate both shapers can express."""
MAX_DELAY_US = 3_600_000_000
"""One hour: netem takes more, but a larger delay is a typo, not an experiment."""


MAX_MAGNITUDE = Decimal(10) ** 15
"""Beyond every limit below in any unit; larger numbers are refused before scaling."""


def _split(text: str) -> tuple[Decimal, str]:
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"expected a string such as '10Mbit', got {type(text).__name__}")
    if isinstance(text, int | float):
        return _bounded(Decimal(str(text)), text), ""
    match = _NUMBER.match(text)
    if not match:
        raise ValueError(f"not a number with a unit: {text!r}")
    try:
        value = Decimal(match.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise ValueError(f"not a number: {text!r}") from exc
    return _bounded(value, text), match.group(2)


def _bounded(value: Decimal, text: object) -> Decimal:
    """Refuse nan, infinities and magnitudes no unit makes sensible (1e999999 would be
    turned into an integer of a million digits)."""
    if not value.is_finite() or abs(value) > MAX_MAGNITUDE:
        raise ValueError(f"not a usable number: {text!r}")
    return value


def parse_rate(text: str | int) -> int:
    """Bits per second from "46Mbps", "1.5Mbit", "500kbit", "10MBps" (bytes), "1Gbit".

    ``bit``/``bps`` (lower-case b) are bits, ``Bps``/``B/s`` are bytes; the
    k/M/G prefix is decimal and case-insensitive. A bare number is refused: a
    rate without a unit is ambiguous (bits? bytes?) so we ask.
    """
    value, unit = _split(text)
    if unit == "":
        raise ValueError(f"rate {text!r} needs a unit (kbit, Mbit, Gbit, Mbps...)")
    if value < 0:
        raise ValueError(f"negative rate {text!r}")
    match = re.fullmatch(r"([kKmMgG]?)(bit|bps|bit/s|Bps|B/s|byte/s)", unit)
    if not match:
        raise ValueError(f"unknown unit {unit!r} (use kbit, Mbit, Gbit, Mbps, MBps...)")
    factor = _RATE_PREFIX[match.group(1).lower()]
    if match.group(2) in ("Bps", "B/s", "byte/s"):
        factor *= 8
    bps = int(value * factor)
    if bps == 0:
        raise ValueError(f"rate {text!r} is zero: a link needs a positive rate")
    if bps > MAX_RATE_BPS:
        raise ValueError(f"rate {text!r} exceeds {MAX_RATE_BPS} bit/s, the largest HFSC "
                         "curve (32-bit bytes/s)")
    return bps


def parse_time(text: str | int) -> int:
    """Microseconds from "11ms", "500us", "0.2s", or "0" (zero needs no unit)."""
    value, unit = _split(text)
    if value < 0:
        raise ValueError(f"negative time {text!r}")
    if unit == "":
        if value == 0:
            return 0
        raise ValueError(f"time {text!r} needs a unit (us, ms, s)")
    if unit not in _TIME_UNITS:
        raise ValueError(f"unknown unit {unit!r} (use us, ms, s)")
    us = value * _TIME_UNITS[unit]
    if us != int(us):
        raise ValueError(f"time {text!r} is finer than a microsecond")
    if us > MAX_DELAY_US:
        raise ValueError(f"time {text!r} is longer than an hour")
    return int(us)


def parse_loss(text: str | int | float) -> float:
    """Percent from "10%", "0.5%", "10" or "0" (a bare number is a percentage)."""
    value, unit = _split(text)
    if unit not in ("", "%"):
        raise ValueError(f"unknown unit {unit!r} for a loss (use %)")
    if value < 0:
        raise ValueError(f"negative loss {text!r}")
    if value > 100:
        raise ValueError(f"loss {text!r} is above 100 %")
    return float(value)


def format_rate(bps: int) -> str:
    """The shortest exact unit form, so files we write read back to the same value."""
    for unit, factor in (("Gbit", 10**9), ("Mbit", 10**6), ("kbit", 10**3)):
        if bps % factor == 0:
            return f"{bps // factor}{unit}"
    return f"{bps}bit"


def format_time(us: int) -> str:
    if us == 0:
        return "0"
    if us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


def format_loss(pct: float) -> str:
    text = repr(float(pct))
    return (text[:-2] if text.endswith(".0") else text) + "%"
