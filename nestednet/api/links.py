"""`Link`: one inter-node link of a lab, its properties per direction, and how to change
or remove it (`Lab.link` makes one, `Lab.links` lists them).

Properties are unit strings, as on the command line: rate "20Mbit" / "500kbit",
delay and jitter "5ms" / "800us", loss "1%". Each direction is shaped on the egress
toward its receiving iPHY (HTB for the rate, netem for the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nestednet.errors import InputError
from nestednet.lab import shaping
from nestednet.model import link_rules
from nestednet.model import topology as topo
from nestednet.model.link_properties import LinkProperties, PropertyError, parse_properties
from nestednet.model.shaping_policy import FULL

if TYPE_CHECKING:
    from nestednet.api.lab import Lab

LinkValue = str | None
"""A property as a unit string ("20Mbit", "5ms", "1%"), or None: not given."""

DIRECTIONS = (shaping.BOTH, shaping.A_TO_B, shaping.B_TO_A)


def properties_given(**values: LinkValue) -> dict[str, str]:
    """The properties given (not None), checked to be unit strings."""
    given = {}
    for name, value in values.items():
        if value is None:
            continue
        if not isinstance(value, str):
            raise InputError(f"{name}={value!r}: give a string with its unit, e.g. "
                             + {"rate": "'20Mbit'", "loss": "'1%'"}.get(name, "'5ms'"))
        given[name] = value
    return given


def parse_link_properties(given: dict[str, str], prefix: str = "") -> LinkProperties:
    """`LinkProperties` from unit strings; InputError naming the field (``prefix`` goes
    before its name: the command line says ``--rate``)."""
    try:
        return parse_properties(given)
    except PropertyError as exc:
        raise InputError(f"{prefix}{exc.field}: {exc}") from None


@dataclass(frozen=True)
class Direction:
    """One direction of a link: what was asked for and what the kernel holds."""

    source: str
    """The sending iPHY, ``n1:iphy1``."""
    target: str
    """The receiving iPHY, whose main-bridge port shapes this direction."""
    configured: LinkProperties | None
    """None: unshaped."""
    kernel: dict[str, Any] | None
    """What tc holds on the port (``rate_bps``, ``delay_us``, ``jitter_us``, ``loss_pct``,
    ``netem_limit``), None when it holds no tree of ours."""
    mode: str | None = None
    """The shaping mode it was configured with (full or rate-only); None: unshaped."""


@dataclass(frozen=True)
class Change:
    """A direction `Link.set` changed: its name (``n1:iphy1->n2:iphy1``) and new values."""

    name: str
    properties: LinkProperties


class Link:
    """The link between iPHYs ``a`` and ``b`` (the lower endpoint first)."""

    def __init__(self, lab: Lab, a: topo.Endpoint, b: topo.Endpoint,
                 row: dict[str, Any] | None = None) -> None:
        self._lab = lab
        self.ends: tuple[topo.Endpoint, topo.Endpoint] = (a, b)
        self._row = row

    @property
    def a(self) -> str:
        """The lower endpoint, ``n1:iphy1``."""
        return str(self.ends[0])

    @property
    def b(self) -> str:
        """The other endpoint."""
        return str(self.ends[1])

    @property
    def a_address(self) -> str:
        """``a``'s inter-node address."""
        return str(self._lab._plan.inter_address(self.ends[0].node, self.ends[0].iphy).ip)

    @property
    def b_address(self) -> str:
        """``b``'s inter-node address."""
        return str(self._lab._plan.inter_address(self.ends[1].node, self.ends[1].iphy).ip)

    @property
    def broken(self) -> str | None:
        """Why it carries nothing (an end's node is dead), as read by `Lab.links`."""
        return self._listed().get("broken")

    @property
    def directions(self) -> list[Direction]:
        """Both directions, a to b first, as read by `Lab.links` (read now when this
        handle has no reading yet; `refresh` reads again)."""
        row = self._listed()
        return [Direction(d["from"], d["to"],
                          None if d["configured"] is None else LinkProperties(**d["configured"]),
                          d["kernel"], d.get("mode")) for d in row.get("directions", [])]

    def refresh(self) -> Link:
        """This link as it is now, configured and kernel-held properties read again
        (InputError when it is gone)."""
        for link in self._lab.links():
            if link == self:
                return link
        raise InputError(f"no link {self.a} <-> {self.b}")

    def _listed(self) -> dict[str, Any]:
        if self._row is None:
            self._row = self.refresh()._row
        assert self._row is not None
        return self._row

    def as_dict(self) -> dict[str, Any]:
        """What `nestednet link list --json` prints for it."""
        return dict(self._listed())

    def set(self, *, rate: LinkValue = None, delay: LinkValue = None,
            jitter: LinkValue = None, loss: LinkValue = None, direction: str = shaping.BOTH,
            shaping_mode: str = FULL, keep_order: bool = False) -> list[Change]:
        """Change the given properties in place (tc change: flows keep running); the rest
        keep their values. ``direction``: both, a-to-b or b-to-a. Returns what changed."""
        given = properties_given(rate=rate, delay=delay, jitter=jitter, loss=loss)
        if not given:
            raise InputError("nothing to set", hint="give rate, delay, jitter or loss")
        parse_link_properties(given)
        if direction not in DIRECTIONS:
            raise InputError(f"unknown direction {direction!r} (choose from "
                             f"{', '.join(DIRECTIONS)})")
        changed = shaping.set_link(self._lab._lab_links(),
                                   self._lab._shaper(shaping_mode, keep_order), *self.ends,
                                   given, direction)
        self._row = None
        return [Change(d.name, d.properties) for d in changed]

    def remove(self) -> None:
        """Take it down: its flows first, then its shaping."""
        shaping.delete_link(self._lab._lab_links(), self._lab._shaper(FULL), *self.ends)
        self._row = None

    def __repr__(self) -> str:
        return f"<Link {self.a} <-> {self.b}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Link) and other._lab is self._lab and other.ends == self.ends

    def __hash__(self) -> int:
        return hash((id(self._lab), self.ends))


def link_from_row(lab: Lab, link: link_rules.Link, row: dict[str, Any]) -> Link:
    return Link(lab, link[0], link[1], row)
