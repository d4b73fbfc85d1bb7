#!/usr/bin/env python3
"""An orbital scenario played nested, with ground-station-to-ground-station pings (issue #26).

Creates the lab (`nestednet create --routing babel --timings`), reads every node's
memory, plays the scenario with `nestednet run --shaping rate-only --json` and, for
the whole run, pings from one ground station's GNAB to other stations' node
addresses (10.100.0.i) every 0.2 s (`ping -D`: each answer's own timestamp). It then
reports, from the run's events (every step event has its wall time):

- create time, memory per node, the CA's link latency (visibility change -> flows in,
  and -> flows out), refusals;
- per ping target, per step: the share of pings sent in the step that were answered;
- at every handover (a step where either station's ground link changes), the longest
  gap without answers from 1 s before the step to the end of the step, and the time
  from the step to the first answer after it (however late).

Prints JSON. One run per call (repeat for medians; the machine is shared). Run it
under the system lock:

    flock /tmp/nestednet-system.lock .venv/bin/python scripts/bench/leo_run.py \\
        [--scenario scenarios/leo-walker-66-gs4.json] [--lab leo] \\
        [--src GSBerlin] [--dst GSNewYork --dst GSMadrid] [--until T]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from nestednet.adapters import ksm
from nestednet.bench.memory import whole_nodes_mb
from nestednet.lab.engine import ksm_offered
from nestednet.lab.nodes import Lab
from nestednet.model.scenario_file import load_scenario

CLI = str(Path(sys.executable).parent / "nestednet")
ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 0.2
PARK_SETTLE_S = 20
FIRST_STEP_TIMEOUT_S = 300
REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from [0-9.]+: icmp_seq=(\d+) ttl=\d+ "
                   r"time=([0-9.]+) ms", re.MULTILINE)


def nn(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, check=False,
                          timeout=timeout)


def ground_links(scenario, station: str) -> list[frozenset[str]]:
    return [frozenset(b if a == station else a for a, b in s.visible if station in (a, b))
            for s in scenario.steps]


def send_times(text: str, started: float) -> tuple[dict[int, float], int]:
    """Each answered seq's send time (reply time - RTT) and the last seq sent."""
    answered = {int(seq): float(ts) - float(rtt) / 1000 for ts, seq, rtt in REPLY.findall(text)}
    said = re.search(r"(\d+) packets transmitted", text)
    sent = int(said.group(1)) if said else max(answered, default=0)
    return answered, sent


def analyse(answered: dict[int, float], sent: int, started: float,
            walls: list[float], end_wall: float, handovers: list[int]) -> dict:
    """Per step answered share; handover gaps; seq send times inferred from answers."""
    if answered:
        offset = statistics.median(t - (seq - 1) * INTERVAL for seq, t in answered.items())
    else:
        offset = started
    send = {seq: answered.get(seq, offset + (seq - 1) * INTERVAL) for seq in range(1, sent + 1)}
    bounds = [*walls, end_wall]
    per_step = []
    for k in range(len(walls)):
        seqs = [s for s, t in send.items() if bounds[k] <= t < bounds[k + 1]]
        per_step.append(None if not seqs else round(
            sum(s in answered for s in seqs) / len(seqs), 3))
    gaps = []
    for k in handovers:
        lo, hi = bounds[k] - 1.0, bounds[k + 1]
        seqs = sorted(s for s, t in send.items() if lo <= t < hi)
        longest = run = 0
        for s in seqs:
            run = 0 if s in answered else run + 1
            longest = max(longest, run)
        first = next((answered[s] - bounds[k] for s in sorted(answered)
                      if answered[s] >= bounds[k]), None)
        gaps.append({"step": k, "longest_gap_in_step_s": round(longest * INTERVAL, 1),
                     "first_answer_after_s": None if first is None else round(first, 2)})
    return {"sent": sent, "answered": len(answered),
            "answered_share": round(len(answered) / sent, 3) if sent else None,
            "per_step_answered_share": per_step, "handovers": gaps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "leo-walker-66-gs4.json"))
    parser.add_argument("--lab", default="leo")
    parser.add_argument("--src", default="GSBerlin")
    parser.add_argument("--dst", action="append", default=None)
    parser.add_argument("--until", type=float, default=None)
    parser.add_argument("--keep", action="store_true", help="Leave the lab (default: delete).")
    args = parser.parse_args()
    dsts = args.dst or ["GSNewYork", "GSMadrid"]
    scenario = load_scenario(args.scenario)
    number = {name: k for k, name in enumerate(scenario.node_names, 1)}
    iphys = max(n.iphys for n in scenario.nodes)
    out: dict = {"scenario": args.scenario, "nodes": len(scenario.nodes), "iphys": iphys,
                 "load_before": Path("/proc/loadavg").read_text().split()[:3],
                 # KSM changed babel's churn before (docs/setup.md): say whether it was on.
                 "ksm": {"offered": ksm_offered(), "before": ksm.state()}}
    start = time.monotonic()
    done = nn("create", "--lab", args.lab, "--nodes", str(len(scenario.nodes)), "--iphys",
              str(iphys), "--routing", "babel", "--timings")
    out["create_wall_s"] = round(time.monotonic() - start, 1)
    if done.returncode:
        sys.exit(done.stderr)
    said = re.search(r"created in ([0-9.]+) s", done.stdout + done.stderr)
    out["create_s"] = float(said.group(1)) if said else None
    events = Path(f"/tmp/nestednet-{args.lab}-events.jsonl")
    events.unlink(missing_ok=True)
    pings: dict[str, subprocess.Popen] = {}
    try:
        # create parks every node's engine as its last act; a wake (SIGUSR1) arriving while
        # a park waits for dockerd to exit was seen to leave that node's engine.lock held
        # for good (a later `run` then hung in its route watch): let the parks finish.
        time.sleep(PARK_SETTLE_S)
        lab = Lab.open(args.lab)
        memory = whole_nodes_mb(lab)
        out["memory_mb_per_node"] = {"median": statistics.median(memory),
                                     "min": min(memory), "max": max(memory)}
        until = args.until if args.until is not None else scenario.duration
        run = subprocess.Popen(
            [CLI, "run", args.scenario, "--lab", args.lab, "--shaping", "rate-only",
             "--json", "--events", str(events),
             *(["--until", str(args.until)] if args.until is not None else [])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        waited = time.monotonic()
        while not _has_step(events):
            if run.poll() is not None:
                sys.exit(f"run ended before its first step: {run.stderr.read()[-2000:]}")
            if time.monotonic() - waited > FIRST_STEP_TIMEOUT_S:
                run.send_signal(2)
                sys.exit(f"no first step after {FIRST_STEP_TIMEOUT_S} s: run interrupted")
            time.sleep(0.2)
        started = time.time()
        for dst in dsts:
            pings[dst] = subprocess.Popen(
                [CLI, "exec", "--lab", args.lab, f"n{number[args.src]}", "gnab", "--",
                 # A count, not -w: with a deadline iputils' ping exits at the first
                 # ICMP error (an unreachable during a handover ended a record early).
                 # -I the node address: without a source, ping first connect()s to find
                 # one and exits at once when there is no route yet ("connect: Network is
                 # unreachable", one ping of each of two 2026-11-27 runs); with it, a
                 # probe sent before babel has a route is counted as lost.
                 "ping", "-D", "-n", "-I", f"10.100.0.{number[args.src]}", "-i",
                 str(INTERVAL), "-W", "1", "-c", str(int((until + 5) / INTERVAL)),
                 f"10.100.0.{number[dst]}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = run.communicate(timeout=until * 3 + 600)
        out["ksm"]["after_run"] = ksm.state()  # what the lab's pages merged to, at its end
        out["run_exit"] = run.returncode
        summary = json.loads(stdout) if run.returncode == 0 else {"stderr": stderr[-2000:]}
        said = {dst: p.communicate(timeout=120) for dst, p in pings.items()}
        texts = {dst: text for dst, (text, _err) in said.items()}
        for dst, (text, err) in said.items():
            raw = Path(f"/tmp/nestednet-{args.lab}-ping-{dst}.txt")
            raw.write_text(text)
            out[f"ping_{args.src}_to_{dst}_raw"] = str(raw)
            # an exec that never ran ping (its GNAB gone, the engine not answering) says why
            out[f"ping_{args.src}_to_{dst}_exit"] = pings[dst].returncode
            if err.strip():
                out[f"ping_{args.src}_to_{dst}_stderr"] = err[-1000:]
        records = [json.loads(line) for line in events.read_text().splitlines()]
        steps = [r for r in records if r["event"] == "step"]
        walls = [r["wall_time"] for r in steps]
        end_wall = max(r.get("wall_time") or 0 for r in records)
        end_wall = max(end_wall, walls[-1] + (scenario.step_end(len(walls) - 1)
                                              - scenario.steps[len(walls) - 1].time))
        ups = [r["latency_ms"] for r in records if r["event"] == "link_up"
               and r.get("latency_ms") is not None]
        downs = [r["latency_ms"] for r in records if r["event"] == "link_down"
                 and r.get("latency_ms") is not None]
        out["ca"] = {
            "steps_played": len(steps),
            "link_up_latency_ms": _spread(ups), "link_down_latency_ms": _spread(downs),
            "links_up": sum(r["event"] == "link_up" for r in records),
            "links_down": sum(r["event"] == "link_down" for r in records),
            "refused": sum(r["event"] == "link_fail" for r in records),
            "route_events": sum(r["event"] == "route" for r in records),
            "step_wall_drift_s": round(max(w - walls[0] - (s.time - scenario.steps[0].time)
                                           for w, s in zip(walls, scenario.steps,
                                                           strict=False)), 3),
            "negotiation": summary.get("negotiation"),
        }
        src_links = ground_links(scenario, args.src)
        for dst in dsts:
            dst_links = ground_links(scenario, dst)
            handovers = [k for k in range(1, len(walls))
                         if src_links[k] != src_links[k - 1] or dst_links[k] != dst_links[k - 1]]
            answered, sent = send_times(texts[dst], started)
            out[f"ping_{args.src}_to_{dst}"] = analyse(answered, sent, started, walls, end_wall,
                                                      handovers)
    finally:
        for p in pings.values():
            if p.poll() is None:
                p.kill()
        if not args.keep:
            start = time.monotonic()
            nn("delete", "--lab", args.lab)
            out["delete_s"] = round(time.monotonic() - start, 1)
    out["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
    out["ksm"]["after_delete"] = ksm.state()
    print(json.dumps(out, indent=1))


def _has_step(events: Path) -> bool:
    if not events.exists():
        return False
    for line in events.read_text().splitlines():
        try:
            if json.loads(line).get("event") == "step":
                return True
        except ValueError:
            pass
    return False


def _spread(values: list[float]) -> dict | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"count": len(ordered), "p50": round(statistics.median(ordered), 1),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
            "max": round(ordered[-1], 1)}


if __name__ == "__main__":
    main()
