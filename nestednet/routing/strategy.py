"""The interface every routing strategy implements (pure: it only describes).

Routing is about node addresses (nestednet.model.addressing: one /32 per node on its
GNAB's loopback). A strategy decides how routes to them appear in each component:
none (the user's code installs them), direct (the GNAB agent, on link events), or a
routing daemon in every component (babel). A protocol such as FRR or bird, or a
user's own daemon, is one more module with a `daemon()` command line.
"""

from __future__ import annotations

import abc

from nestednet.model.addressing import AddressPlan
from nestednet.model.topology import component_name

ROUTE_CAPS = frozenset({"NET_ADMIN"})
"""What a component must hold for a strategy that installs routes in it."""


class RoutingStrategy(abc.ABC):
    name: str
    summary: str
    needs_caps: frozenset[str] = ROUTE_CAPS

    def environment(self, plan: AddressPlan, node: int, component: int) -> dict[str, str]:
        """What the component's processes learn about routing (the GNAB agent reads it)."""
        return {"NESTEDNET_ROUTING": self.name,
                "NESTEDNET_NODE_ADDRESS": str(plan.node_address(node).ip),
                "NESTEDNET_NODE_NET": str(plan.node)}

    @abc.abstractmethod
    def daemon(self, plan: AddressPlan, node: int, component: int) -> list[str] | None:
        """The command started in the component once it is wired (None: nothing)."""


def role(component: int) -> str:
    return "gnab" if component == 0 else "iphy"


def label(node: int, component: int) -> str:
    return f"n{node}:{component_name(component)}"
