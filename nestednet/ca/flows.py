"""Making CA decisions real: flow pairs on the main bridge, one OpenFlow batch per round,
submitted without waiting (the CA thread goes on deciding while the bridge applies it);
in a lab over several hosts, a batch's flows on every host its links touch
(`HostsInstaller`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from nestednet.adapters import openflow
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


class MainBridgeInstaller:
    """Installs and removes the flow pair of each link, a whole batch at a time.

    Uses a persistent OpenFlow session (openflow.Channel), opened on first use and
    kept for the life of the installer: the CA changes flows many times per step.
    """

    def __init__(self, bridge: str, port_of: PortOf, cookie_of: CookieOf,
                 rundir: str = "/var/run/openvswitch") -> None:
        self.bridge = bridge
        self.rundir = rundir
        self.port_of = port_of
        self.cookie_of = cookie_of
        self._channel: openflow.Channel | None = None

    @property
    def channel(self) -> openflow.Channel:
        """The session, opened on first use and again after the last one broke."""
        if self._channel is None:
            self._channel = openflow.Channel(self.bridge, rundir=self.rundir)
        return self._channel

    def _cookie_and_ports(self, link: LinkEnds) -> tuple[int, int, int]:
        a, b = self.port_of(link.a, link.a_iphy), self.port_of(link.b, link.b_iphy)
        return self.cookie_of(a, b), a, b

    def open(self) -> None:
        """Open the OpenFlow session now: the first one loads os-ken (~0.5 s here), which
        must not land on the first link of a run. Call it on the thread that will use
        the installer: a thread that imported os-ken cannot be joined afterwards."""
        _ = self.channel

    def install(self, links: list[LinkEnds]) -> None:
        self.channel.change(add=[self._cookie_and_ports(link) for link in links])

    def submit(self, links: list[LinkEnds], done: Callable[[Exception | None], None]) -> None:
        """Send the batch's flows without waiting; ``done(None)`` once the bridge has
        them, ``done(error)`` if it refused any (called from ``read`` or ``wait``)."""
        bridge = self.bridge

        def finished(errors: list[str]) -> None:
            done(EnvironmentProblem(f"bridge {bridge} refused flow changes: "
                                             + "; ".join(errors[:5])) if errors else None)

        self.channel.submit(finished, add=[self._cookie_and_ports(link) for link in links])

    def fileno(self) -> int:
        """The open session's; ValueError when there is none (a selector then finds
        this installer by identity to unregister it), so watching never opens one."""
        if self._channel is None:
            raise ValueError(f"no OpenFlow session with bridge {self.bridge}")
        return self._channel.fileno()

    def read(self) -> None:
        """The bridge has answered: complete the batches it has applied. A session the
        bridge closed raises here, and the next batch opens a new one."""
        try:
            self.channel.read()
        except Exception:
            self.close()
            raise

    def wait(self) -> None:
        """Until every submitted batch is complete."""
        if self._channel is not None:
            self._channel.wait()

    def in_flight(self) -> int:
        return self._channel.in_flight() if self._channel is not None else 0

    def remove(self, links: list[LinkEnds]) -> None:
        self.channel.change(delete=[self._cookie_and_ports(link)[0] for link in links])

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


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
