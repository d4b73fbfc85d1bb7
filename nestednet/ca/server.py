"""The CA's network side: a JSON-lines TCP server for the GNAB agents.

One thread owns every socket and every decision: messages that arrive together are
handed to the assistant as one batch, so Algorithm 1 sees requests strictly one
after another and the flows for a batch are installed together. Other threads
(the scenario player) talk to it only through ``call_soon``. A malformed or
hostile message is answered with ERROR and logged; it never stops the server.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from nestednet.agent import protocol as p

log = logging.getLogger("nestednet.ca")
T = TypeVar("T")


class Handler(Protocol):
    def on_messages(self, batch: list[tuple[int, dict]]) -> None: ...
    def on_disconnect(self, conn_id: int) -> None: ...


CA_NICE = -10
"""The CA thread's nice value in a run where it may not be real-time (CA_REALTIME): that
of ovs-vswitchd as ovs-ctl starts it. The CA sits between every agent's request and its
flows; at the default nice, on a busy machine (labs of 48 nested nodes, other work) it
waited for the CPU after each wake-up, on each request and each flow install's reply,
and that wait, not its work, set link latency."""

CA_REALTIME = 1
"""The CA thread's SCHED_FIFO priority in a run (the lowest real-time one), where the system
allows it. At nice -10 it still waited: a step wakes every agent at once (250 at 250 x 4,
on 2 cores), and each woken agent may preempt a thread of the normal class whatever its
nice value, so sending a step's 250 messages took 23-44 ms and requests waited behind
it (docs/benchmarks.md, "The CA thread real-time"). It only ever runs on a message or a
flow install's answer, so it cannot hold a core without input; SCHED_RESET_ON_FORK gives
threads and processes it starts the normal class back."""


def raise_priority(nice: int | None, realtime: int | None = None) -> str:
    """Give the calling thread (only) SCHED_FIFO at ``realtime``, else ``nice`` when the
    system refuses it (no CAP_SYS_NICE, no real-time budget in its cgroup); what it got:
    "SCHED_FIFO N", "nice N" or "unchanged" (each refusal logged)."""
    tid = threading.get_native_id()
    if realtime is not None:
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                                  os.sched_param(realtime))
            return f"SCHED_FIFO {realtime}"
        except OSError as exc:
            log.info("CA thread not real-time (SCHED_FIFO %d refused: %s)", realtime, exc)
    if nice is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            return f"nice {nice}"
        except OSError as exc:
            log.info("CA thread keeps its priority (nice %d refused: %s)", nice, exc)
    return "unchanged"


class ControlServer:
    """Accepts agents, reads their lines, writes replies; all on one thread."""

    def __init__(self, listener: socket.socket, nice: int | None = None,
                 realtime: int | None = None) -> None:
        """``realtime``: the server thread's SCHED_FIFO priority (see CA_REALTIME), else
        ``nice`` (CA_NICE); both None leave it as it is."""
        self.nice = nice
        self.realtime = realtime
        self.scheduling = "unchanged"
        """What the server thread got (raise_priority), once it has started."""
        self._listener = listener
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._conns: dict[int, tuple[socket.socket, p.LineReader]] = {}
        self._next_id = 1
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._outbox: dict[int, list[bytes]] = {}
        self._timer_seq = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.handler: Handler | None = None
        self.address = listener.getsockname()

    # --- called from any thread ------------------------------------------------------

    def start(self, handler: Handler) -> None:
        self.handler = handler
        self._thread = threading.Thread(target=self._loop, name="nestednet-ca", daemon=True)
        self._thread.start()

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the server thread, between batches."""
        self._calls.put(fn)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def call(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run ``fn`` on the server thread and return its result (or raise its error).

        Batches are decided and their flows installed in one go on that thread, so what
        ``fn`` sees is never half-way through a batch.
        """
        outcome: dict[str, object] = {}
        done = threading.Event()

        def wrapped() -> None:
            try:
                outcome["value"] = fn()
            except BaseException as exc:
                outcome["error"] = exc
            finally:
                done.set()

        self.call_soon(wrapped)
        if not done.wait(timeout):
            raise TimeoutError(f"the CA thread did not answer within {timeout} s")
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["value"]  # type: ignore[return-value]

    def stop(self) -> None:
        self._stop.set()
        self.call_soon(lambda: None)
        if self._thread is not None:
            self._thread.join(timeout=10)
        for sock, _ in list(self._conns.values()):
            sock.close()
        self._conns.clear()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    # --- server thread only ------------------------------------------------------------

    def send(self, conn_id: int, data: bytes) -> bool:
        """Queue ``data`` for the connection; False if it is gone.

        Everything queued for a connection goes out in one write when the thread is
        done with the current batch, call or timer: one segment and one wake-up for
        the agent instead of one per message (a step sends several to each agent).
        """
        if conn_id not in self._conns:
            return False
        self._outbox.setdefault(conn_id, []).append(data)
        return True

    def _flush(self, only: int | None = None) -> None:
        for conn_id in [only] if only is not None else list(self._outbox):
            chunks = self._outbox.pop(conn_id, None)
            conn = self._conns.get(conn_id)
            if not chunks or conn is None:
                continue
            sock = conn[0]
            try:
                sock.settimeout(2)
                sock.sendall(b"".join(chunks))
                sock.setblocking(False)
            except OSError as exc:
                log.info("agent connection %d lost while sending: %s", conn_id, exc)
                self._drop(conn_id)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on this thread ``delay`` seconds from now (or as soon after as the
        current batch is done). Server thread only."""
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_seq), fn))

    def watch(self, fileobj: object, on_readable: Callable[[], None]) -> None:
        """Call ``on_readable`` on this thread whenever ``fileobj`` (anything with a
        fileno) has data, like the agents' sockets. Server thread only."""
        self._selector.register(fileobj, selectors.EVENT_READ, ("watch", on_readable))

    def unwatch(self, fileobj: object) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fileobj)

    def connections(self) -> list[int]:
        return list(self._conns)

    def _drop(self, conn_id: int) -> None:
        queued = self._outbox.pop(conn_id, None)
        conn = self._conns.pop(conn_id, None)
        if conn is None:
            return
        if queued:  # e.g. the ERROR that says why it is dropped
            with contextlib.suppress(OSError):
                conn[0].settimeout(0.5)
                conn[0].sendall(b"".join(queued))
        self._selector.unregister(conn[0])
        conn[0].close()
        if self.handler is not None:
            self.handler.on_disconnect(conn_id)

    def _loop(self) -> None:
        if self.nice is not None or self.realtime is not None:
            self.scheduling = raise_priority(self.nice, self.realtime)
        while not self._stop.is_set():
            batch: list[tuple[int, dict]] = []
            timeout = 0.5
            if self._timers:
                timeout = min(timeout, max(0.0, self._timers[0][0] - time.monotonic()))
            for key, _ in self._selector.select(timeout=timeout):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                elif isinstance(key.data, tuple):
                    self._guard(key.data[1])
                else:
                    batch += self._read(key.data)
            if batch:
                self._dispatch(batch)
            while True:
                try:
                    fn = self._calls.get_nowait()
                except queue.Empty:
                    break
                self._guard(fn)
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                self._guard(heapq.heappop(self._timers)[2])
            self._flush()

    def _accept(self) -> None:
        try:
            sock, peer = self._listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn_id = self._next_id
        self._next_id += 1
        self._conns[conn_id] = (sock, p.LineReader())
        self._selector.register(sock, selectors.EVENT_READ, conn_id)
        log.debug("agent connection %d from %s", conn_id, peer)

    def _read(self, conn_id: int) -> list[tuple[int, dict]]:
        sock, reader = self._conns[conn_id]
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(conn_id)
            return []
        try:
            lines = reader.feed(data)
        except p.ProtocolError as exc:
            log.warning("agent connection %d: %s; closing it", conn_id, exc)
            self.send(conn_id, p.encode(p.ERROR, error=str(exc)))
            self._drop(conn_id)
            return []
        messages = []
        for line in lines:
            try:
                messages.append((conn_id, p.decode(line)))
            except p.ProtocolError as exc:
                log.warning("agent connection %d sent a bad message: %s", conn_id, exc)
                self.send(conn_id, p.encode(p.ERROR, error=str(exc)))
        return messages

    def _dispatch(self, batch: list[tuple[int, dict]]) -> None:
        assert self.handler is not None
        handler = self.handler
        self._guard(lambda: handler.on_messages(batch))

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            # The CA must outlive any single bad message or failed action.
            log.exception("CA action failed")


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host`` only (the control bridge address, never 0.0.0.0)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    return sock
