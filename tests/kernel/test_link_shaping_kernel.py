"""Inter-node link shaping (nestednet.lab.shaping) on a kernel with sch_netem.

Docker is not set up in the full-kernel VM, so two namespaces stand in for two iPHYs:
each is joined by a veth whose host end carries the lab's own port name
(`<lab>-<node>x<iphy>`, the `inter-host` veth of a real lab) to an OVS bridge, and the
link is the flow pair `link add` installs (nestednet.adapters.openflow). The shaping
is exactly the lab's: LabShaper on those host ports, with a lab record of its own.

    scripts/kernel-vm .venv/bin/python -m pytest -m kernel -p no:cacheprovider \\
        tests/kernel/test_link_shaping_kernel.py

Judged: a one-way delay of 1, 10 and 50 ms by the DelayJudge, a reference around each
(conftest.py); loss 5 % -> 5 +/- 2 % over 1,000 pings; a scenario step that changes
the delay is seen by the very next pings (within one 2 s step). Results are recorded.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Interface
from pathlib import Path

import pytest
from recording import record

from linkemu import measure
from nestednet.adapters import netlink, netns_exec, openflow, tc
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.ca.assistant import LinkEnds
from nestednet.ca.link_shaping import RunShaping
from nestednet.capabilities.nodes import ovs_datapath
from nestednet.lab.record import LabRecord
from nestednet.lab.shaping import LabShaper, direction, iphy_port
from nestednet.model import topology as topo
from nestednet.model.link_properties import LinkProperties
from nestednet.model.link_resolver import LinkResolver
from nestednet.model.scenario_file import parse_scenario
from nestednet.model.shaping_policy import ShapingPolicy

pytestmark = pytest.mark.kernel

LAB = "kvs"
A, B = topo.Endpoint(1, 1), topo.Endpoint(2, 1)
ADDRESSES = {A: IPv4Interface("192.168.2.1/24"), B: IPv4Interface("192.168.2.2/24")}
LOSS_PINGS = 1000


@dataclass
class Pair:
    """Two stand-in iPHYs joined through the bridge, and the lab shaper of their ports."""

    ns: dict[topo.Endpoint, str]
    shaper: LabShaper
    record: LabRecord

    def ping(self, count: int = 100, interval: float = 0.02) -> measure.PingResult:
        return measure.ping(self.ns[A], str(ADDRESSES[B].ip), count=count, interval=interval)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tag = uuid.uuid4().hex[:4]
    bridge = f"{LAB}-m{tag}"
    ns = {end: f"nnkv-{tag}-{end.node}" for end in (A, B)}
    record = LabRecord(LAB, tmp_path_factory.mktemp("labs"))
    record.claim()
    ovs = Ovsdb()
    try:
        ovs.add_bridge(bridge, datapath_type=ovs_datapath(), external_ids={})
        for port_no, end in enumerate((A, B), start=1):
            netlink.create_netns(ns[end])
            outer, inner = iphy_port(LAB, end), f"kv{tag}i{end.node}"
            with netlink.route() as host:
                netlink.add_veth(host, outer, inner)
                netlink.move(host, inner, ns[end], "inter")
                netlink.up(host, outer)
            with netlink.route(ns[end]) as ipr:
                netlink.up(ipr, "lo")
                netlink.configure(ipr, "inter", ADDRESSES[end])
            ovs.add_port(bridge, outer, external_ids={}, ofport=port_no)
        openflow.apply(bridge, openflow.patch_lines(0x4E4E000000000001, 1, 2))
        shaper = LabShaper(record, ShapingPolicy.choose("full", netem_available=True))
        stand_in = Pair(ns, shaper, record)
        stand_in.ping(count=5, interval=0.1)  # ARP before anything is timed
        yield stand_in
    finally:
        tc.remove(None, [iphy_port(LAB, end) for end in (A, B)])
        with netlink.route() as host:
            for end in (A, B):
                netlink.delete(host, iphy_port(LAB, end))
        for name in ns.values():
            netlink.remove_netns(name)
        ovs.del_bridge(bridge)
        ovs.close()


def _forward(props: LinkProperties):
    return direction(LAB, A, B, props)


def _backward(props: LinkProperties):
    return direction(LAB, B, A, props)


def test_delay_is_the_configured_one_way_delay(
        pair: Pair, delay_judge: Callable[[str], measure.DelayJudge]):
    judge = delay_judge("htb")
    idle = judge.baseline(pair.ping)
    pair.shaper.up([_forward(LinkProperties(rate_bps=100_000_000)),
                    _backward(LinkProperties(rate_bps=100_000_000))])
    verdicts = []
    for delay_ms in (1, 10, 50):
        pair.shaper.change([_forward(LinkProperties(rate_bps=100_000_000,
                                                    delay_us=delay_ms * 1000))])
        verdict = judge.verdict(delay_ms, pair.ping, idle)
        record("link_shaping_delay", idle=idle.probe.summary(), **verdict)
        verdicts.append(verdict)
    kernel = pair.shaper.read([iphy_port(LAB, B)])[iphy_port(LAB, B)]
    assert kernel is not None and kernel["delay_us"] == 50_000
    assert all(v["holds"] for v in verdicts), verdicts


def test_loss_is_the_configured_loss(pair: Pair):
    pair.shaper.change([_forward(LinkProperties(loss_pct=5.0))])
    result = pair.ping(count=LOSS_PINGS, interval=0.01)
    record("link_shaping_loss", configured_pct=5.0, measured_pct=result.loss_pct,
           sent=result.sent, received=result.received)
    assert 3.0 <= result.loss_pct <= 7.0, result.summary()


def test_a_step_that_changes_the_delay_is_seen_within_the_step(pair: Pair, tmp_path: Path):
    doc = {"format": "nestednet-scenario/1", "duration": 4, "iphys": 1,
           "nodes": [{"name": "n1"}, {"name": "n2"}],
           "steps": [{"time": 0, "visible": [["n1", "n2"]],
                      "links": [{"between": ["n1", "n2"], "delay": "5ms"}]},
                     {"time": 2, "visible": [["n1", "n2"]],
                      "links": [{"from": "n1", "to": "n2", "delay": "40ms"},
                                {"from": "n2", "to": "n1", "delay": "5ms"}]}]}
    scenario = parse_scenario(doc, "inline")
    shaping = RunShaping(LinkResolver(scenario), pair.shaper,
                         lambda node, iphy: topo.Endpoint(topo.node_number(node), 1), LAB)
    link = LinkEnds("n1", "iphy1", "n2", "iphy1")
    shaping.set_step(0)
    shaping.down([link])
    shaping.up([link])
    before = pair.ping(count=30)
    shaping.set_step(1)
    began = time.monotonic()
    changed = shaping.update([link])
    applied_ms = (time.monotonic() - began) * 1000
    after = pair.ping(count=20, interval=0.05)  # 1 s: half the 2 s step
    record("link_shaping_step", before=before.summary(), after=after.summary(),
           update_ms=round(applied_ms, 3), changed=list(map(str, changed)))
    assert list(changed) == [link]
    assert changed[link]["a_to_b"]["delay_us"] == 40_000
    # RTT is 10 ms (+ netem lateness) before and 45 ms after; every ping of the first
    # second after the change must already carry the new delay.
    assert before.median_ms < 25 and after.min_ms > 40, (before.summary(), after.summary())
    shaping.down([link])
    assert tc.snapshot(None, [iphy_port(LAB, B)])[iphy_port(LAB, B)][1] == 0


def _reordered(result_text: str) -> tuple[int, int]:
    """(replies, replies arriving after a later-sent one) from ping's per-reply lines."""
    seqs = [int(s) for s in re.findall(r"icmp_seq=(\d+)", result_text)]
    late, highest = 0, -1
    for seq in seqs:
        if seq < highest:
            late += 1
        highest = max(highest, seq)
    return len(seqs), late


@pytest.mark.parametrize("keep_order", [False, True])
def test_jitter_reordering_and_the_keep_order_mode(pair: Pair, keep_order: bool):
    """netem jitter above the packet spacing reorders; keep_order (netem paced at the link
    rate) should not. Pings every 2 ms against 10 ms +/- 5 ms on n1 -> n2, the fraction
    recorded. Seen in the VM: 4.6-6.0 % reordered without; with keep_order 0.6 % in one
    run and 0 in another (where those few came from is not known), so the bound is 1 %."""
    shaper = LabShaper(pair.record, ShapingPolicy.choose("full", True, keep_order=keep_order))
    props = LinkProperties(rate_bps=100_000_000, delay_us=10_000, jitter_us=5_000)
    shaper.down([iphy_port(LAB, A), iphy_port(LAB, B)])
    shaper.up([_forward(props), _backward(LinkProperties(rate_bps=100_000_000))])
    done = netns_exec.run(pair.ns[A], ["ping", "-n", "-c", "500", "-i", "0.002", "-W", "2",
                                       str(ADDRESSES[B].ip)], timeout=120)
    replies, late = _reordered(done.stdout)
    record("link_shaping_reorder", keep_order=keep_order, interval_ms=2, delay_ms=10,
           jitter_ms=5, replies=replies, reordered=late,
           reordered_pct=round(100 * late / replies, 2) if replies else None)
    shaper.down([iphy_port(LAB, A), iphy_port(LAB, B)])
    assert replies > 400
    if keep_order:
        assert late <= replies / 100
