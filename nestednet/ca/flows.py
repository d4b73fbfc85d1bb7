"""Making CA decisions real: flow pairs on the main bridge, one OpenFlow batch per round,
submitted without waiting (the CA thread goes on deciding while the bridge applies it)."""

from __future__ import annotations

from collections.abc import Callable

from nestednet.adapters import openflow
from nestednet.ca.assistant import LinkEnds
from nestednet.errors import EnvironmentProblem

PortOf = Callable[[str, str], int]
"""(scenario node, iPHY name) -> OpenFlow port number on the main bridge."""
CookieOf = Callable[[int, int], int]
"""(port a, port b) -> the cookie that marks this link's flows."""


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
