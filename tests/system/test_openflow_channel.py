"""The persistent OpenFlow session against a real OVS bridge."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from nestednet.adapters import openflow
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.nodes import ovs_datapath
from nestednet.errors import EnvironmentProblem

pytestmark = pytest.mark.system


@pytest.fixture
def bridge():
    name = f"nnt-of{uuid.uuid4().hex[:4]}"
    with Ovsdb() as ovs:
        ovs.add_bridge(name, datapath_type=ovs_datapath(),
                       external_ids={"org.nestednet.test": "openflow"})
    try:
        yield name
    finally:
        with Ovsdb() as ovs:
            ovs.del_bridge(name)


def test_batches_add_and_delete_exactly(bridge):
    channel = openflow.Channel(bridge)
    try:
        channel.change(add=[(0x4E4E000001000002, 1, 2), (0x4E4E000003000004, 3, 4)])
        flows = {(f.cookie, f.in_port, f.output) for f in openflow.dump(bridge)}
        assert flows == {(0x4E4E000001000002, 1, 2), (0x4E4E000001000002, 2, 1),
                         (0x4E4E000003000004, 3, 4), (0x4E4E000003000004, 4, 3)}
        channel.change(delete=[0x4E4E000001000002])
        assert {f.cookie for f in openflow.dump(bridge)} == {0x4E4E000003000004}
    finally:
        channel.close()


def test_refused_change_raises(bridge):
    channel = openflow.Channel(bridge)
    try:
        with pytest.raises(EnvironmentProblem, match="refused flow changes"):
            channel.change(add=[(1, 0xFFFFFF00, 2)])  # a reserved port number as in_port
    finally:
        channel.close()


def test_missing_bridge_is_a_clear_error():
    with pytest.raises(EnvironmentProblem, match="no OpenFlow session"):
        openflow.Channel("nnt-absent")


def _rules_text(bridge: str) -> list[str]:
    done = subprocess.run(["ovs-ofctl", "-O", openflow.PROTOCOL, "--no-stats", "--no-names",
                           "dump-flows", bridge], capture_output=True, text=True, check=True)
    return sorted(line.strip() for line in done.stdout.splitlines() if "cookie=" in line)


def test_tagged_rules_are_the_ones_ovs_ofctl_makes(bridge):
    """A multi-host link's rules sent over the session (nestednet.ca.flows.HostsInstaller)
    are, in the switch, exactly those `host_flow_line` gives ovs-ofctl (`nestednet link`)."""
    rules = [(0x4E4E000001000003, 1, 65001, None, 7),  # into the tunnel: push tag 7
             (0x4E4E000001000003, 65001, 1, 5, None)]  # out of it: match tag 5, pop
    openflow.apply(bridge, [openflow.host_flow_line(c, i, o, match_tag=m, push_tag=p)
                            for c, i, o, m, p in rules])
    by_ofctl = _rules_text(bridge)
    openflow.apply(bridge, [openflow.delete_line(rules[0][0])])
    assert _rules_text(bridge) == []
    channel = openflow.Channel(bridge)
    try:
        outcome: list[list[str]] = []
        channel.submit(outcome.append, rules=rules)
        channel.wait()
    finally:
        channel.close()
    assert outcome == [[]]
    assert _rules_text(bridge) == by_ofctl and len(by_ofctl) == 2
    assert any("dl_vlan=5" in r and "pop_vlan" in r for r in by_ofctl), by_ofctl


def test_a_session_over_tcp_checks_the_datapath_id_and_reads_cookies(bridge):
    """A lab over several hosts reaches each host's main bridge through a `ptcp:` listener
    the lab gives it (nestednet.lab.multihost): the same session over TCP, refused when
    the switch there is another bridge, reading back the flows it wrote."""
    dpid = 0x4E4E00C0FFEE0001
    port = 16000 + uuid.uuid4().int % 600
    listener = openflow.Listener("127.0.0.1", port)
    with Ovsdb() as ovs:
        ovs.api.db_set("Bridge", bridge, ("other_config", {"datapath-id": f"{dpid:016x}",
                                                           "disable-in-band": "true"})
                       ).execute(check_error=True)
        ovs.set_controller(bridge, listener.passive())
        assert ovs.controllers(bridge) == [f"ptcp:{port}:127.0.0.1"]
    deadline = time.monotonic() + 5
    while True:
        try:
            channel = openflow.Channel(bridge, listener=listener, dpid=dpid)
            break
        except EnvironmentProblem:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        assert channel.target == f"tcp:127.0.0.1:{port}"
        assert channel.datapath_id() == dpid
        channel.change(add=[(0x4E4E000001000002, 1, 2)])
        assert channel.cookies() == {0x4E4E000001000002}
        outcome: list[list[str]] = []
        channel.submit(outcome.append, delete_masked=[(0x4E4E << 48, 0xFFFF << 48)])
        channel.wait()
        assert outcome == [[]] and channel.cookies() == set()
    finally:
        channel.close()
    with pytest.raises(EnvironmentProblem, match="is not bridge"):
        openflow.Channel(bridge, listener=listener, dpid=dpid + 1)


@pytest.fixture
def two_bridges():
    names = [f"nnt-ob{uuid.uuid4().hex[:4]}" for _ in range(2)]
    with Ovsdb() as ovs:
        for name in names:
            ovs.add_bridge(name, datapath_type=ovs_datapath(), fail_mode="secure",
                           external_ids={"org.nestednet.test": "openflow"})
    try:
        yield names
    finally:
        with Ovsdb() as ovs:
            for name in names:
                ovs.del_bridge(name)


def test_apply_all_is_all_or_nothing_across_bridges(two_bridges):
    """As for a step over two hosts: one bridge refusing one rule leaves both bridges as
    they were (OVS alone would commit a bundle's other rules, and without bundles the
    first bridge's part would stay); an accepted batch lands on both."""
    a, b = two_bridges
    channels = {name: openflow.Channel(name) for name in two_bridges}
    try:
        keep: openflow.Batch = ([(0x4E4E000009000009, 9, 10, None, None)], [], [])
        finished, refused = openflow.apply_all(channels, {a: keep, b: keep}, timeout=10)
        assert not refused and set(finished) == {a, b}
        good: openflow.Batch = ([(0x4E4E000001000002, 1, 2, None, None)],
                                [0x4E4E000009000009], [])
        bad: openflow.Batch = ([(0x4E4E000001000002, 3, 4, None, None),
                                (0x4E4E000001000002, 5, 0xFFFFFFFF, None, None)], [], [])
        finished, refused = openflow.apply_all(channels, {a: good, b: bad}, timeout=10)
        assert finished == {} and set(refused) == {b}
        for name in two_bridges:
            assert {(f.cookie, f.in_port, f.output) for f in openflow.dump(name)} == {
                (0x4E4E000009000009, 9, 10)}, name
        finished, refused = openflow.apply_all(channels, {a: good, b: good}, timeout=10)
        assert not refused and set(finished) == {a, b}
        for name in two_bridges:
            assert {(f.cookie, f.in_port, f.output) for f in openflow.dump(name)} == {
                (0x4E4E000001000002, 1, 2)}, name
    finally:
        for channel in channels.values():
            channel.close()
