"""Receive buffers of the AF_PACKET sockets another process holds (a node's ovs-vswitchd).

On the userspace datapath ovs-vswitchd reads every port through an AF_PACKET socket
whose receive buffer is the kernel default (net.core.rmem_default, 208 KiB: about three
64 KiB TSO segments). While its one polling thread is busy the buffer overflows and
the packets are lost without a counter: TCP's retransmits on the userspace datapath
(nestednet.datapath). OVS has no setting for this buffer and a network namespace
cannot raise the default, so for the switches NestedNet owns we enlarge the sockets
themselves: pidfd_getfd(2) (Linux 5.6) gives us a second descriptor of the same socket,
and SO_RCVBUFFORCE on it changes the socket ovs-vswitchd reads.
"""

from __future__ import annotations

import ctypes
import os
import socket
from collections.abc import Iterator

SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SYS_PIDFD_GETFD = 438
"""The same number on every architecture Linux gave it to (x86_64, arm64, ...)."""


def sockets(proc_net_packet: str) -> dict[str, int]:
    """Socket inode -> interface index, from a /proc/PID/net/packet text (its Inode and
    Iface columns; an unbound socket has index 0)."""
    lines = proc_net_packet.splitlines()
    header = lines[0].split() if lines else []
    if "Inode" not in header or "Iface" not in header:
        return {}
    inode, iface = header.index("Inode"), header.index("Iface")
    rows = [line.split() for line in lines[1:]]
    return {row[inode]: int(row[iface]) for row in rows if len(row) == len(header)}


def socket_fds(pid: int, ifindexes: set[int] | None = None) -> list[int]:
    """``pid``'s descriptors that are AF_PACKET sockets of its network namespace (only
    those bound to ``ifindexes``, if given)."""
    with open(f"/proc/{pid}/net/packet") as f:
        wanted = {inode for inode, index in sockets(f.read()).items()
                  if ifindexes is None or index in ifindexes}
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:[") and target[8:-1] in wanted:
            found.append(int(fd))
    return sorted(found)


def set_receive_buffers(pid: int, size: int, ifindexes: set[int] | None = None) -> int:
    """Give every AF_PACKET socket of ``pid`` (bound to ``ifindexes``, if given) a receive
    buffer of ``size`` bytes (the kernel doubles it, as for any SO_RCVBUF); returns how
    many sockets now have it.

    Raises OSError when the kernel refuses (no pidfd_getfd, no ptrace right on
    ``pid``, no CAP_NET_ADMIN)."""
    changed = 0
    for sock in _borrowed(pid, ifindexes):
        with sock:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) < size:
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
        changed += 1
    return changed


def receive_buffers(pid: int, ifindexes: set[int] | None = None) -> list[int]:
    """The receive buffer sizes (as SO_RCVBUF reports them) of ``pid``'s AF_PACKET
    sockets bound to ``ifindexes`` (all, if None): what `set_receive_buffers` left."""
    sizes = []
    for sock in _borrowed(pid, ifindexes):
        with sock:
            sizes.append(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    return sizes


def _borrowed(pid: int, ifindexes: set[int] | None) -> Iterator[socket.socket]:
    """Our own descriptor of each such socket of ``pid`` (pidfd_getfd), one at a time;
    the caller closes it."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        for fd in socket_fds(pid, ifindexes):
            dup = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
            if dup < 0:
                err = ctypes.get_errno()
                if err == 9:  # EBADF: closed since we listed it
                    continue
                raise OSError(err, f"pidfd_getfd({pid}, {fd}): {os.strerror(err)}")
            yield socket.socket(fileno=dup)
    finally:
        os.close(pidfd)
