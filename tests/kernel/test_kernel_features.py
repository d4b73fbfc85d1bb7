"""The full-kernel path works: netem under an HFSC class really delays packets.

Runs where sch_netem and sch_hfsc exist: on such a host directly, otherwise inside
the full-kernel VM (scripts/kernel-vm), which is how `make test` runs it here.
"""

from __future__ import annotations

import uuid

import pytest
from pyroute2 import IPRoute, NetNS, netns
from recording import record

from linkemu import measure
from nestednet.capabilities.shaping import available_qdiscs

pytestmark = pytest.mark.kernel

DELAY_MS = 20


@pytest.fixture
def veth_pair():
    """Two namespaces of our own joined by a veth: a (198.18.250.1) <-> b (198.18.250.2)."""
    tag = uuid.uuid4().hex[:5]
    a, b = f"nnk-a-{tag}", f"nnk-b-{tag}"
    netns.create(a)
    netns.create(b)
    try:
        with IPRoute() as ip:
            ip.link("add", ifname=f"nnka{tag}", kind="veth", peer=f"nnkb{tag}")
            ip.link("set", index=ip.link_lookup(ifname=f"nnka{tag}")[0], net_ns_fd=a)
            ip.link("set", index=ip.link_lookup(ifname=f"nnkb{tag}")[0], net_ns_fd=b)
        for ns_name, ifname, addr in ((a, f"nnka{tag}", "198.18.250.1"),
                                      (b, f"nnkb{tag}", "198.18.250.2")):
            with NetNS(ns_name) as ns:
                idx = ns.link_lookup(ifname=ifname)[0]
                ns.addr("add", index=idx, address=addr, prefixlen=24)
                ns.link("set", index=idx, state="up")
                ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
        yield a, b, f"nnka{tag}"
    finally:
        netns.remove(a)
        netns.remove(b)


def _pings(namespace: str) -> measure.PingResult:
    return measure.ping(namespace, "198.18.250.2", count=100, interval=0.02)


def test_host_or_vm_has_the_qdiscs():
    found = available_qdiscs()
    assert found["netem"] and found["hfsc"], found


def test_netem_under_hfsc_delays_ping(veth_pair, delay_judge):
    """netem as the leaf of an HFSC class delays every packet by its delay: the median
    RTT rises by the configured delay, judged against a reference netem around it."""
    a, _b, ifname = veth_pair
    _pings(a)  # ARP first
    judge = delay_judge("hfsc")
    idle = judge.baseline(lambda: _pings(a))
    with NetNS(a) as ns:
        idx = ns.link_lookup(ifname=ifname)[0]
        ns.tc("add", "hfsc", index=idx, handle="1:", default=0x10)
        ns.tc("add-class", "hfsc", index=idx, handle="1:10", parent="1:",
              rsc={"m2": "100mbit"}, fsc={"m2": "100mbit"}, usc={"m2": "100mbit"})
        ns.tc("add", "netem", index=idx, handle="10:", parent="1:10", delay=DELAY_MS * 1000)
        kinds = {q.get_attr("TCA_KIND") for q in ns.get_qdiscs(index=idx)}
    assert {"hfsc", "netem"} <= kinds
    verdict = judge.verdict(DELAY_MS, lambda: _pings(a), idle)
    record("hfsc_netem", verdict=verdict)
    fastest = verdict["probe"]["min_ms"]
    assert fastest >= DELAY_MS, f"fastest shaped ping {fastest} ms < {DELAY_MS} ms"
    assert verdict["holds"], verdict
