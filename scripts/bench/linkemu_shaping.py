#!/usr/bin/env python3
"""Benchmark linkemu's shaping: configured vs observed goodput and RTT, change latency.

Like the thesis's Tables 4.1/4.2, on the software testbed (`leb*` names, its own
state dir and router ports, torn down at the end): iperf3 TCP goodput C1 -> server
for configured rates 1-100 Mbit/s, ping RTT for configured one-way delays 0-15 ms
(each the median of --repeats runs), the time one in-place `set` takes, and the
head-of-line measurement for both shapers (link A 1 ms and link B 200 ms on one
port; B saturated by TCP or by UDP at twice its rate; A's RTT idle vs loaded), with
a control run where B also has 1 ms. Needs root and sch_netem, so on our machines
it runs in the full-kernel VM:

    scripts/kernel-vm .venv/bin/python scripts/bench/linkemu_shaping.py

Prints one JSON document; writes a PNG (goodput, RTT, head-of-line).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from linkemu import linksfile, measure, shaping, testbed  # noqa: E402
from nestednet.capabilities.shaping import available_qdiscs  # noqa: E402

LAYOUT = testbed.Layout(clients=2, prefix="leb")
PAYLOAD_SHARE = 1448 / 1514
"""TCP payload per full Ethernet frame (MTU 1500, timestamps on): the most goodput a
shaper that counts whole frames can give."""
SERVER = str(LAYOUT.SERVER.ip)
C1, C2 = LAYOUT.client_ns(1), LAYOUT.client_ns(2)


def links(base: dict, c1: dict, c2: dict | None = None) -> dict:
    doc = json.loads(json.dumps(base))
    for link, forward in zip(doc["links"], (c1, c2 or {}), strict=True):
        link["forward"] = {"rate": "1Gbit", **forward}
        link["backward"] = {"rate": "1Gbit"}
    return doc


def apply(doc: dict, shaper: str, qdiscs: dict[str, bool]) -> None:
    shaping.execute(shaping.plan_apply(linksfile.parse(doc), shaper, qdiscs))


def log(row: dict) -> None:
    print(json.dumps(row), file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1,2,5,10,20,50,100", help="Mbit/s, comma separated")
    parser.add_argument("--delays", default="0,1,2,5,10,15", help="ms added one way (forward)")
    parser.add_argument("--seconds", type=int, default=5, help="iperf3 duration per rate")
    parser.add_argument("--pings", type=int, default=50, help="pings per delay and run")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per rate and per delay (the median is reported)")
    parser.add_argument("--sets", type=int, default=20, help="timed `set` changes")
    parser.add_argument("--shaper", default=shaping.DEFAULT_SHAPER)
    parser.add_argument("--hol-repeats", type=int, default=3,
                        help="head-of-line runs per shaper and load (0: skip)")
    parser.add_argument("--png", default=str(ROOT / "results" / "linkemu-bench.png"))
    args = parser.parse_args()

    state = tempfile.mkdtemp(prefix="leb-bench-")
    os.environ[shaping.STATE_DIR_ENV] = state
    qdiscs = available_qdiscs()
    out: dict = {"shaper": args.shaper, "in_vm": bool(os.environ.get("NESTEDNET_IN_VM")),
                 "kernel": os.uname().release, "load_average": os.getloadavg(),
                 "parameters": vars(args), "goodput": [], "rtt": []}
    began = time.monotonic()
    built = testbed.up(LAYOUT, directory=state)
    out["testbed_up_s"] = built.timings
    base = json.loads(built.links_file.read_text())
    try:
        measure.warm_up([C1, C2], SERVER)
        for mbit in [float(x) for x in args.rates.split(",")]:
            apply(links(base, {"rate": f"{int(mbit * 1000)}kbit", "delay": "1ms"}),
                  args.shaper, qdiscs)
            runs = [measure.goodput(C1, LAYOUT.server_ns, SERVER, seconds=args.seconds) / 1e6
                    for _ in range(args.repeats)]
            got = statistics.median(runs)
            out["goodput"].append({"configured_mbit": mbit, "observed_mbit": round(got, 3),
                                   "ratio": round(got / mbit, 3),
                                   "runs_mbit": [round(r, 3) for r in runs]})
            log(out["goodput"][-1])
        apply(links(base, {"rate": "100Mbit"}), args.shaper, qdiscs)
        idle = None
        for ms in [float(x) for x in args.delays.split(",")]:
            shaping.set_link("R1-C1", "forward", {"delay_us": int(ms * 1000)})
            runs = [measure.ping(C1, SERVER, count=args.pings, interval=0.02)
                    for _ in range(args.repeats)]
            median = statistics.median(r.median_ms for r in runs)
            if idle is None:
                idle = median
            out["rtt"].append({"configured_ms": ms, "median_ms": round(median, 3),
                               "added_ms": round(median - idle, 3),
                               "min_ms": min(r.min_ms for r in runs),
                               "runs_median_ms": [round(r.median_ms, 3) for r in runs]})
            log(out["rtt"][-1])
        timings = []
        for i in range(args.sets):
            start = time.perf_counter()
            shaping.set_link("R1-C2", "forward", {"rate_bps": (10 + i % 2) * 1_000_000,
                                                  "delay_us": 1000 * (1 + i % 2)})
            timings.append(time.perf_counter() - start)
        out["set_seconds"] = {"median": round(statistics.median(timings), 4),
                              "min": round(min(timings), 4), "max": round(max(timings), 4),
                              "repeats": len(timings)}
        log({"set_seconds": out["set_seconds"]})
        out["head_of_line"] = head_of_line(base, qdiscs, args.hol_repeats)
    finally:
        shaping.clear()
        testbed.down(state)
    out["seconds"] = round(time.monotonic() - began, 1)
    plot(out, Path(args.png))
    out["png"] = args.png
    print(json.dumps(out, indent=2))
    return 0


def head_of_line(base: dict, qdiscs: dict[str, bool], repeats: int) -> list[dict]:
    """A = C1 (1 ms), B = C2 (200 ms; 1 ms in the control), 10 Mbit/s each, one port.

    The control shows what A's RTT does when B is saturated but has no long delay:
    whatever A still loses then is the (emulated) CPU and the shared wire, not
    head-of-line blocking behind B's delay.
    """
    rows = []
    cases = [(shaper, load, "200ms") for shaper in ("htb", "hfsc") for load in ("tcp", "udp")]
    cases += [(shaping.DEFAULT_SHAPER, load, "1ms") for load in ("tcp", "udp")]
    for shaper, load, b_delay in cases:
        for _ in range(repeats):
            apply(links(base, {"rate": "10Mbit", "delay": "1ms"},
                        {"rate": "10Mbit", "delay": b_delay}), shaper, qdiscs)
            hol = measure.head_of_line(C1, C2, LAYOUT.server_ns, SERVER, load=load)
            row = {"shaper": shaper, "load": load, "b_delay": b_delay, **hol.summary()}
            row["passes"] = hol.rise_ms is not None and hol.rise_ms <= 2.0
            rows.append(row)
            log(row)
    return rows


def plot(out: dict, path: Path) -> None:
    os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="leb-mpl-"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    conf = [g["configured_mbit"] for g in out["goodput"]]
    left.plot(conf, conf, "--", color="grey", label="configured")
    left.plot(conf, [c * PAYLOAD_SHARE for c in conf], ":", color="black",
              label="configured x 1448/1514 (headers)")
    left.plot(conf, [g["observed_mbit"] for g in out["goodput"]], "o-",
              label="iperf3 TCP goodput (median)")
    left.set(xscale="log", yscale="log", xlabel="configured rate (Mbit/s)",
             ylabel="goodput (Mbit/s)", title=f"Rate ({out['shaper']})")
    left.legend()
    conf = [r["configured_ms"] for r in out["rtt"]]
    middle.plot(conf, conf, "--", color="grey",
                label="configured (forward only: the RTT rises by it once)")
    middle.plot(conf, [r["added_ms"] for r in out["rtt"]], "o-", label="ping RTT rise (median)")
    middle.set(xlabel="configured one-way delay (ms)", ylabel="RTT added (ms)", title="Delay")
    middle.legend(fontsize="small")
    hol = out.get("head_of_line", [])
    labels, values = [], []
    for row in hol:
        key = f"{row['shaper']} {row['load']}\nB {row['b_delay']}"
        if key not in labels:
            labels.append(key)
            values.append([])
        values[labels.index(key)].append(row["median_rise_ms"]
                                         if row["median_rise_ms"] is not None else float("nan"))
    for i, vals in enumerate(values):
        right.plot([i] * len(vals), vals, "o", color="C3" if max(vals) > 2 else "C2")
    right.axhline(2.0, color="grey", linestyle="--", label="2 ms criterion")
    right.set_xticks(range(len(labels)), labels, fontsize="small")
    worst = max((v for vals in values for v in vals if v == v), default=0.0)
    if worst > 10:
        right.set_yscale("symlog", linthresh=2.0)
    else:
        right.set_ylim(-1.0, max(3.0, worst + 0.5))
    right.set(ylabel="rise of A's median RTT (ms)", title="Head-of-line (A 1 ms, B saturated)")
    right.legend(fontsize="small")
    note = f"set: median {out['set_seconds']['median'] * 1000:.0f} ms" if "set_seconds" in out \
        else ""
    fig.suptitle(f"linkemu on the testbed, kernel {out['kernel']}"
                 f"{' (full-kernel VM, software emulation)' if out['in_vm'] else ''}  {note}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
