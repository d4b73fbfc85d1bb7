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


def test_inodes_are_the_last_column_of_each_row():
    assert packet_sockets.inodes(PROC_NET_PACKET) == {"918273", "918290"}


def test_no_sockets_and_unknown_layouts_give_nothing():
    assert packet_sockets.inodes(PROC_NET_PACKET.splitlines()[0]) == set()
    assert packet_sockets.inodes("") == set()
    assert packet_sockets.inodes("sk RefCnt Type\nffff 3 3\n") == set()
