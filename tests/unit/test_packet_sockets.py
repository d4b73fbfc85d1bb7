"""Which sockets of /proc/PID/net/packet belong to a switch (pure parsing)."""

from __future__ import annotations

import pytest

from nestednet.adapters import packet_sockets

pytestmark = pytest.mark.unit

PROC_NET_PACKET = """\
sk               RefCnt Type Proto  Iface R Rmem   User   Inode
ffff8f21c3a5f800 3      3    0003   12    1 0      0      918273
ffff8f21c3a5b000 3      3    0003   14    1 2304   0      918290
"""


def test_each_socket_inode_with_the_interface_it_is_bound_to():
    assert packet_sockets.sockets(PROC_NET_PACKET) == {"918273": 12, "918290": 14}


def test_no_sockets_and_unknown_layouts_give_nothing():
    assert packet_sockets.sockets(PROC_NET_PACKET.splitlines()[0]) == {}
    assert packet_sockets.sockets("") == {}
    assert packet_sockets.sockets("sk RefCnt Type\nffff 3 3\n") == {}
