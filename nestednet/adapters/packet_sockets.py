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

SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SYS_PIDFD_GETFD = 438
"""The same number on every architecture Linux gave it to (x86_64, arm64, ...)."""


def inodes(proc_net_packet: str) -> set[str]:
    """Socket inodes listed in a /proc/PID/net/packet text (its last column)."""
    lines = proc_net_packet.splitlines()
    if not lines or not lines[0].split() or lines[0].split()[-1] != "Inode":
        return set()
    return {line.split()[-1] for line in lines[1:] if line.split()}


def socket_fds(pid: int) -> list[int]:
    """``pid``'s descriptors that are AF_PACKET sockets of its network namespace."""
    with open(f"/proc/{pid}/net/packet") as f:
        wanted = inodes(f.read())
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:[") and target[8:-1] in wanted:
            found.append(int(fd))
    return sorted(found)


def set_receive_buffers(pid: int, size: int) -> int:
    """Give every AF_PACKET socket of ``pid`` a receive buffer of ``size`` bytes (the
    kernel doubles it, as for any SO_RCVBUF); returns how many sockets now have it.

    Raises OSError when the kernel refuses (no pidfd_getfd, no ptrace right on
    ``pid``, no CAP_NET_ADMIN)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    changed = 0
    try:
        for fd in socket_fds(pid):
            dup = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
            if dup < 0:
                err = ctypes.get_errno()
                if err == 9:  # EBADF: closed since we listed it
                    continue
                raise OSError(err, f"pidfd_getfd({pid}, {fd}): {os.strerror(err)}")
            with socket.socket(fileno=dup) as sock:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) < size:
                    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
            changed += 1
    finally:
        os.close(pidfd)
    return changed
