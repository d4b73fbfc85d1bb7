"""Statistics and parsers of tool output used by every experiment (pure).

Parsers take the text iperf3 and ping print, so they can be tested on recorded
output without a lab.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Sequence

from nestednet.errors import EnvironmentProblem


def summary(values: Sequence[float]) -> dict:
    """Median first (the machine is shared and noisy), then spread."""
    vals = sorted(float(v) for v in values)
    if not vals:
        return {"n": 0, "median": None, "mean": None, "min": None, "max": None,
                "stdev": None, "p25": None, "p75": None}
    return {"n": len(vals), "median": statistics.median(vals), "mean": statistics.fmean(vals),
            "min": vals[0], "max": vals[-1],
            "stdev": statistics.stdev(vals) if len(vals) > 1 else 0.0,
            "p25": _quantile(vals, 0.25), "p75": _quantile(vals, 0.75)}


def _quantile(sorted_vals: list[float], q: float) -> float:
    pos = (len(sorted_vals) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def degradation(t1: float, t2: float) -> float:
    """The paper's isolation metric D = (T1 - T2) / T1: 0 = untouched, 1 = starved.

    Not clamped: a negative D (faster under stress) is noise and is reported as such.
    """
    if t1 <= 0:
        raise ValueError("baseline throughput T1 must be positive")
    return (t1 - t2) / t1


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> dict:
    """Least-squares line y = slope * x + intercept (growth per node for startup)."""
    if len(xs) != len(ys) or len(xs) < 2:
        return {"slope": None, "intercept": None}
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return {"slope": None, "intercept": None}
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return {"slope": slope, "intercept": my - slope * mx}


def parse_iperf(text: str) -> dict:
    """iperf3 -J output: received throughput and the per-interval series.

    Returns bps (receiver side, as the paper's tables), the sender's TCP retransmits
    (None where iperf3 cannot read them), start (Unix time the test started) and
    intervals [(start_s, end_s, bps), ...] relative to that start.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EnvironmentProblem(f"iperf3 printed no JSON: {text.strip()[:200]!r}") from exc
    if data.get("error"):
        raise EnvironmentProblem(f"iperf3 failed: {data['error']}")
    end = data.get("end", {})
    received = end.get("sum_received") or end.get("sum") or {}
    intervals = [(float(i["sum"]["start"]), float(i["sum"]["end"]),
                  float(i["sum"]["bits_per_second"])) for i in data.get("intervals", [])]
    sent = end.get("sum_sent") or {}
    return {"bps": float(received.get("bits_per_second", 0.0)),
            "retransmits": (int(sent["retransmits"]) if "retransmits" in sent else None),
            "start": float(data.get("start", {}).get("timestamp", {}).get("timesecs", 0)),
            "streams": int(data.get("start", {}).get("test_start", {}).get("num_streams", 1)),
            "intervals": intervals}


_RTT_RE = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
_LOSS_RE = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


def parse_ping(text: str) -> dict:
    """`ping -q` summary: rtt min/avg/max/mdev in ms and packets sent/received."""
    loss = _LOSS_RE.search(text)
    if not loss:
        raise EnvironmentProblem(f"ping printed no summary: {text.strip()[:200]!r}")
    sent, received = int(loss.group(1)), int(loss.group(2))
    rtt = _RTT_RE.search(text)
    if not rtt or received == 0:
        return {"sent": sent, "received": received, "min_ms": None, "avg_ms": None,
                "max_ms": None, "mdev_ms": None}
    low, avg, high, mdev = (float(x) for x in rtt.groups())
    return {"sent": sent, "received": received, "min_ms": low, "avg_ms": avg, "max_ms": high,
            "mdev_ms": mdev}


def window(intervals: Sequence[tuple[float, float, float]], start: float,
           end: float) -> list[float]:
    """Throughputs of the intervals lying wholly inside [start, end] (seconds)."""
    return [bps for s, e, bps in intervals if s >= start - 1e-6 and e <= end + 1e-6]


def window_mean(intervals: Sequence[tuple[float, float, float]], start: float,
                end: float) -> float | None:
    inside = window(intervals, start, end)
    return statistics.fmean(inside) if inside else None

