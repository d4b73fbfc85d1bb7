"""The routing strategies by name: the one place that picks one.

Another protocol (FRR's babeld/ospfd, bird) or a user's own daemon is one module
implementing `nestednet.routing.strategy.RoutingStrategy`, listed here.
"""

from __future__ import annotations

from nestednet.errors import UsageError
from nestednet.routing.babel import BabelRouting
from nestednet.routing.direct import DirectRouting
from nestednet.routing.none import NoRouting
from nestednet.routing.strategy import RoutingStrategy

STRATEGIES: dict[str, type[RoutingStrategy]] = {
    s.name: s for s in (NoRouting, DirectRouting, BabelRouting)}
DEFAULT = "none"


def named(name: str) -> RoutingStrategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise UsageError(f"unknown routing {name!r}",
                         hint=f"one of {', '.join(STRATEGIES)}") from None
