"""The full-kernel path works: netem under an HFSC class really delays packets.

Runs where sch_netem and sch_hfsc exist: on such a host directly, otherwise inside
the full-kernel VM (scripts/kernel-vm), which is how `make test` runs it here.
"""

from __future__ import annotations

import re
import uuid

import pytest
from pyroute2 import IPRoute, NetNS, netns

from nestednet.adapters import netns_exec
from nestednet.capabilities.shaping import available_qdiscs

pytestmark = pytest.mark.kernel

DELAY_MS = 20
# Under software emulation (TCG) the VM is ~10x slower than metal: ping's own
# overhead grows, so the upper bound is loose. The lower bound is what proves shaping.
VM_SLACK_MS = 15


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


def _rtts_ms(namespace: str, count: int = 10) -> tuple[float, float]:
    """(min, avg) RTT of ``count`` pings to b."""
    done = netns_exec.run(namespace, ["ping", "-c", str(count), "-i", "0.2", "-W", "2",
                                      "198.18.250.2"], timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    match = re.search(r"= ([\d.]+)/([\d.]+)/", done.stdout)
    assert match, done.stdout
    return float(match.group(1)), float(match.group(2))


def test_host_or_vm_has_the_qdiscs():
    found = available_qdiscs()
    assert found["netem"] and found["hfsc"], found


def test_netem_under_hfsc_delays_ping(veth_pair):
    """netem delays every packet by at least its delay, so the fastest shaped ping is
    slower than the delay; the idle fastest one is not. Averages absorb the noise of
    a loaded machine only in the upper bound."""
    a, _b, ifname = veth_pair
    idle_min, idle_avg = _rtts_ms(a)
    assert idle_min < DELAY_MS, f"idle RTT {idle_min} ms already above the delay"
    with NetNS(a) as ns:
        idx = ns.link_lookup(ifname=ifname)[0]
        ns.tc("add", "hfsc", index=idx, handle="1:", default=0x10)
        ns.tc("add-class", "hfsc", index=idx, handle="1:10", parent="1:",
              rsc={"m2": "100mbit"}, fsc={"m2": "100mbit"}, usc={"m2": "100mbit"})
        ns.tc("add", "netem", index=idx, handle="10:", parent="1:10", delay=DELAY_MS * 1000)
        kinds = {q.get_attr("TCA_KIND") for q in ns.get_qdiscs(index=idx)}
    assert {"hfsc", "netem"} <= kinds
    shaped_min, shaped_avg = _rtts_ms(a)
    assert shaped_min >= DELAY_MS, f"fastest shaped ping {shaped_min} ms < {DELAY_MS} ms"
    assert shaped_avg - idle_avg <= DELAY_MS + VM_SLACK_MS, (
        f"idle avg {idle_avg} ms, shaped avg {shaped_avg} ms")
