"""Shaped inter-node links on this host (HTB, no netem): `link add --rate`, `link set` in
place during a TCP transfer, `link list` against the kernel, and cleanup.

One 3-node x 2-iPHY nested lab (`tsh`): link A is n1:iphy1 <-> n2:iphy1 (the one
measured and changed), link B is n1:iphy2 <-> n3:iphy1 (must stay untouched).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nestednet.adapters import tc

pytestmark = pytest.mark.system

LAB = "tsh"
CLI = str(Path(sys.executable).parent / "nestednet")
N2 = "192.168.2.3"
"""n2:iphy1's inter-node address with 2 iPHYs per node (n1: .1 .2, n2: .3 .4)."""


def nn(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def _exec(node: str, comp: str, *cmd: str) -> list[str]:
    return [CLI, "exec", "--lab", LAB, node, comp, "--", *cmd]


@pytest.fixture(scope="module")
def lab():
    nn("delete", "--lab", LAB)
    done = nn("create", "--lab", LAB, "--nodes", "3", "--iphys", "2", "--memory", "64")
    assert done.returncode == 0, done.stderr
    yield LAB
    done = nn("delete", "--lab", LAB)
    assert done.returncode == 0, done.stderr
    assert not [p for p in tc.snapshot(None, ["tsh-1x1", "tsh-2x1"]).values() if p]


def _listed() -> dict[str, dict]:
    done = nn("link", "list", "--lab", LAB, "--json")
    assert done.returncode == 0, done.stderr
    return {f"{r['a']} {r['b']}": r for r in json.loads(done.stdout)}


def _iperf(seconds: int, interval: float) -> tuple[subprocess.Popen, list[tuple[float, str]]]:
    """iperf3 from n2 to n1 (-R: n1's client receives and reports), lines timestamped."""
    subprocess.run(_exec("n2", "iphy1", "iperf3", "-s", "-D", "-1"), check=True,
                   capture_output=True)
    time.sleep(0.5)
    proc = subprocess.Popen(_exec("n1", "iphy1", "iperf3", "-c", N2, "-R", "-t", str(seconds),
                                  "-i", str(interval), "-f", "m", "--forceflush"),
                            stdout=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic(), line))

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def _intervals(lines: list[tuple[float, str]]) -> list[tuple[float, float]]:
    """(arrival time, Mbit/s) per interval line of iperf3's text output."""
    out = []
    for t, line in lines:
        parts = line.split()
        if "Mbits/sec" in parts and "sec" in parts and "receiver" not in parts \
                and "sender" not in parts:
            out.append((t, float(parts[parts.index("Mbits/sec") - 1])))
    return out


def test_rate_is_shaped_and_set_in_place_during_transfer(lab):
    done = nn("link", "add", "--lab", LAB, "n1:iphy1", "n2:iphy1", "--rate", "20Mbit")
    assert done.returncode == 0, done.stderr
    done = nn("link", "add", "--lab", LAB, "n1:iphy2", "n3:iphy1", "--rate", "50Mbit")
    assert done.returncode == 0, done.stderr
    before = _listed()
    assert {d["kernel"]["rate_bps"] for d in before["n1:iphy1 n2:iphy1"]["directions"]} \
        == {20_000_000}

    proc, lines = _iperf(10, 0.2)
    while len(_intervals(lines)) < 20:  # 4 s at 20 Mbit/s first
        assert proc.poll() is None, "iperf3 ended early"
        time.sleep(0.05)
    steady = [r for _, r in _intervals(lines)[5:20]]
    started = time.monotonic()
    done = nn("link", "set", "--lab", LAB, "n1:iphy1", "n2:iphy1", "--rate", "5Mbit")
    returned = time.monotonic()
    assert done.returncode == 0, done.stderr
    assert proc.wait(timeout=30) == 0, "the TCP transfer broke when the rate changed"
    after = [(t, r) for t, r in _intervals(lines) if t > returned]

    goodput = sorted(steady)[len(steady) // 2]
    print(f"\ngoodput at 20Mbit: median {goodput:.2f} Mbit/s over 0.2 s intervals; "
          f"link set took {returned - started:.2f} s (CLI start-up included)")
    assert abs(goodput - 20) <= 2.0, steady
    first_slow = next(t for t, r in after if r <= 5.5)
    print(f"first 0.2 s interval at <= 5.5 Mbit/s ended {first_slow - returned:.2f} s after "
          f"`link set` returned; rates after: {[r for _, r in after]}")
    assert first_slow - returned <= 1.0
    # The rate over the tail, not its median interval: n1's iperf3 reports what it has
    # read, and once (CI, 2026-11-27) it read nothing for 2.2 s on the busy 2-core host,
    # then 50.6 Mbit/s in one interval, while the shaped link went on at 5 (the mean of
    # those 23 intervals: 5.06).
    tail = [r for _, r in after[5:]]
    assert abs(sum(tail) / len(tail) - 5) <= 0.5, tail

    now = _listed()
    assert {d["kernel"]["rate_bps"] for d in now["n1:iphy1 n2:iphy1"]["directions"]} \
        == {5_000_000}
    assert now["n1:iphy2 n3:iphy1"] == before["n1:iphy2 n3:iphy1"]


def test_delay_without_netem_exits_2_naming_the_module_and_changes_nothing(lab):
    if tc_has_netem():
        pytest.skip("this kernel has sch_netem")
    before = _listed()
    done = nn("link", "set", "--lab", LAB, "n1:iphy1", "n2:iphy1", "--delay", "5ms")
    assert done.returncode == 2
    assert "sch_netem" in done.stderr and "rate-only" in done.stderr
    assert _listed() == before
    done = nn("link", "set", "--lab", LAB, "n1:iphy1", "n2:iphy1", "--delay", "5ms",
              "--rate", "7Mbit", "--shaping", "rate-only")
    assert done.returncode == 0, done.stderr
    rows = _listed()["n1:iphy1 n2:iphy1"]["directions"]
    assert {d["kernel"]["rate_bps"] for d in rows} == {7_000_000}
    assert {d["mode"] for d in rows} == {"rate-only"}


def test_link_del_removes_the_shaping(lab):
    assert nn("link", "del", "--lab", LAB, "n1:iphy2", "n3:iphy1").returncode == 0
    roots = tc.snapshot(None, ["tsh-1x2", "tsh-3x1", "tsh-1x1"])
    assert roots["tsh-1x2"][1] == 0 and roots["tsh-3x1"][1] == 0
    assert roots["tsh-1x1"][1] == tc.OUR_ROOT


def tc_has_netem() -> bool:
    from nestednet.capabilities.shaping import available_qdiscs

    return available_qdiscs()["netem"]


RATE_STEPS = {
    "format": "nestednet-scenario/1", "name": "rate-steps", "duration": 9, "iphys": 2,
    "nodes": [{"name": "a", "id": 1}, {"name": "b", "id": 2}, {"name": "c", "id": 3}],
    "steps": [
        {"time": 0, "visible": [["a", "b"], ["b", "c"]],
         "links": [{"between": ["a", "b"], "rate": "20Mbit"},
                   {"between": ["b", "c"], "rate": "50Mbit"}]},
        {"time": 3, "visible": [["a", "b"], ["b", "c"]],
         "links": [{"between": ["a", "b"], "rate": "5Mbit"},
                   {"between": ["b", "c"], "rate": "50Mbit"}]},
        {"time": 6, "visible": [["a", "b"]],
         "links": [{"from": "a", "to": "b", "rate": "10Mbit"},
                   {"from": "b", "to": "a", "rate": "5Mbit"}]}]}


def test_run_shapes_links_and_changes_them_in_place_per_step(lab, tmp_path):
    for key in _listed():
        a, b = key.split()
        assert nn("link", "del", "--lab", LAB, a, b).returncode == 0
    scenario, events = tmp_path / "rate-steps.json", tmp_path / "events.jsonl"
    scenario.write_text(json.dumps(RATE_STEPS))
    done = nn("run", str(scenario), "--lab", LAB, "--events", str(events), "--json",
              timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["shaping"]["mode"] == "full" and summary["shaping"]["dropped"] == []
    assert [s["rate_bps"]["min"] for s in summary["link_properties"]] == \
        [20_000_000, 5_000_000, 5_000_000]
    records = [json.loads(line) for line in events.read_text().splitlines()]
    ups = {frozenset(e["nodes"]): e for e in records if e["event"] == "link_up"}
    assert ups[frozenset("ab")]["properties"]["a_to_b"]["rate_bps"] == 20_000_000
    updates = [e for e in records if e["event"] == "link_update"]
    ab = [e for e in updates if set(e["nodes"]) == {"a", "b"}]
    assert [e["step"] for e in ab] == [1, 2]
    assert ab[0]["properties"]["a_to_b"]["rate_bps"] == 5_000_000
    assert not [e for e in updates if set(e["nodes"]) == {"b", "c"}]  # unchanged: untouched
    shaped = [p for p, root in tc.snapshot(None, [f"{LAB}-{n}x{i}" for n in (1, 2, 3)
                                                  for i in (1, 2)]).items()
              if root and root[1] == tc.OUR_ROOT]
    assert shaped == [], "the run's trees outlived its links"
