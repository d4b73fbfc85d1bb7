"""Making CA decisions real: flow pairs on the main bridge, one ovs-ofctl bundle per batch."""

from __future__ import annotations

from collections.abc import Callable

from nestednet.adapters import openflow
from nestednet.ca.assistant import LinkEnds

PortOf = Callable[[str, str], int]
"""(scenario node, iPHY name) -> OpenFlow port number on the main bridge."""
CookieOf = Callable[[int, int], int]
"""(port a, port b) -> the cookie that marks this link's flows."""


class MainBridgeInstaller:
    """Installs and removes the flow pair of each link, a whole batch at a time."""

    def __init__(self, bridge: str, port_of: PortOf, cookie_of: CookieOf) -> None:
        self.bridge = bridge
        self.port_of = port_of
        self.cookie_of = cookie_of

    def _ports(self, link: LinkEnds) -> tuple[int, int]:
        return self.port_of(link.a, link.a_iphy), self.port_of(link.b, link.b_iphy)

    def install(self, links: list[LinkEnds]) -> None:
        lines: list[str] = []
        for link in links:
            a, b = self._ports(link)
            lines += openflow.patch_lines(self.cookie_of(a, b), a, b)
        openflow.apply(self.bridge, lines)

    def remove(self, links: list[LinkEnds]) -> None:
        openflow.apply(self.bridge, [openflow.delete_line(self.cookie_of(*self._ports(link)))
                                     for link in links])
