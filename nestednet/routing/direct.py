"""`--routing direct`: the thesis's behaviour (§3.3-3.4). On LINK_OK/LINK_UP the GNAB
agent "adds this link to its routing table and forwards it to its components": a
route to the peer node's address through the iPHY holding the link, in the GNAB and
in every iPHY of the node; LINK_DOWN removes it. Only direct neighbours are
reachable: nothing is relayed.

No daemon is started by the lab: the agent in the GNAB does the work
(nestednet.agent.routes), and a small route listener runs in each iPHY (the same
module), started by the component entrypoint when NESTEDNET_ROUTING is `direct`.
"""

from __future__ import annotations

from nestednet.model.addressing import AddressPlan
from nestednet.routing.strategy import RoutingStrategy


class DirectRouting(RoutingStrategy):
    name = "direct"
    summary = "the GNAB agent installs a route per link (one hop, no relaying)"

    def environment(self, plan: AddressPlan, node: int, component: int) -> dict[str, str]:
        """The route listener in each iPHY accepts route sets from the GNAB only."""
        return {**super().environment(plan, node, component),
                "NESTEDNET_GNAB_INTRA": str(plan.intra_address(0).ip)}

    def daemon(self, plan: AddressPlan, node: int, component: int) -> list[str] | None:
        return None
