"""openflow.Channel against a fake switch on a Unix socket: batching, barrier, errors."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from nestednet.adapters import openflow
from nestednet.errors import EnvironmentProblem

pytestmark = pytest.mark.unit

HELLO, ERROR, FLOW_MOD, BARRIER_REQUEST, BARRIER_REPLY = 0, 1, 14, 20, 21


def _messages(data: bytes) -> list[tuple[int, int]]:
    """(type, xid) of each OpenFlow message in ``data``."""
    out = []
    while data:
        _version, kind, length, xid = struct.unpack("!BBHI", data[:8])
        out.append((kind, xid))
        data = data[length:]
    return out


def _header(kind: int, xid: int, body: bytes = b"") -> bytes:
    return struct.pack("!BBHI", 4, kind, 8 + len(body), xid) + body


class FakeSwitch:
    """Answers HELLO, then every barrier; refuses the flow-mods whose xid is in ``refuse``."""

    def __init__(self, rundir, refuse: set[int] = frozenset()) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(rundir / "br0.mgmt"))
        self.listener.listen(1)
        self.refuse = refuse
        self.reads: list[list[tuple[int, int]]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while data := conn.recv(65536):
                batch = _messages(data)
                self.reads.append(batch)
                for kind, xid in batch:
                    if kind == HELLO:
                        conn.sendall(_header(HELLO, xid))
                    elif kind == FLOW_MOD and xid in self.refuse:
                        conn.sendall(_header(ERROR, xid, struct.pack("!HH", 5, 2)))
                    elif kind == BARRIER_REQUEST:
                        conn.sendall(_header(BARRIER_REPLY, xid))


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
