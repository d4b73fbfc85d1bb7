"""The communication assistant's decisions: sessions, visibility steps and link requests.

Runs on the control server's thread only, so requests reach Algorithm 1 (the link
table) strictly one after another. Requests that arrive together are decided first
and their flows installed as one batch before any LINK_OK goes out: an agent is told
"linked" only once packets can actually cross. A batch's refusals go out after its
LINK_OK/LINK_UPs, and a new step reaches each agent as one STEP message (visibility
and the links left), so an agent always plans its next requests on the CA's current
state rather than a half-told one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

from nestednet.agent import protocol as p
from nestednet.ca.mirror import AgentMirror
from nestednet.ca.server import ControlServer
from nestednet.model import fidelity as fidelity_model
from nestednet.model.events import FIDELITY, LINK_UPDATE, STEP, Event
from nestednet.model.link_table import InterNodeLinks, Link, LinkFail

log = logging.getLogger("nestednet.ca")

HOLD_S = 0.1
"""Longest a request waits for the destination's own request (see CommunicationAssistant)."""


@dataclass(frozen=True)
class LinkEnds:
    """One inter-node link as the flows see it: two (node, iPHY) ends."""

    a: str
    a_iphy: str
    b: str
    b_iphy: str

    def numbers(self) -> list[int]:
        """The two iPHYs as numbers, as the events record them."""
        return [iphy_number(self.a_iphy) or -1, iphy_number(self.b_iphy) or -1]


def iphy_name(number: int) -> str:
    return f"iphy{number}"


def iphy_number(name: str) -> int | None:
    """``iphy3`` -> 3; anything else (a hostile or mistaken name) -> None."""
    digits = name.removeprefix("iphy")
    return int(digits) if digits.isdigit() and digits == str(int(digits)) else None


def ends_of(link: Link) -> LinkEnds:
    return LinkEnds(link.src, iphy_name(link.src_iphy), link.dst, iphy_name(link.dst_iphy))


class FlowInstaller(Protocol):
    """Makes links real on the main bridge; both calls take a whole batch."""

    def install(self, links: list[LinkEnds]) -> None: ...
    def remove(self, links: list[LinkEnds]) -> None: ...


@runtime_checkable
class PipelinedInstaller(FlowInstaller, Protocol):
    """An installer that takes a batch without waiting for it (nestednet.ca.flows): the
    CA decides the next requests while the bridge applies it. ``read`` runs when
    ``fileno`` is readable and calls each finished batch's ``done`` (None, or the
    error), in submission order; ``wait`` blocks until all are done."""

    def open(self) -> None: ...
    def submit(self, links: list[LinkEnds], done: Callable[[Exception | None], None]
               ) -> None: ...
    def fileno(self) -> int: ...
    def read(self) -> None: ...
    def wait(self) -> None: ...


class _Immediate:
    """A plain FlowInstaller as a pipelined one whose batches are done at once."""

    def __init__(self, installer: FlowInstaller) -> None:
        self.installer = installer

    def submit(self, links: list[LinkEnds], done: Callable[[Exception | None], None]) -> None:
        try:
            self.installer.install(links)
        except Exception as exc:
            done(exc)
            return
        done(None)

    def wait(self) -> None:
        pass


@dataclass
class _Batch:
    """Links accepted together whose flows are on their way, and the messages that
    must wait for them (every message the CA sends after the batch was decided)."""

    accepted: list[tuple[int, dict, LinkEnds]]
    applied: dict[LinkEnds, dict]
    started: float
    after: list[tuple[int, str, dict]] = field(default_factory=list)
    error: Exception | None = None
    done: bool = False
    flows_ms: float = 0.0
    flows_wall: float = 0.0


class LinkShaping(Protocol):
    """Shapes links (nestednet.ca.link_shaping.RunShaping); payloads go into the events."""

    def set_step(self, step: int) -> None: ...
    def linkable(self, step: int, pairs: Iterable[tuple[str, str]]
                 ) -> list[tuple[str, str]]: ...
    def up(self, links: list[LinkEnds]) -> dict[LinkEnds, dict]: ...
    def update(self, links: Iterable[LinkEnds]) -> dict[LinkEnds, dict]: ...
    def down(self, links: list[LinkEnds]) -> None: ...


NOT_KEPT = frozenset({FIDELITY, LINK_UPDATE})
"""Events of these kinds go to the file but not into EventLog.records: one per shaped
link (or direction) per step."""

KEPT_SLIM = frozenset({STEP})
"""Events of these kinds go whole to the file but into EventLog.records without their
nodes and visible pairs: the summary needs only their step and times, and a 48-node
step's pairs held in memory cost about 10 KB (a 2-hour soak's CLI grew 37 MB an hour)."""


class EventLog:
    """The run's events as JSON lines, in nestednet.model.events' record format.

    A write the disk refuses (full, quota, I/O error) does not end the CA's thread: the
    file is cut back to its last whole line, so what is there stays a valid stream,
    ``failure`` keeps the error, ``on_failure`` is told once (a run stops then), and
    later events are kept in memory only.
    """

    def __init__(self, path: Path | None,
                 on_failure: Callable[[OSError], None] = lambda error: None) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._on_failure = on_failure
        self.failure: OSError | None = None
        """Why the file stopped taking events (None while it takes them)."""
        self.counts: Counter[str] = Counter()
        """How many of each event this log has written (this run only)."""
        self.records: list[Event] = []
        """This run's events (the file may hold earlier runs' too), e.g. for pictures and
        the summary, but for the per-step bulk (NOT_KEPT): a 48-node soak's CLI grew by
        600 MB an hour keeping them."""
        self.fidelity = fidelity_model.Tally()
        """The fidelity checks, counted as they are written."""
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Not through a link planted at the name (root writes it: issue #33).
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                               | os.O_NOFOLLOW, 0o600)

    def write(self, kind: str, *, scenario_time: float, step: int | None = None,
              nodes: Iterable[str] = (), iphys: Iterable[int] = (),
              visible: Iterable[tuple[str, str]] = (), reason: str | None = None,
              latency_ms: float | None = None, **extra: object) -> None:
        self.counts[kind] += 1
        record = Event(kind, scenario_time, wall_time=round(time.time(), 6),
                       step=step if step is not None and step >= 0 else None,
                       nodes=tuple(nodes), iphys=tuple(iphys), visible=tuple(visible),
                       reason=reason, latency_ms=latency_ms, extra=extra)
        failed = None
        with self._lock:
            if kind == FIDELITY:
                self.fidelity.add(extra)
            if kind in KEPT_SLIM:
                self.records.append(replace(record, nodes=(), visible=()))
            elif kind not in NOT_KEPT:
                self.records.append(record)
            if self._fd is not None and self.failure is None:
                failed = self._append((record.to_line() + "\n").encode())
        if failed is not None:
            self._on_failure(failed)

    def _append(self, data: bytes) -> OSError | None:
        """Write one whole line or none of it; the error when the disk refused."""
        assert self._fd is not None
        whole = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, whole)
            self.failure = exc
            return exc
        return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class StepProgress:
    """What `nestednet run` shows live and what the CA benchmark measures."""

    step: int = -1
    scenario_time: float = 0.0
    started: float = 0.0
    last_change: float = 0.0
    """Monotonic time of the last flow installed or removed for this step."""
    requests: int = 0
    links_up: int = 0
    links_failed: int = 0
    links_down: int = 0


@dataclass
class Sessions:
    by_node: dict[str, int] = field(default_factory=dict)
    by_conn: dict[int, str] = field(default_factory=dict)

    def bind(self, node: str, conn: int) -> None:
        old = self.by_node.get(node)
        if old is not None and old != conn:
            self.by_conn.pop(old, None)
        self.by_node[node] = conn
        self.by_conn[conn] = node


@dataclass
class Held:
    """A request waiting for its destination's own request; decided by ``deadline`` at
    the latest."""

    conn: int
    msg: dict
    deadline: float
    arrived: float
    arrived_wall: float


class CommunicationAssistant:
    """Handles agent messages and scenario steps; see the module docstring."""

    def __init__(self, server: ControlServer, table: InterNodeLinks, installer: FlowInstaller,
                 node_ids: dict[str, int], control_ips: dict[str, str],
                 events: EventLog, aliases: dict[str, str] | None = None,
                 shaping: LinkShaping | None = None,
                 directory: dict[str, dict] | None = None) -> None:
        """``node_ids``/``control_ips`` are keyed by scenario node name; ``aliases`` maps
        the name an agent says in HELLO (its lab node, e.g. ``n3``) to that name.
        ``shaping`` (optional) shapes each link before its flows go in, changes links
        that stay up at every step, and unshapes links after their flows are gone.
        ``directory`` (node -> {address, iphys}) goes to every agent in its ID."""
        self.server = server
        self.table = table
        self.installer = installer
        self._pipelined = isinstance(installer, PipelinedInstaller)
        self._flows: PipelinedInstaller | _Immediate = (
            installer if isinstance(installer, PipelinedInstaller) else _Immediate(installer))
        self._watching = False
        self._in_flight: deque[_Batch] = deque()
        """Batches submitted and not yet answered, oldest first."""
        self._direct = False
        """True while a finished batch's messages go out (past the queue)."""
        self.shaping = shaping
        self.node_ids = node_ids
        self.control_ips = control_ips
        self.events = events
        self.aliases = aliases or {}
        self.directory = directory
        self.sessions = Sessions()
        self.visible: dict[str, list[str]] = {node: [] for node in node_ids}
        self.progress = StepProgress()
        self.hello_seen: set[str] = set()
        self._visible_since: dict[frozenset[str], float] = {}
        self.mirrors: dict[str, AgentMirror] = {}
        """Per node, the agent's state as the CA's messages made it (nestednet.ca.mirror)."""
        self._held: list[Held] = []
        """Requests not decided yet, in arrival order."""
        self._wake_at = 0.0
        """When the CA thread will next look at the held requests (0: not scheduled)."""
        self.dead: dict[str, str] = {}
        """Nodes declared dead during the run (their host was lost) -> why: they are
        left out of every visibility from then on, so their links come down and no new
        one is made (`declare_dead`)."""
        self._seen: set[frozenset[str]] = set()
        """The visible pairs last given (before the dead are left out)."""
        self._refusals: list[tuple[int, str, dict]] = []
        """LINK_FAILs of the current batch: sent after its LINK_OK/LINK_UPs, so an agent
        learns of an incoming link before it hears that a request of its own failed,
        and never offers the iPHY that link just took."""

    # --- server callbacks ----------------------------------------------------------

    def on_disconnect(self, conn_id: int) -> None:
        node = self.sessions.by_conn.pop(conn_id, None)
        if node is not None and self.sessions.by_node.get(node) == conn_id:
            del self.sessions.by_node[node]
            self.mirrors.pop(node, None)  # its requests on the way will not come
            log.info("agent of %s disconnected; its links stay until visibility says otherwise",
                     node)

    def on_messages(self, batch: list[tuple[int, dict]]) -> None:
        now, wall = time.monotonic(), time.time()
        for conn, msg in batch:
            kind = msg["type"]
            if kind == p.HELLO:
                self._hello(conn, msg)
            elif kind == p.LINK_REQ:
                mirror = self.mirrors.get(msg["src_node"])
                if mirror is not None and self.sessions.by_conn.get(conn) == msg["src_node"]:
                    mirror.arrived(msg["req_id"], msg["dst_node"], msg["src_iphy"])
                self._held.append(Held(conn, msg, now + HOLD_S, now, wall))
            else:
                self._reply(conn, p.ERROR, error=f"agents may not send {kind}")
        self._decide_held()

    def _decide_held(self) -> None:
        """Decide every request that need not wait, install their links as one batch,
        then send the refusals; wake up again for the first one still waiting.

        A request waits (at most HOLD_S) while every free iPHY of its destination is
        named by a request of the destination's own that is still on its way (its
        agent has been sent the message it answers, see nestednet.ca.mirror).
        Deciding it first would give its link the iPHY the destination is asking
        from, and the destination's request would be refused as src_iphy_busy for
        an iPHY that was free when it was sent. Waiting changes only the order in
        which Algorithm 1 sees requests, never what it decides. When requests wait
        only on each other (each one's destination asking from its last iPHY, those
        requests all here), the first to arrive is decided first.
        """
        accepted: list[tuple[int, dict, LinkEnds]] = []

        def decide(held: Held) -> None:
            self._held.remove(held)
            waited = time.monotonic() - held.arrived
            decided = self._decide(held.conn, held.msg, waited if waited >= 0.001 else None,
                                   held.arrived_wall)
            if decided is not None:
                accepted.append(decided)

        while self._held:
            now = time.monotonic()
            progress = False
            for held in list(self._held):  # each judged on the state the ones before left
                if held.deadline <= now or self._waits_for(held.msg) is None:
                    decide(held)
                    progress = True
            if not progress:
                stuck = self._stuck({id(h): self._waits_for(h.msg) for h in self._held})
                if not stuck:
                    break
                decide(stuck[0])
        if accepted:
            self._establish(accepted)
        refusals, self._refusals = self._refusals, []
        for conn, kind, fields in refusals:
            self._reply(conn, kind, **fields)
        if self._held:
            first = min(h.deadline for h in self._held)
            if not self._wake_at or first < self._wake_at:
                self._wake_at = first
                self.server.call_later(max(first - time.monotonic(), 0.0), self._wake)

    def _wake(self) -> None:
        self._wake_at = 0.0
        self._decide_held()

    def _stuck(self, waits: dict[int, str | None]) -> list[Held]:
        """Held requests that wait only on requests that are here and wait themselves,
        none of them (through their destinations) on one still on its way."""
        tainted = {h.msg["src_node"] for h in self._held if waits[id(h)] == "coming"}
        grew = True
        while grew:
            grew = False
            for h in self._held:
                if h.msg["dst_node"] in tainted and h.msg["src_node"] not in tainted:
                    tainted.add(h.msg["src_node"])
                    grew = True
        return [h for h in self._held
                if waits[id(h)] == "arrived" and h.msg["dst_node"] not in tainted]

    def _waits_for(self, msg: dict) -> str | None:
        """Why ``msg`` must not be decided yet: "coming" when every free iPHY of its
        destination is named by the destination's own request, one of them still on
        its way; "arrived" when those requests have all arrived (and wait too);
        None when it may be decided now."""
        src, dst = msg["src_node"], msg["dst_node"]
        mirror = self.mirrors.get(dst)
        free = self.table.free_iphys(dst)
        if mirror is None or not free or (min(src, dst), max(src, dst)) not in self.table.visible:
            return None  # (not visible: refused whatever the order)
        asking = mirror.asking()
        claims = [asking.get(iphy_name(i)) for i in free]
        if any(peer is None or peer == src for peer in claims):
            return None
        coming = mirror.on_the_way()
        return "coming" if any(iphy_name(i) in coming for i in free) else "arrived"

    # --- messages --------------------------------------------------------------------

    def _event(self, kind: str, **fields: object) -> None:
        """Record an event at the current step and scenario time."""
        self.events.write(kind, step=self.progress.step,
                          scenario_time=self.progress.scenario_time, **fields)

    def installing(self) -> bool:
        """Whether some accepted links' flows are still on their way to the bridge."""
        return bool(self._in_flight)

    def _reply(self, conn: int, kind: str, **fields: object) -> None:
        """Send one message; the mirror of the agent on ``conn`` sees it too. While
        flows are on their way, it waits behind their batch's LINK_UP/LINK_OKs: agents
        hear everything in the order the CA decided it."""
        if self._in_flight and not self._direct:
            self._in_flight[-1].after.append((conn, kind, fields))
            return
        self.server.send(conn, p.encode(kind, **fields))
        mirror = self.mirrors.get(self.sessions.by_conn.get(conn, ""))
        if mirror is not None and kind != p.ERROR:  # an ERROR changes no agent state
            mirror.sent({"type": kind, **fields})

    def _to_node(self, node: str, kind: str, **fields: object) -> None:
        conn = self.sessions.by_node.get(node)
        if conn is not None:
            self._reply(conn, kind, **fields)

    def _hello(self, conn: int, msg: dict) -> None:
        node = self.aliases.get(msg["node"], msg["node"])
        if node not in self.node_ids:
            self._reply(conn, p.ERROR, error=f"unknown node {node!r}")
            return
        self.sessions.bind(node, conn)
        up = [i["name"] for i in msg["iphys"] if i.get("up", True)]
        self.mirrors[node] = AgentMirror(node, {i["name"]: bool(i.get("up", True))
                                                for i in msg["iphys"]})
        self.hello_seen.add(node)
        self._reply(conn, p.ID, node=node, node_id=self.node_ids[node],
                    control_ip=self.control_ips[node], links=self._links_of(node),
                    iphys=[iphy_name(i) for i in self.table.iphys_of(node)],
                    **({"directory": self.directory} if self.directory else {}))
        self._event("hello", nodes=[node], ready_iphys=up, reconnect=bool(msg.get("links")))
        if self.progress.step >= 0:
            self._send_step(node)

    def _links_of(self, node: str) -> list[dict[str, str]]:
        """``node``'s links as the table has them, from its side (ID and STEP carry them)."""
        return [{"peer": link.peer_of(node), "local_iphy": iphy_name(link.iphy_of(node)),
                 "peer_iphy": iphy_name(link.iphy_of(link.peer_of(node)))}
                for link in self.table.links_of(node)]

    def _send_step(self, node: str) -> None:
        """The current step as ``node`` must see it: visible peers and links, in one message."""
        peers = self.visible.get(node, [])
        linked = [link.peer_of(node) for link in self.table.links_of(node)]
        full = [peer for peer in peers
                if peer not in linked and not self.table.free_iphys(peer)]
        self._to_node(node, p.STEP, step=self.progress.step, time=self.progress.scenario_time,
                      peers=peers, links=self._links_of(node), full=full)

    def _announce_full(self, nodes: Iterable[str]) -> None:
        """Tell the unlinked visible peers of each node that has just run out of iPHYs."""
        news: dict[str, list[str]] = {}
        for node in sorted(set(nodes)):
            if self.table.free_iphys(node):
                continue
            for peer in self.visible.get(node, []):
                if self.table.link_between(node, peer) is None:
                    news.setdefault(peer, []).append(node)
        for peer, full in news.items():
            self._to_node(peer, p.FULL, peers=full)

    def _decide(self, conn: int, msg: dict, waited: float | None = None,
                received: float | None = None) -> tuple[int, dict, LinkEnds] | None:
        """Algorithm 1 on one request; ``waited``: seconds it was held, ``received``: when
        it was read (Unix seconds); both only for the events."""
        src, dst, src_iphy = msg["src_node"], msg["dst_node"], msg["src_iphy"]
        if self.sessions.by_conn.get(conn) != src:
            self._reply(conn, p.ERROR, error=f"LINK_REQ for {src!r} from another node's session")
            return None
        self.progress.requests += 1
        if src in self.mirrors:
            self.mirrors[src].decided(msg["req_id"])
        number = iphy_number(src_iphy)
        # -1 stands for a name that is no iPHY at all (a mistaken or hostile request).
        self._event("link_request", nodes=[src, dst], iphys=[-1 if number is None else number],
                    **{key: msg[field] for key, field in (("agent_step", "step"),
                                                         ("sent_wall", "sent"))
                       if field in msg},
                    **({"held_ms": round(waited * 1000, 3)} if waited is not None else {}),
                    **({"received_wall": round(received, 6)} if received is not None else {}))
        mirror = self.mirrors.get(dst)
        claims = {own: peer for iphy, peer in (mirror.asking() if mirror else {}).items()
                  if (own := iphy_number(iphy)) is not None}
        answer = (self.table.request(src, dst, number, claims) if number is not None else None)
        if answer is None or isinstance(answer, LinkFail):
            reason = answer.reason.value if answer is not None else "src_iphy_unknown"
            self.progress.links_failed += 1
            self._refusals.append((conn, p.LINK_FAIL, {
                "req_id": msg["req_id"], "src_node": src, "dst_node": dst,
                "src_iphy": src_iphy, "reason": reason}))
            self._event("link_fail", nodes=[src, dst], iphys=[-1 if number is None else number],
                        reason=reason)
            return None
        return conn, msg, ends_of(answer.link)

    def _establish(self, accepted: list[tuple[int, dict, LinkEnds]]) -> None:
        """Shape the batch's links, then send their flows; the answers go out once the
        bridge has applied them (``_installed``), the CA meanwhile deciding on."""
        ends = [link for _, _, link in accepted]
        batch = _Batch(accepted, {}, 0.0)
        try:
            if self.shaping is not None:
                batch.applied = self.shaping.up(ends)
        except Exception as exc:
            batch.error = exc
            self._in_flight.append(batch)
            self._installed(batch, exc)
            return
        self.watch_flows()
        batch.started = time.monotonic()
        self._in_flight.append(batch)
        try:
            self._flows.submit(ends, lambda error: self._installed(batch, error))
        except Exception as exc:  # e.g. the session with the bridge is gone
            self._installed(batch, exc)

    def watch_flows(self) -> None:
        """Read the bridge session whenever it has something, from now on (server thread).

        Not only for batches' answers: ovs-vswitchd sends an idle session echo requests
        and drops it when they go unanswered (a 250-node run waited 146 s for its hellos
        and every flow batch of its first step then failed with a broken pipe). Call it
        once the session is open, so a run may idle for as long as it likes."""
        if self._pipelined and not self._watching:
            self._flows.open()
            self.server.watch(self._flows, self._read_flows)
            self._watching = True

    def _read_flows(self) -> None:
        """The bridge answered; if the session broke, every batch on its way failed."""
        try:
            self._flows.read()
        except Exception as exc:
            self.server.unwatch(self._flows)
            self._watching = False
            for batch in [b for b in self._in_flight if not b.done]:
                self._installed(batch, exc)

    def _installed(self, batch: _Batch, error: Exception | None) -> None:
        """A batch's flows are in (or failed): answer every finished batch at the head of
        the queue, each followed by the messages that waited for it."""
        batch.flows_ms = (time.monotonic() - batch.started) * 1000
        batch.flows_wall = time.time()
        batch.error, batch.done = error, True
        while self._in_flight and self._in_flight[0].done:
            head = self._in_flight.popleft()
            self._direct = True
            try:
                self._answer(head)
                for conn, kind, fields in head.after:
                    self._reply(conn, kind, **fields)
            finally:
                self._direct = False

    def _answer(self, batch: _Batch) -> None:
        accepted, applied = batch.accepted, batch.applied
        ends = [link for _, _, link in accepted]
        if batch.error is not None:
            exc = batch.error
            if self.shaping is not None:
                self.shaping.down(ends)
            log.error("installing %d link(s) failed: %s", len(ends), exc)
            for conn, msg, link in accepted:
                self.table.remove_link(link.a, link.b)
                self._reply(conn, p.LINK_FAIL, req_id=msg["req_id"], src_node=link.a,
                            dst_node=link.b, src_iphy=link.a_iphy, reason="flow_install_failed")
                self._event("link_fail", nodes=[link.a, link.b], iphys=link.numbers(),
                            reason=f"flow_install_failed: {exc}")
            return
        now = time.monotonic()
        self.progress.last_change = now
        # Every LINK_UP before any LINK_OK: an agent hears of each incoming link before
        # an answer to its own request frees it to ask again (from the iPHY that link took).
        for _, _, link in accepted:
            self._to_node(link.b, p.LINK_UP, peer=link.a, local_iphy=link.b_iphy,
                          peer_iphy=link.a_iphy)
        for conn, msg, link in accepted:
            self.progress.links_up += 1
            self._reply(conn, p.LINK_OK, req_id=msg["req_id"], src_node=link.a, dst_node=link.b,
                        src_iphy=link.a_iphy, dst_iphy=link.b_iphy)
            since = self._visible_since.get(frozenset((link.a, link.b)), now)
            shaped = {"properties": applied[link]} if link in applied else {}
            self._event("link_up", nodes=[link.a, link.b], iphys=link.numbers(),
                        latency_ms=round((now - since) * 1000, 3),
                        flows_ms=round(batch.flows_ms, 3), flows_wall=round(batch.flows_wall, 6),
                        batch=len(accepted), **shaped)
        self._announce_full(node for link in ends for node in (link.a, link.b))

    # --- scenario steps (posted to the server thread by the player) --------------------

    def _update_shaping(self, started: float) -> None:
        """Links that stay up get this step's properties in place (before agents hear)."""
        assert self.shaping is not None
        changed = self.shaping.update([ends_of(link) for link in self.table.links()])
        done = time.monotonic()
        for link, properties in changed.items():
            self._event("link_update", nodes=[link.a, link.b], iphys=link.numbers(),
                        latency_ms=round((done - started) * 1000, 3), properties=properties)

    def apply_step(self, step: int, scenario_time: float,
                   visible_pairs: Iterable[tuple[str, str]]) -> None:
        self._flows.wait()  # the last step's links are answered before this step is told
        now = time.monotonic()
        seen = {frozenset(pair) for pair in visible_pairs}
        self.progress = StepProgress(step=step, scenario_time=scenario_time, started=now,
                                     last_change=now)
        self._event("step", nodes=list(self.node_ids),
                    visible=sorted(tuple(sorted(pair)) for pair in seen))
        self._set_visible(step, seen, now)

    def override_visibility(self, visible_pairs: Iterable[tuple[str, str]],
                            scenario_time: float) -> None:
        """Between steps (a scenario action's cut begins or ends, at ``scenario_time``):
        the current step's links follow ``visible_pairs`` instead, without a new step;
        the events from here on carry that time."""
        self._flows.wait()
        self.progress.scenario_time = scenario_time
        self._set_visible(self.progress.step, {frozenset(p) for p in visible_pairs},
                          time.monotonic())

    def refresh_shaping(self, scenario_time: float) -> None:
        """Links that stay up get their properties again (a degrade began or ended at
        ``scenario_time``, which the events from here on carry)."""
        if self.shaping is not None:
            self.progress.scenario_time = scenario_time
            self._update_shaping(time.monotonic())

    def declare_dead(self, nodes: Iterable[str], reason: str) -> list[Link]:
        """Nodes that are gone for the rest of the run (their host stopped answering):
        every link of theirs comes down now, as visibility lost (a `link_down` event
        each, with ``reason``), on the hosts that are left; their pairs stay out of
        later steps. Returns the links taken down."""
        new = [node for node in nodes if node in self.node_ids and node not in self.dead]
        self.dead.update((node, reason) for node in new)
        before = set(self.table.links())
        if new and self.progress.step >= 0:
            self._flows.wait()
            self._set_visible(self.progress.step, self._seen, time.monotonic())
        return sorted(before - set(self.table.links()), key=lambda link: link.pair)

    def _set_visible(self, step: int, seen: set[frozenset[str]], now: float) -> None:
        self._seen = seen
        if self.dead:
            seen = {pair for pair in seen if not pair & self.dead.keys()}
        pairs = seen
        if self.shaping is not None:
            self.shaping.set_step(step)
            pairs = {frozenset(pair) for pair in self.shaping.linkable(
                step, (tuple(sorted(pair)) for pair in seen))}
        self._visible_since = {pair: self._visible_since.get(pair, now) for pair in pairs}
        lost = self.table.set_visibility(tuple(sorted(pair)) for pair in pairs)
        ends = [ends_of(link) for link in lost]
        if ends:
            self.installer.remove(ends)
            self.progress.last_change = time.monotonic()
            for link in ends:
                self.progress.links_down += 1
                dead = [n for n in (link.a, link.b) if n in self.dead]
                self._event("link_down", nodes=[link.a, link.b], iphys=link.numbers(),
                            latency_ms=round((time.monotonic() - now) * 1000, 3),
                            **({"reason": f"{' and '.join(dead)} dead: "
                                          f"{self.dead[dead[0]]}"} if dead else {}))
        if self.shaping is not None:
            # Links that stay up first: their traffic flows; lost links' flows are gone.
            self._update_shaping(now)
            self.shaping.down(ends)
        self.visible = {node: [] for node in self.node_ids}
        for pair in pairs:
            a, b = sorted(pair)
            self.visible[a].append(b)
            self.visible[b].append(a)
        for node, peers in self.visible.items():
            peers.sort()
            if node not in self.dead:
                self._send_step(node)
        if self._held:
            self._decide_held()
