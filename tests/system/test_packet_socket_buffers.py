"""Enlarging another process's AF_PACKET receive buffers, as done to a node's ovs-vswitchd."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nestednet.adapters import packet_sockets

pytestmark = pytest.mark.system

HOLDER = """
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: receives nothing
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
print(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), flush=True)
sys.stdin.readline()
print(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
      u.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), flush=True)
"""


def test_another_process_packet_socket_gets_the_buffer_and_nothing_else_changes():
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        before = int(holder.stdout.readline())
        size = 4 * 1024 * 1024
        assert before < size
        assert len(packet_sockets.socket_fds(holder.pid)) == 1
        assert packet_sockets.set_receive_buffers(holder.pid, size) == 1
        holder.stdin.write("\n")
        holder.stdin.flush()
        packet_after, udp_after = map(int, holder.stdout.readline().split())
    finally:
        holder.kill()
        holder.wait()
    assert packet_after == 2 * size  # the kernel doubles what it is given
    assert udp_after == before  # not an AF_PACKET socket: left alone
