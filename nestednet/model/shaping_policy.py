"""How link properties become tc shapes on a given kernel: full shaping or rate only.

Pure. A kernel without sch_netem can still shape the rate with HTB, but not delay,
jitter or loss. Dropping those silently would make a run look like it emulated a
radio link when it did not, so the policy refuses (UsageError, exit 2, naming the
missing module) unless the user chose ``rate-only`` explicitly; the run records
that choice in its events.

With netem present and mode ``full``, every tree gets a netem leaf even for a link
with no delay, so a later step that adds delay changes the leaf in place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nestednet.errors import UsageError
from nestednet.model.link_properties import LinkProperties
from nestednet.model.tcplan import LINE_RATE_BPS, LinkShape

FULL = "full"
RATE_ONLY = "rate-only"
MODES = (FULL, RATE_ONLY)
NETEM_MODULE = "sch_netem"
SHAPER = "htb"
"""HTB: present in every kernel we met (HFSC is missing here) and changeable in place."""


@dataclass(frozen=True)
class ShapingPolicy:
    """``mode`` as the user chose it; ``netem``: whether trees get netem leaves."""

    mode: str = FULL
    netem: bool = True
    keep_order: bool = False
    """Jitter without reordering (netem paced at the link rate; tcplan.netem_params)."""

    @classmethod
    def choose(cls, mode: str, netem_available: bool, *,
               keep_order: bool = False) -> ShapingPolicy:
        if mode not in MODES:
            raise UsageError(f"unknown shaping mode {mode!r} (choose from {', '.join(MODES)})")
        return cls(mode, netem_available and mode == FULL, keep_order)

    def check(self, properties: LinkProperties, where: str) -> None:
        """Refuse properties this policy cannot emulate (UsageError naming sch_netem)."""
        missing = properties.netem_properties
        if missing and self.mode == FULL and not self.netem:
            raise UsageError(
                f"{where}: {', '.join(missing)} need{'s' if len(missing) == 1 else ''} "
                f"{NETEM_MODULE}, which this kernel lacks",
                hint="pass --shaping rate-only to shape the rate only (recorded in the "
                     "events), or run on a kernel with sch_netem (scripts/kernel-vm)")

    def check_all(self, items: Iterable[tuple[str, LinkProperties | None]]) -> None:
        for where, properties in items:
            if properties is not None:
                self.check(properties, where)

    def dropped(self, properties: LinkProperties) -> tuple[str, ...]:
        """The properties a rate-only tree leaves out (empty when nothing is lost)."""
        return () if self.netem else properties.netem_properties

    def shape(self, properties: LinkProperties) -> LinkShape:
        """The tc shape of one direction; an unlimited rate becomes the line rate."""
        rate = properties.rate_bps if properties.rate_bps is not None else LINE_RATE_BPS
        if not self.netem:
            return LinkShape(rate)
        return LinkShape(rate, properties.delay_us, properties.jitter_us, properties.loss_pct,
                         self.keep_order)

    def as_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "netem": self.netem, "shaper": SHAPER,
                "keep_order": self.keep_order}
