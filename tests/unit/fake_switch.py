"""A fake OpenFlow switch on a Unix socket (as <rundir>/<bridge>.mgmt) for unit tests."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

HELLO, ERROR, ECHO_REQUEST, ECHO_REPLY = 0, 1, 2, 3
FLOW_MOD, BARRIER_REQUEST, BARRIER_REPLY = 14, 20, 21


def header(kind: int, xid: int, body: bytes = b"") -> bytes:
    return struct.pack("!BBHI", 4, kind, 8 + len(body), xid) + body


class FakeSwitch:
    """Answers HELLO, then every barrier; refuses the flow-mods whose xid is in ``refuse``.
    Serves any number of sessions at once, as ovs-vswitchd does. ``reads``: (type, xid)
    of the whole messages each recv completed, every session's; ``sessions`` counts
    those opened. ``echo`` asks the newest session for an echo, as ovs-vswitchd does when
    it has been idle; ``hang_up`` closes every open session."""

    def __init__(self, rundir, bridge: str = "br0", refuse: set[int] = frozenset()) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(rundir / f"{bridge}.mgmt"))
        self.listener.listen(16)
        self.refuse = refuse
        self.reads: list[list[tuple[int, int]]] = []
        self.conn: socket.socket | None = None
        self.open: list[socket.socket] = []
        self.sessions = 0
        self.flow_mods: list[int] = []
        """Flow-mods received, per session in the order they were opened."""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def echo(self, xid: int) -> None:
        assert self.conn is not None
        self.conn.sendall(header(ECHO_REQUEST, xid, b"ping"))

    def hang_up(self) -> None:
        assert self.open
        for conn in list(self.open):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conn = conn
            self.open.append(conn)
            self.sessions += 1
            self.flow_mods.append(0)
            threading.Thread(target=self._session, args=(conn, self.sessions - 1),
                             daemon=True).start()

    def _session(self, conn: socket.socket, index: int = 0) -> None:
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
                    self.flow_mods[index] += kind == FLOW_MOD
                    if kind == HELLO:
                        conn.sendall(header(HELLO, xid))
                    elif kind == FLOW_MOD and xid in self.refuse:
                        conn.sendall(header(ERROR, xid, struct.pack("!HH", 5, 2)))
                    elif kind == BARRIER_REQUEST:
                        conn.sendall(header(BARRIER_REPLY, xid))
                self.reads.append(batch)
        with contextlib.suppress(ValueError):
            self.open.remove(conn)


def _recv(conn: socket.socket) -> bytes:
    try:
        return conn.recv(65536)
    except OSError:
        return b""
