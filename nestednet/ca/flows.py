"""Making CA decisions real: flow pairs on the main bridge, one OpenFlow batch per round,
submitted without waiting (the CA thread goes on deciding while the bridge applies it);
in a lab over several hosts, a batch's flows on every host its links touch
(`HostsInstaller`)."""

from __future__ import annotations

from collections.abc import Callable

from nestednet.adapters import openflow
from nestednet.ca.assistant import LinkEnds
from nestednet.errors import EnvironmentProblem
from nestednet.lab.multihost import HostLinks
from nestednet.model import link_rules
from nestednet.model import topology as topo

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

    def __init__(self, bridge: str, port_of: PortOf, cookie_of: CookieOf) -> None:
        self.bridge = bridge
        self.port_of = port_of
        self.cookie_of = cookie_of
        self._channel: openflow.Channel | None = None

    @property
    def channel(self) -> openflow.Channel:
        if self._channel is None:
            self._channel = openflow.Channel(self.bridge)
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
        return self.channel.fileno()

    def read(self) -> None:
        """The bridge has answered: complete the batches it has applied."""
        self.channel.read()

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

    Each batch is one bundle per host its links touch, the hosts in parallel
    (`HostLinks.apply_step`, the same flows and cookies `nestednet link` makes), and
    returns once every host has applied its bundle, so an agent hears "linked" only
    when both ends' hosts forward. ``done`` hears how long each host took: how far apart
    the hosts changed is what a run over several hosts adds to a step's cost, and goes
    into the events (``host_flows``). Not pipelined: the CA waits for each batch (one
    `ovs-ofctl` process per host; a persistent OpenFlow session per host, as
    MainBridgeInstaller keeps for one bridge, is the next step).
    """

    def __init__(self, links: HostLinks, endpoint_of: EndpointOf, done: HostsDone) -> None:
        self.links = links
        self.endpoint_of = endpoint_of
        self.done = done

    def _ends(self, links: list[LinkEnds]) -> list[link_rules.Link]:
        return [(self.endpoint_of(link.a, link.a_iphy), self.endpoint_of(link.b, link.b_iphy))
                for link in links]

    def open(self) -> None:
        """Nothing to open ahead: each batch starts its own `ovs-ofctl` per host."""

    def install(self, links: list[LinkEnds]) -> None:
        if links:
            self.done("add", len(links), self.links.apply_step(self._ends(links), []))

    def remove(self, links: list[LinkEnds]) -> None:
        if links:
            self.done("remove", len(links), self.links.apply_step([], self._ends(links)))

    def close(self) -> None:
        """Nothing held between batches."""
