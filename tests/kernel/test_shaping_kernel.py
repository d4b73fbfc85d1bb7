"""Shaping on a real kernel (sch_netem/sch_hfsc): run in the full-kernel VM.

    scripts/kernel-vm .venv/bin/python -m pytest -m kernel tests/kernel/test_shaping_kernel.py -q

Every test builds its own `les*` namespaces (tests/kernel/lestopo.py), applies a
plan with linkemu's adapter and measures with ping / iperf3 between those
namespaces only. Measured numbers are appended to results/shaping-kernel.jsonl
(JSON lines) so a report can quote them. Tolerances are for the software-emulated VM
(about 10x slower than metal) and are stated per test.
"""

from __future__ import annotations

import json
import os

import lestopo
import pytest

from linkemu import linksfile, shaping, tc
from linkemu.model import Emulator

RATE_TOLERANCE = 0.10
"""iperf3 TCP goodput within 10 % of the configured rate (TCP/IP headers are ~4 %)."""
MIN_RISE_TOLERANCE_MS = 1.0
"""Rise of the minimum RTT (the delay floor netem sets; scheduling noise only adds)."""
MEDIAN_RISE_TOLERANCE_MS = 2.5
"""Rise of the median RTT, in the software-emulated VM on a shared, loaded host: measured
+0.2..+1.5 ms for 5/20/50 ms in quiet runs; +3.7 ms at 50 ms (HTB) with host load ~20."""


def record(name: str, **values: object) -> None:
    """Append measured numbers to results/shaping-kernel.jsonl (or $LES_RESULTS) for reports."""
    path = os.environ.get("LES_RESULTS", "results/shaping-kernel.jsonl")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as out:
        out.write(json.dumps({"test": name, **values}) + "\n")


def links_doc(topo: lestopo.Topology, c1: dict, c2: dict, c1_back: dict | None = None,
              c2_back: dict | None = None) -> dict:
    def link(client: str, fwd: dict, back: dict | None) -> dict:
        return {"router": "R1", "client": client, "client_ip": topo.client_ip(client),
                "server_ip": topo.server_ip, "forward": fwd,
                "backward": back or {"rate": "100Mbit"}}

    return {"emulator": {"bridge": "les-br", "client_port": topo.client_port,
                         "server_port": topo.server_port, "netns": topo.emu},
            "links": [link("C1", c1, c1_back), link("C2", c2, c2_back)]}


@pytest.fixture(scope="module")
def topology():
    from nestednet import capabilities

    found = capabilities.available_qdiscs()
    if not (found["netem"] and found["hfsc"]):
        pytest.skip("needs sch_netem and sch_hfsc: run in the full-kernel VM (scripts/kernel-vm)")
    built = lestopo.build()
    yield built
    lestopo.destroy()


@pytest.fixture
def topo(topology, tmp_path, monkeypatch):
    """The module's topology with a fresh state dir; linkemu's shaping removed afterwards."""
    monkeypatch.setenv(shaping.STATE_DIR_ENV, str(tmp_path / "state"))
    yield topology
    shaping.clear()


def apply_doc(doc: dict, shaper: str) -> None:
    table = linksfile.parse(doc)
    from nestednet import capabilities

    shaping.execute(shaping.plan_apply(table, shaper, capabilities.available_qdiscs()))


@pytest.mark.kernel
@pytest.mark.parametrize("shaper", ["htb", "hfsc"])
def test_delay_raises_rtt_by_configured_amount(topo, shaper):
    apply_doc(links_doc(topo, {"rate": "100Mbit"}, {"rate": "100Mbit"}), shaper)
    base = lestopo.ping("les-c1", topo.server_ip, count=20, interval=0.05)
    rises = {}
    for delay_ms in (5, 20, 50):
        shaping.set_link("R1-C1", "forward", {"delay_us": delay_ms * 1000})
        rtt = lestopo.ping("les-c1", topo.server_ip, count=20, interval=0.05)
        rises[delay_ms] = (round(min(rtt.rtts_ms) - min(base.rtts_ms), 3),
                           round(rtt.median_ms - base.median_ms, 3))
    record("delay", shaper=shaper, base_min_ms=min(base.rtts_ms), base_median_ms=base.median_ms,
           rise_min_ms={k: v[0] for k, v in rises.items()},
           rise_median_ms={k: v[1] for k, v in rises.items()})
    for delay_ms, (min_rise, median_rise) in rises.items():
        assert abs(min_rise - delay_ms) <= MIN_RISE_TOLERANCE_MS, (shaper, rises)
        assert abs(median_rise - delay_ms) <= MEDIAN_RISE_TOLERANCE_MS, (shaper, rises)


@pytest.mark.kernel
def test_loss_ten_percent(topo):
    apply_doc(links_doc(topo, {"rate": "100Mbit", "loss": "10%"}, {"rate": "100Mbit"}), "htb")
    result = lestopo.ping("les-c1", topo.server_ip, count=1000, interval=0.005, wait=1)
    record("loss", configured=10, observed=result.loss_pct)
    assert 7.0 <= result.loss_pct <= 13.0, result.loss_pct


@pytest.mark.kernel
def test_rate_limits_tcp_goodput(topo):
    """Default shaper only. HFSC over netem measured 95 % once and 85 % once (loaded VM):
    its goodput is reported by scripts/bench/linkemu_shaping.py --shaper hfsc, not asserted."""
    shaper = shaping.DEFAULT_SHAPER
    apply_doc(links_doc(topo, {"rate": "4Mbit", "delay": "2ms"}, {"rate": "100Mbit"}), shaper)
    got = lestopo.iperf3("C1", topo, seconds=4)["bps"]
    record("rate", shaper=shaper, configured_bps=4_000_000, goodput_bps=got)
    assert abs(got - 4_000_000) <= RATE_TOLERANCE * 4_000_000, got


@pytest.mark.kernel
def test_set_changes_one_link_in_place(topo):
    apply_doc(links_doc(topo, {"rate": "20Mbit", "delay": "3ms"},
                        {"rate": "30Mbit", "delay": "7ms", "loss": "1%"}), "htb")
    lestopo.ping("les-c1", topo.server_ip, count=20, interval=0.02)
    before = shaping.show()
    shaping.set_link("R1-C1", "forward", {"rate_bps": 5_000_000, "delay_us": 10_000})
    after = shaping.show()
    rows = {(r["link"], r["direction"]): r for r in after["links"]}
    old_rows = {(r["link"], r["direction"]): r for r in before["links"]}
    c1 = rows[("R1-C1", "forward")]["kernel"]
    assert (c1["rate_bps"], c1["delay_us"]) == (5_000_000, 10_000)
    for key, row in rows.items():
        if key != ("R1-C1", "forward"):
            assert row["kernel"] == old_rows[key]["kernel"], key
    assert all(r["in_sync"] for r in after["links"])

    # In place: the netem qdisc kept its packet counter (delete + re-add would reset it).
    def c1_netem(state: dict) -> dict:
        return next(q for q in state["ports"][topo.server_port]["qdiscs"] if q["handle"] == "10:0")

    assert c1_netem(after)["sent_packets"] >= c1_netem(before)["sent_packets"] > 0


@pytest.mark.kernel
def test_clear_restores_ports(topo):
    ports = [topo.client_port, topo.server_port]
    before = tc.snapshot(topo.emu, ports)
    apply_doc(links_doc(topo, {"rate": "20Mbit", "delay": "3ms"}, {"rate": "30Mbit"}), "hfsc")
    assert tc.snapshot(topo.emu, ports) != before
    assert sorted(shaping.clear()) == sorted(ports)
    assert tc.snapshot(topo.emu, ports) == before
    assert shaping.clear() == []


@pytest.mark.kernel
def test_thesis_example_applies_as_written(topo, tmp_path):
    table = linksfile.load("scenarios/links/thesis-example.json")
    from dataclasses import replace

    from nestednet import capabilities

    table = replace(table, emulator=Emulator(bridge="les-br", client_port=topo.client_port,
                                             server_port=topo.server_port, netns=topo.emu))
    shaping.execute(shaping.plan_apply(table, shaping.DEFAULT_SHAPER,
                                       capabilities.available_qdiscs()))
    state = shaping.show()
    assert len(state["links"]) == 6 and all(r["in_sync"] for r in state["links"])


@pytest.mark.kernel
@pytest.mark.parametrize("load", ["tcp", "udp"])
def test_head_of_line(topo, load):
    """Link A (1 ms) keeps its RTT while link B (200 ms) on the same port is saturated.

    Asserted for the default shaper (HTB). HFSC is measured, not asserted, by
    scripts/bench/linkemu_shaping.py: with a netem leaf it fails intermittently (A's median
    RTT 252 ms in one VM run, within 0.4 ms in another), see linkemu/README.md.

    B is loaded either by a TCP transfer (cwnd-limited: B's netem holds packets that
    are not due yet) or by UDP at twice its rate (netem always has due packets).
    "Keeps" = A's median RTT within 2 ms of its idle median. The 90th percentile is
    recorded, not asserted: in the software-emulated VM even idle p90 reaches 9 ms.
    """
    shaper = shaping.DEFAULT_SHAPER
    apply_doc(links_doc(topo, {"rate": "10Mbit", "delay": "1ms"},
                        {"rate": "10Mbit", "delay": "200ms"}), shaper)
    idle, loaded = lestopo.head_of_line(topo, load)
    rtts = loaded.rtts_ms
    record("head_of_line", shaper=shaper, load=load, **lestopo.hol_summary(idle, loaded))
    assert rtts and loaded.loss_pct == 0
    assert loaded.median_ms - idle.median_ms <= 2.0, (shaper, idle.median_ms, loaded.median_ms)


@pytest.mark.kernel
def test_rate_change_during_transfer(topo):
    """C1 4 -> 1 Mbit/s mid-transfer: C1's goodput follows within ~1 s, its TCP connection
    survives, and C2's concurrent transfer keeps its rate (receiver-side 1 s intervals)."""
    import time

    apply_doc(links_doc(topo, {"rate": "4Mbit", "delay": "2ms"},
                        {"rate": "4Mbit", "delay": "2ms"}), shaping.DEFAULT_SHAPER)
    # The servers' (receivers') intervals: the sender's view is bursty socket writes.
    servers = [lestopo.popen_in("les-sv", "iperf3", "-s", "-1", "-J", "-i", "1", "-p", str(p),
                                "-B", topo.server_ip) for p in (5203, 5204)]
    for port in (5203, 5204):
        lestopo.wait_listening("les-sv", port)
    launched = time.time()
    clients = [lestopo.popen_in(topo.client_ns(c), "iperf3", "-c", topo.server_ip, "-p", str(p),
                                "-t", "10", "-J", "-B", topo.client_ip(c))
               for c, p in (("C1", 5203), ("C2", 5204))]
    time.sleep(3.0)
    changed_at = time.time() - launched  # interval times count from about launch
    shaping.set_link("R1-C1", "forward", {"rate_bps": 1_000_000})
    sent = [json.loads(c.communicate(timeout=120)[0]) for c in clients]
    c1, c2 = (json.loads(s.communicate(timeout=60)[0]) for s in servers)
    assert all("error" not in r for r in (*sent, c1, c2)), sent
    assert all(r["end"]["sum_sent"]["seconds"] >= 9.5 for r in sent)  # connections lasted

    def rates(result: dict, since: float, until: float) -> list[float]:
        return [iv["sum"]["bits_per_second"] for iv in result["intervals"]
                if since <= iv["sum"]["start"] and iv["sum"]["end"] <= until]

    c1_after = rates(c1, changed_at + 1.0, changed_at + 6.5)
    c2_before = rates(c2, 1.0, changed_at)
    c2_after = rates(c2, changed_at, changed_at + 6.5)
    record("rate_change", c1_after_mbit=[round(r / 1e6, 2) for r in c1_after],
           c2_before_mbit=[round(r / 1e6, 2) for r in c2_before],
           c2_after_mbit=[round(r / 1e6, 2) for r in c2_after])
    assert c1_after and max(c1_after) <= 1.25e6, c1_after
    # C2 untouched: its mean stays near its own 4 Mbit/s (25 %: the loaded VM is noisy)
    assert c2_after and abs(sum(c2_after) / len(c2_after) - 4e6) <= 0.25 * 4e6, c2_after
