"""The GNAB's iPHY poll: one ICMP echo per iPHY from one socket, no child processes.

Spawning `ping` per iPHY every poll cost a process start per iPHY (96 a second in a
48 x 4 lab) and kept the agent's CPU share from the CA's messages. One socket sends
every echo and the agent's selector reads the replies as they come, so a poll never
blocks the agent. The socket is a ping socket (SOCK_DGRAM, no privilege where
net.ipv4.ping_group_range admits the agent's group, as in Docker's containers) or
else a raw one (CAP_NET_RAW, which components hold).
"""

from __future__ import annotations

import os
import socket
import struct
import time

ECHO_REQUEST, ECHO_REPLY = 8, 0
TIMEOUT_S = 1.0
"""An iPHY that has not answered within this is down (as `ping -W 1`)."""


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def echo_request(ident: int, seq: int, payload: bytes = b"nestednet") -> bytes:
    """An ICMP echo request (ping sockets replace ``ident`` with their own)."""
    header = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident & 0xFFFF, seq & 0xFFFF)
    return struct.pack("!BBHHH", ECHO_REQUEST, 0, checksum(header + payload),
                       ident & 0xFFFF, seq & 0xFFFF) + payload


def parse_echo_reply(data: bytes, *, ip_header: bool) -> tuple[int, int] | None:
    """(ident, seq) of an echo reply, None for anything else; a raw socket's packets
    start with the IPv4 header, a ping socket's with the ICMP header."""
    if ip_header:
        if len(data) < 20 or data[0] >> 4 != 4:
            return None
        data = data[(data[0] & 0x0F) * 4:]
    if len(data) < 8:
        return None
    kind, _code, _sum, ident, seq = struct.unpack("!BBHHH", data[:8])
    return (ident, seq) if kind == ECHO_REPLY else None


class Round:
    """One poll: which iPHYs answered, keyed by (address, seq); pure bookkeeping."""

    def __init__(self, targets: dict[str, str], first_seq: int, deadline: float) -> None:
        self.deadline = deadline
        self.expected = {(address, (first_seq + k) & 0xFFFF): name
                         for k, (name, address) in enumerate(sorted(targets.items()))}
        self.up = dict.fromkeys(targets, False)

    def answered(self, address: str, seq: int) -> None:
        name = self.expected.pop((address, seq), None)
        if name is not None:
            self.up[name] = True

    def result(self, now: float) -> dict[str, bool] | None:
        """iPHY -> answered, once all have answered or the deadline passed; else None."""
        return self.up if not self.expected or now >= self.deadline else None


class IcmpProbe:
    """Pings every iPHY at once; ``fileno`` goes into the agent's selector, which calls
    ``read`` when replies are waiting; ``result`` says when the round is over."""

    def __init__(self, targets: dict[str, str], timeout: float = TIMEOUT_S) -> None:
        self.targets, self.timeout = targets, timeout
        self._ident = os.getpid() & 0xFFFF
        self._seq = 0
        self.round: Round | None = None
        try:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
            self._raw = False
        except OSError:  # ping_group_range excludes us: a raw socket (CAP_NET_RAW)
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            self._raw = True
        self._sock.setblocking(False)

    def fileno(self) -> int:
        return self._sock.fileno()

    def start(self) -> None:
        """Send one echo to every iPHY (a round under way is left to finish)."""
        if self.round is not None:
            return
        self.round = Round(self.targets, self._seq, time.monotonic() + self.timeout)
        for (address, seq) in list(self.round.expected):
            try:
                self._sock.sendto(echo_request(self._ident, seq), (address, 0))
            except OSError:  # unreachable or unresolvable: it stays down
                self.round.expected.pop((address, seq), None)
        self._seq = (self._seq + len(self.targets)) & 0xFFFF

    def read(self) -> None:
        """Take in every reply waiting on the socket."""
        while True:
            try:
                data, (address, _port) = self._sock.recvfrom(2048)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            reply = parse_echo_reply(data, ip_header=self._raw)
            if reply is None or self.round is None:
                continue
            ident, seq = reply
            if self._raw and ident != self._ident:
                continue  # another process's ping (a raw socket sees them all)
            self.round.answered(address, seq)

    def finish(self, now: float | None = None) -> dict[str, bool] | None:
        """The round's outcome once it is over (then a new one may start); else None."""
        if self.round is None:
            return None
        up = self.round.result(time.monotonic() if now is None else now)
        if up is not None:
            self.round = None
        return up

    def seconds_left(self) -> float | None:
        """Until the current round's deadline; None when no round is under way."""
        return None if self.round is None else max(0.0, self.round.deadline - time.monotonic())

    def close(self) -> None:
        self._sock.close()
