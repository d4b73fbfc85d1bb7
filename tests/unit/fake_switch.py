"""A fake OpenFlow switch on a Unix socket (as <rundir>/<bridge>.mgmt) for unit tests."""

from __future__ import annotations

import socket
import struct
import threading

HELLO, ERROR, ECHO_REQUEST, ECHO_REPLY = 0, 1, 2, 3
FLOW_MOD, BARRIER_REQUEST, BARRIER_REPLY = 14, 20, 21


def header(kind: int, xid: int, body: bytes = b"") -> bytes:
    return struct.pack("!BBHI", 4, kind, 8 + len(body), xid) + body


class FakeSwitch:
    """Answers HELLO, then every barrier; refuses the flow-mods whose xid is in ``refuse``.
    ``reads``: (type, xid) of the whole messages each recv completed. ``echo`` asks the
    session for an echo, as ovs-vswitchd does when it has been idle; ``hang_up`` closes
    it, and the switch takes the next session."""

    def __init__(self, rundir, bridge: str = "br0", refuse: set[int] = frozenset()) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(rundir / f"{bridge}.mgmt"))
        self.listener.listen(1)
        self.refuse = refuse
        self.reads: list[list[tuple[int, int]]] = []
        self.conn: socket.socket | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def echo(self, xid: int) -> None:
        assert self.conn is not None
        self.conn.sendall(header(ECHO_REQUEST, xid, b"ping"))

    def hang_up(self) -> None:
        assert self.conn is not None
        self.conn.shutdown(socket.SHUT_RDWR)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conn = conn
            self._session(conn)

    def _session(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while data := _recv(conn):
                buffer += data
                batch = []
                while len(buffer) >= 8:
                    _version, kind, length, xid = struct.unpack("!BBHI", buffer[:8])
                    if len(buffer) < length:
                        break
                    buffer = buffer[length:]
                    batch.append((kind, xid))
                    if kind == HELLO:
                        conn.sendall(header(HELLO, xid))
                    elif kind == FLOW_MOD and xid in self.refuse:
                        conn.sendall(header(ERROR, xid, struct.pack("!HH", 5, 2)))
                    elif kind == BARRIER_REQUEST:
                        conn.sendall(header(BARRIER_REPLY, xid))
                self.reads.append(batch)


def _recv(conn: socket.socket) -> bytes:
    try:
        return conn.recv(65536)
    except OSError:
        return b""
