"""openflow.Channel against a fake switch on a Unix socket: batching, barrier, errors."""

from __future__ import annotations

import select
import time

import pytest
from fake_switch import BARRIER_REQUEST, FLOW_MOD, HELLO, FakeSwitch

from nestednet.adapters import openflow
from nestednet.errors import EnvironmentProblem

pytestmark = pytest.mark.unit

def test_a_batch_goes_out_in_one_write_and_ends_at_its_barrier(tmp_path):
    switch = FakeSwitch(tmp_path)
    channel = openflow.Channel("br0", rundir=str(tmp_path), timeout=5)
    try:
        channel.change(add=[(0x101, 1, 2), (0x103, 3, 4)], delete=[0x505])
        channel.change(delete=[0x101])
        channel.change()  # nothing to do: nothing sent
    finally:
        channel.close()
    switch.thread.join(5)
    assert switch.reads[0] == [(HELLO, 1)]
    # delete first, then both flows of each link, then the barrier: one read, in order
    assert [kind for kind, _ in switch.reads[1]] == [FLOW_MOD] * 5 + [BARRIER_REQUEST]
    assert [xid for _, xid in switch.reads[1]] == [2, 3, 4, 5, 6, 7]
    assert switch.reads[2] == [(FLOW_MOD, 8), (BARRIER_REQUEST, 9)]
    assert len(switch.reads) == 3


def test_a_refused_flow_mod_fails_the_batch_after_its_barrier(tmp_path):
    FakeSwitch(tmp_path, refuse={3})
    channel = openflow.Channel("br0", rundir=str(tmp_path), timeout=5)
    try:
        with pytest.raises(EnvironmentProblem, match="xid 3: type 5 code 2"):
            channel.change(add=[(0x101, 1, 2)])
        channel.change(add=[(0x103, 3, 4)])  # the session is still in step
    finally:
        channel.close()


def test_no_switch_is_a_clear_environment_problem(tmp_path):
    with pytest.raises(EnvironmentProblem, match="no OpenFlow session with bridge br9"):
        openflow.Channel("br9", rundir=str(tmp_path), timeout=1)


def test_submitted_batches_complete_in_order_with_their_own_errors(tmp_path):
    FakeSwitch(tmp_path, refuse={5})  # xids: HELLO 1, flows 2 3 + barrier 4, flows 5 6 + 7
    channel = openflow.Channel("br0", rundir=str(tmp_path), timeout=5)
    done: list[tuple[str, list[str]]] = []
    try:
        channel.submit(lambda errors: done.append(("first", errors)), add=[(0x101, 1, 2)])
        channel.submit(lambda errors: done.append(("second", errors)), add=[(0x103, 3, 4)])
        channel.submit(lambda errors: done.append(("empty", errors)))  # nothing: done at once
        assert done == [("empty", [])]
        assert channel.in_flight() == 2
        deadline = time.monotonic() + 5
        while channel.in_flight() and time.monotonic() < deadline:
            select.select([channel], [], [], 1)
            channel.read()  # never blocks
        channel.read()
        assert done[1:] == [("first", []), ("second", ["xid 5: type 5 code 2"])]
        channel.submit(lambda errors: done.append(("third", errors)), delete=[0x101])
        channel.wait()
        assert done[-1] == ("third", []) and channel.in_flight() == 0
    finally:
        channel.close()
