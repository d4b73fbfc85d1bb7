"""Enlarging another process's AF_PACKET receive buffers, as done to ovs-vswitchd."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from nestednet.adapters import packet_sockets

pytestmark = pytest.mark.system

HOLDER = """
import socket, sys
free = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: receives nothing
bound = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
bound.bind(("lo", 0))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def sizes():
    return " ".join(str(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
                    for s in (free, bound, udp))
print(sizes(), flush=True)
for line in sys.stdin:
    print(sizes(), flush=True)
"""
SIZE = 4 * 1024 * 1024


@pytest.fixture
def holder():
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _sizes(proc) -> list[int]:
    proc.stdin.write("\n")
    proc.stdin.flush()
    return [int(v) for v in proc.stdout.readline().split()]


def test_only_the_sockets_of_the_given_interfaces_get_the_buffer(holder):
    default = [int(v) for v in holder.stdout.readline().split()]
    assert max(default) < SIZE
    lo = socket.if_nametoindex("lo")
    assert len(packet_sockets.socket_fds(holder.pid)) == 2
    assert packet_sockets.set_receive_buffers(holder.pid, SIZE, {lo}) == 1
    assert _sizes(holder) == [default[0], 2 * SIZE, default[2]]  # the kernel doubles it
    assert packet_sockets.set_receive_buffers(holder.pid, SIZE) == 2
    assert _sizes(holder) == [2 * SIZE, 2 * SIZE, default[2]]  # UDP left alone
    assert packet_sockets.receive_buffers(holder.pid, {lo}) == [2 * SIZE]
    assert sorted(packet_sockets.receive_buffers(holder.pid)) == [2 * SIZE, 2 * SIZE]
