"""MainBridgeInstaller spreads a batch over several OpenFlow sessions (a fake switch)."""

from __future__ import annotations

import pytest
from fake_switch import FakeSwitch

from nestednet.ca.assistant import LinkEnds
from nestednet.ca.flows import MainBridgeInstaller
from nestednet.errors import EnvironmentProblem

pytestmark = pytest.mark.unit


def _links(count: int) -> list[LinkEnds]:
    return [LinkEnds(f"n{2 * k}", "iphy1", f"n{2 * k + 1}", "iphy1") for k in range(count)]


def _installer(tmp_path, sessions: int, refuse: frozenset[int] = frozenset()):
    switch = FakeSwitch(tmp_path, refuse=refuse)
    ports: dict[str, int] = {}
    installer = MainBridgeInstaller(
        "br0", lambda node, iphy: ports.setdefault(node, len(ports) + 1),
        lambda a, b: (a << 16) | b, rundir=str(tmp_path), sessions=sessions)
    return switch, installer


def _outcomes(installer: MainBridgeInstaller, *batches: int) -> list:
    """Submit a batch of each size, wait for all, close; what each batch's done heard."""
    outcome: list = []
    try:
        for size in batches:
            installer.submit(_links(size), outcome.append)
        installer.wait()
    finally:
        installer.close()
    return outcome


def test_a_big_batch_is_split_evenly_and_done_once_every_part_is_in(tmp_path):
    switch, installer = _installer(tmp_path, sessions=4)
    outcome = _outcomes(installer, 100)
    # 100 links, two flow-mods each, in four parts of 25 links.
    assert switch.flow_mods == [50, 50, 50, 50]
    assert outcome == [None]


def test_a_batch_of_one_pass_stays_on_one_session_and_the_next_takes_another(tmp_path):
    switch, installer = _installer(tmp_path, sessions=4)
    outcome = _outcomes(installer, 25, 3)
    assert switch.flow_mods == [50, 6, 0, 0]
    assert outcome == [None, None]


def test_a_refusal_in_any_part_fails_the_batch_once(tmp_path):
    # Each session's xids start after its HELLO (xid 1): xid 2 is its first flow-mod.
    switch, installer = _installer(tmp_path, sessions=2, refuse=frozenset({2}))
    outcome = _outcomes(installer, 50)
    assert switch.flow_mods == [50, 50]
    assert len(outcome) == 1 and isinstance(outcome[0], EnvironmentProblem)
    assert str(outcome[0]).count("xid 2") == 2


def test_remove_waits_for_the_batches_sent_before_it(tmp_path):
    switch, installer = _installer(tmp_path, sessions=3)
    outcome: list = []
    try:
        installer.submit(_links(60), outcome.append)
        installer.remove(_links(60))
        assert outcome == [None]
        # Adds: 60 links in three parts of 20 (40 flow-mods each); deletes, one message
        # a link: 60 in two parts of 30, on the next two sessions.
        assert switch.flow_mods == [40 + 30, 40 + 30, 40]
    finally:
        installer.close()


def test_no_sessions_is_refused():
    with pytest.raises(ValueError):
        MainBridgeInstaller("br0", lambda n, i: 1, lambda a, b: 1, sessions=0)
