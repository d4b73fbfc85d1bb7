"""Making CA decisions real: flow pairs on the main bridge, one OpenFlow batch per round,
submitted without waiting (the CA thread goes on deciding while the bridge applies it);
in a lab over several hosts, a batch's flows on every host its links touch
(`HostsInstaller`)."""

from __future__ import annotations

import contextlib
import logging
import select
from collections.abc import Callable

from nestednet.adapters import openflow
from nestednet.adapters.ovsdb import HOST_RUNDIR
from nestednet.ca.assistant import LinkEnds
from nestednet.errors import EnvironmentProblem
from nestednet.lab.multihost import HostLinks
from nestednet.model import link_rules
from nestednet.model import topology as topo

log = logging.getLogger("nestednet.ca")

PortOf = Callable[[str, str], int]
"""(scenario node, iPHY name) -> OpenFlow port number on the main bridge."""
CookieOf = Callable[[int, int], int]
"""(port a, port b) -> the cookie that marks this link's flows."""
EndpointOf = Callable[[str, str], topo.Endpoint]
"""(scenario node, iPHY name) -> the lab endpoint."""
HostsDone = Callable[[str, int, dict[str, float]], None]
"""(op "add" or "remove", links in the batch, host -> seconds until its flows were in)."""


SESSIONS = 8
"""OpenFlow sessions a MainBridgeInstaller spreads its batches over. ovs-vswitchd's main
thread reads at most 50 messages from one session per pass of its loop, and on the
userspace datapath every pass also polls every port: with 1,000 ports (a 250 x 4 lab) a
pass took ~6.5 ms here, so one session put a 2,000-link batch in in 450 ms and 8 put it
in in 160 ms (docs/benchmarks.md, "Flows over several sessions")."""
PASS_MESSAGES = 50
"""A part of a batch fills one pass of the switch's loop (a link added is two flow-mods,
one removed is one): a smaller batch stays on one session, a larger one goes over as
many as it fills."""


class MainBridgeInstaller:
    """Installs and removes the flow pair of each link, a whole batch at a time.

    Over ``sessions`` persistent OpenFlow sessions (openflow.Channel), opened on first
    use and kept for the life of the installer: the CA changes flows many times per
    step, and a big batch is split over the sessions so the switch reads its parts in
    the same passes (SESSIONS). Splitting needs no ordering between sessions: the links
    in flight never share a port or a cookie (an iPHY is in one link at a time, and
    `remove` first waits for every batch sent before it).
    """

    def __init__(self, bridge: str, port_of: PortOf, cookie_of: CookieOf,
                 rundir: str = HOST_RUNDIR, *, sessions: int = SESSIONS) -> None:
        if sessions < 1:
            raise ValueError(f"sessions must be at least 1, not {sessions}")
        self.bridge = bridge
        self.rundir = rundir
        self.port_of = port_of
        self.cookie_of = cookie_of
        self.sessions = sessions
        self._channels: list[openflow.Channel] = []
        self._poll: select.epoll | None = None
        self._next = 0

    @property
    def channels(self) -> list[openflow.Channel]:
        """The sessions, opened on first use and again after one broke; ``fileno`` is an
        epoll over their sockets, so a caller watches one descriptor for all."""
        if not self._channels:
            try:
                for _ in range(self.sessions):
                    self._channels.append(openflow.Channel(self.bridge, rundir=self.rundir))
                self._poll = select.epoll()
                for channel in self._channels:
                    self._poll.register(channel.fileno(), select.EPOLLIN)
            except BaseException:
                self.close()
                raise
        return self._channels

    def _cookie_and_ports(self, link: LinkEnds) -> tuple[int, int, int]:
        a, b = self.port_of(link.a, link.a_iphy), self.port_of(link.b, link.b_iphy)
        return self.cookie_of(a, b), a, b

    def open(self) -> None:
        """Open the OpenFlow sessions now: the first one loads os-ken (~0.5 s here), which
        must not land on the first link of a run. Call it on the thread that will use
        the installer: a thread that imported os-ken cannot be joined afterwards."""
        _ = self.channels

    def _send(self, items: list, kind: str, done: Callable[[list[str]], None]) -> None:
        """``items`` (link pairs to add, or cookies to delete) in parts of PASS_MESSAGES
        over the sessions, starting after the last one used; ``done(errors)`` once the
        switch has answered every part."""
        channels = self.channels
        per_part = PASS_MESSAGES // 2 if kind == "add" else PASS_MESSAGES
        count = min(len(channels), max(1, -(-len(items) // per_part)))
        size = -(-len(items) // count)
        parts = [items[k:k + size] for k in range(0, len(items), size)]
        waiting, errors = [len(parts)], []

        def answered(refused: list[str]) -> None:
            errors.extend(refused)
            waiting[0] -= 1
            if not waiting[0]:
                done(errors)

        for part in parts:
            channel = channels[self._next % len(channels)]
            self._next += 1
            channel.submit(answered, **{kind: part})

    def install(self, links: list[LinkEnds]) -> None:
        self._change("add", [self._cookie_and_ports(link) for link in links])

    def submit(self, links: list[LinkEnds], done: Callable[[Exception | None], None]) -> None:
        """Send the batch's flows without waiting; ``done(None)`` once the bridge has
        them all, ``done(error)`` if it refused any (called from ``read`` or ``wait``).
        Batches may finish out of order: each part goes over its own session."""
        if not links:
            done(None)
            return
        self._send([self._cookie_and_ports(link) for link in links], "add",
                   lambda errors: done(self._refused(errors) if errors else None))

    def _refused(self, errors: list[str]) -> EnvironmentProblem:
        return EnvironmentProblem(f"bridge {self.bridge} refused flow changes: "
                                  + "; ".join(errors[:5]))

    def _change(self, kind: str, items: list) -> None:
        """``items`` in, once every batch sent before them is; an error reply raises."""
        if not items:
            return
        self.wait()
        outcome: list[list[str]] = []
        self._send(items, kind, outcome.append)
        self.wait()
        if outcome[0]:
            raise self._refused(outcome[0])

    def fileno(self) -> int:
        """The sessions' epoll; ValueError when none is open (a selector then finds this
        installer by identity to unregister it), so watching never opens one."""
        if self._poll is None:
            raise ValueError(f"no OpenFlow session with bridge {self.bridge}")
        return self._poll.fileno()

    def read(self) -> None:
        """The bridge has answered: complete the batches it has applied. A session the
        bridge closed raises here, and the next batch opens new ones."""
        try:
            for channel in self._channels:
                channel.read()
        except Exception:
            self.close()
            raise

    def wait(self) -> None:
        """Until every submitted batch is complete."""
        for channel in self._channels:
            channel.wait()

    def in_flight(self) -> int:
        return sum(channel.in_flight() for channel in self._channels)

    def remove(self, links: list[LinkEnds]) -> None:
        self._change("delete", [self._cookie_and_ports(link)[0] for link in links])

    def close(self) -> None:
        for channel in self._channels:
            with contextlib.suppress(OSError):
                channel.close()
        self._channels = []
        if self._poll is not None:
            self._poll.close()
            self._poll = None


class HostsInstaller:
    """A FlowInstaller for a lab over several hosts (nestednet.lab.multihost.HostLinks).

    One persistent OpenFlow session per host's main bridge (openflow.Channel, as
    MainBridgeInstaller keeps for one bridge; here over TCP or SSL to the listener the
    lab gave the bridge on the host's address, its datapath id checked).
    A batch is sent to every host its links touch before any answer is awaited, so the
    hosts apply it in parallel without a thread per host; the call returns once every
    host has applied its part (its barrier reply), so an agent hears "linked" only when
    both ends' hosts forward. A batch is all or nothing over the hosts
    (`openflow.apply_all`: staged in a bundle on each, then committed on all). The rules
    and cookies are those `nestednet link` makes
    (nestednet.model.tunnels.DataPlane.link_flows). ``done`` hears how long each host
    took: how far apart the hosts changed is what a run over several hosts adds to a
    step, and goes into the events (``host_flows``).
    """

    def __init__(self, links: HostLinks, endpoint_of: EndpointOf, done: HostsDone,
                 timeout: float = 10.0) -> None:
        assert links.dp is not None and links.hosts is not None
        self.links = links
        self.dp = links.dp
        self.endpoint_of = endpoint_of
        self.done = done
        self.timeout = timeout
        self._channels: dict[str, openflow.Channel] = {}
        self.lost: set[str] = set()
        """Hosts that stopped answering (`lose`): their part of any batch is left out."""

    def lose(self, host: str) -> None:
        """``host`` is gone (nestednet.lab.host_watch): its session is dropped and no batch
        waits for it again; the flows there went with it or are removed by `delete` /
        `cleanup --hosts` when it is back."""
        self.lost.add(host)
        self._drop(host)

    def open(self) -> None:
        """A session with every host's bridge now (the first loads os-ken, ~0.5 s): call
        it on the thread that will use the installer, as MainBridgeInstaller.open says."""
        for host in self.dp.tunnels:
            self._channel(host)

    def _channel(self, host: str, timeout: float | None = None) -> openflow.Channel:
        if host not in self._channels:
            assert self.links.hosts is not None
            self._channels[host] = self.links.hosts[host].channel(
                self.links.bridge, self.dp.openflow_port, self.dp.dpid(host),
                timeout=self.timeout if timeout is None else timeout)
        return self._channels[host]

    def _ends(self, link: LinkEnds) -> link_rules.Link:
        return (self.endpoint_of(link.a, link.a_iphy), self.endpoint_of(link.b, link.b_iphy))

    def install(self, links: list[LinkEnds]) -> None:
        work: dict[str, openflow.Batch] = {}
        for a, b in map(self._ends, links):
            for flow in self.dp.link_flows(a, b):
                work.setdefault(flow.host, ([], [], []))[0].append(
                    (self.links.cookie(a, b), flow.in_port, flow.out_port, flow.match_tag,
                     flow.push_tag))
        self._apply("add", len(links), work)

    def remove(self, links: list[LinkEnds]) -> None:
        work: dict[str, openflow.Batch] = {}
        for a, b in map(self._ends, links):
            for host in self.dp.hosts_of_link(a, b):
                work.setdefault(host, ([], [], []))[1].append(self.links.cookie(a, b))
        try:
            self._apply("remove", len(links), work)
        except EnvironmentProblem as exc:
            if "no answer" not in str(exc) and not isinstance(exc.__cause__, OSError):
                raise
            self._remove_each(len(links), work, exc)

    RETRY_TIMEOUT = 2.0
    """Seconds each host gets when a removal is retried host by host."""

    def _remove_each(self, count: int, work: dict[str, openflow.Batch],
                     first: Exception) -> None:
        """A host did not answer a removal (lost, before the host watch has said so): the
        sessions in it are dropped (their open bundles with them) and each host gets its
        part alone, shortly; a host that still does not answer keeps those flows (they
        are on a host that is gone; `delete` and `cleanup --hosts` remove them there).
        A link taken down is down wherever its flows can be removed: the run goes on."""
        log.warning("removing flows: %s; trying host by host", first)
        for host in work:
            self._drop(host)
        finished: dict[str, float] = {}
        for host, batch in sorted(work.items()):
            if host in self.lost:
                continue
            try:
                channel = self._channel(host, timeout=self.RETRY_TIMEOUT)
                done, refused = openflow.apply_all({host: channel}, {host: batch},
                                                   self.RETRY_TIMEOUT)
            except EnvironmentProblem as exc:
                log.warning("host %s keeps the flows of %d link(s) taken down: %s", host,
                            count, exc)
                self._drop(host)
                continue
            if refused:
                raise EnvironmentProblem(f"host {host} refused flow changes: "
                                         + "; ".join(refused[host][:3]))
            finished.update(done)
        self.done("remove", count, finished)

    def _drop(self, host: str) -> None:
        channel = self._channels.pop(host, None)
        if channel is not None:
            with contextlib.suppress(Exception):
                channel.close()

    def _apply(self, op: str, count: int, work: dict[str, openflow.Batch]) -> None:
        """Send each host its part, then read the hosts' answers as they come."""
        work = {host: batch for host, batch in work.items() if host not in self.lost}
        if not work:
            return
        channels = {host: self._channel(host) for host in work}
        finished, refused = openflow.apply_all(channels, work, self.timeout)
        if refused:
            raise EnvironmentProblem("; ".join(f"host {h} refused flow changes: "
                                               + "; ".join(e[:3]) for h, e in refused.items()))
        self.done(op, count, finished)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels = {}
