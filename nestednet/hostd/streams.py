"""Byte streams shared by the helper and its client: exact reads, readiness that knows
about TLS, and a two-way pump (a forwarded unix socket on either side)."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading

CHUNK = 65536


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    """``n`` bytes, or fewer when the stream ends first: read into one buffer (appending
    to bytes would copy the whole of it per chunk: quadratic in the frame's size)."""
    data = bytearray(n)
    got = 0
    with memoryview(data) as view:
        while got < n:
            count = sock.recv_into(view[got:], n - got)
            if not count:
                break
            got += count
    del data[got:]
    return data


def readable(sockets: list[socket.socket], timeout: float) -> list[socket.socket]:
    """Sockets with data to read; an SSL socket with decrypted bytes pending counts
    (select sees only the raw socket)."""
    pending = [s for s in sockets if isinstance(s, ssl.SSLSocket) and s.pending()]
    if pending:
        return pending
    ready, _, _ = select.select(sockets, [], [], timeout)
    return ready


def pump(a: socket.socket, b: socket.socket, stop: threading.Event | None = None) -> None:
    """Copy bytes both ways until either side closes (then both are closed). One thread
    for both directions: an SSL socket must not be read and written from two threads."""
    try:
        while stop is None or not stop.is_set():
            for source in readable([a, b], 0.5):
                data = source.recv(CHUNK)
                if not data:
                    return
                (b if source is a else a).sendall(data)
    except OSError:
        return
    finally:
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.close()
