"""`--routing none`: nothing is installed; the user's code routes (it may: components
hold CAP_NET_ADMIN in their own namespaces unless `--component-caps` says otherwise)."""

from __future__ import annotations

from nestednet.model.addressing import AddressPlan
from nestednet.routing.strategy import RoutingStrategy


class NoRouting(RoutingStrategy):
    name = "none"
    summary = "nothing installed: your code routes"
    needs_caps = frozenset()

    def daemon(self, plan: AddressPlan, node: int, component: int) -> list[str] | None:
        return None
