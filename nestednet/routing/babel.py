"""`--routing babel`: babeld (RFC 8966) in every component of every node.

Babel suits the inter-node net: it looks like one subnet (192.168.2.0/24), but only
iPHYs the CA linked hear each other, so links are not transitive. babeld's
`type wireless` interfaces assume exactly that (no split horizon); the intra-node net is
a real switch (`type wired`).

Link quality (ETX from hello loss) is off: every inter-node hop costs the same once its
neighbour is heard, so routes follow hop count. With it on, a lab's hellos arrive late
whenever the host is busy, and every late one moved a metric: a 48 x 4 lab whose 72
links all came up within 50 ms, then never changed, made 13,258 route changes and
settled only after 47 s (half of them after the first 5 s). Without it: 2,794, 92 % in
the first 5 s (`scripts/bench/babel_cost.py --nodes 48 --settle 90`, 2026-11-27, one run
each, host 34 % busy). The price: babel no longer steers around a link whose model loses
packets (the loss itself is still applied to the traffic), and a new neighbour counts only
once two of its hellos are in, so the first route over a new link comes later: in
tests/system/test_actions.py's 4-node ring, an iperf n1 -> n2 started 2.47 s after the
links came up met "Network is unreachable" in 2 of 4 runs (never with link quality on),
and n1 -> n3 was answered again 1.9-2.3 s after a partition ended (5 runs).

* GNAB: babeld on `intra`; it announces its node address (the /32 on its loopback)
  and nothing else, and installs the routes it learns with that address as
  preferred source, so traffic it starts comes back to the node.
* iPHY: babeld on `intra` and `inter`; it announces nothing of its own and forwards.
  Its routes prefer its inter-node address as source: that is the source of the ICMP
  errors it sends (traceroute's hops), and unlike its intra address (the same in
  every node, so a node on the way back would drop it as its own) it is unique.
* Everywhere: only node addresses are accepted (`in` filters), so the paper's
  192.168.x addresses keep their meaning; babeld does not touch kernel settings
  (`skip-kernel-setup`: /proc/sys is read-only in a container, and the lab wrote
  what routing needs when it wired the component).

Hellos every HELLO_S seconds on the inter-node net let a lost link be noticed in a
few seconds (babeld counts a neighbour gone after several missed hellos).

No hysteresis (`smoothing-half-life 0`; babeld's default is 4 s). A link the CA adds
starts with a bad link-quality estimate, and babeld compares routes by a smoothed
metric that forgets it slowly: seen 12571 for a route of metric 800 ten seconds
after its link appeared. Nodes then keep the longer path they had, and when a link
on it is cut, every one of them loses its route at once with only infeasible
alternatives left, and waits for a sequence-number request to reach the source and
come back (Babel's starvation). Measured on a 5-node line with a ring link, cutting
n2-n3 (issue 17, in namespaces with this configuration): n1 -> n3 went 8.1-8.5 s
without answers with the default (5 runs), 3.5-5.1 s without smoothing (10 runs),
because the nodes next to the cut move to the ring while the cut link's quality
falls, before the neighbour is declared lost. Our
links change only when the CA or the user changes them, so there is little
oscillation for hysteresis to damp. (Measured with link quality on; without it a metric
changes only when a neighbour is found or lost.)
"""

from __future__ import annotations

from nestednet.model.addressing import AddressPlan
from nestednet.model.topology import CHILD_INTER_IF, CHILD_INTRA_IF
from nestednet.routing.strategy import RoutingStrategy

HELLO_S = 0.5
"""Hello interval on the inter-node net (babeld's default is 4 s)."""
WIRED_HELLO_S = 1.0
SMOOTHING_HALF_LIFE_S = 0
"""Route-switching hysteresis, off (see the module docstring)."""
LOG_FILE = "/run/nestednet-babeld.log"


def statements(plan: AddressPlan, node: int, component: int) -> list[str]:
    """babeld configuration statements for one component (see babeld(8))."""
    net = plan.node
    own = plan.node_address(node).ip
    lines = ["skip-kernel-setup true", f"smoothing-half-life {SMOOTHING_HALF_LIFE_S}",
             f"interface {CHILD_INTRA_IF} type wired hello-interval {WIRED_HELLO_S:g}"]
    if component:
        lines.append(f"interface {CHILD_INTER_IF} type wireless hello-interval {HELLO_S:g} "
                     "link-quality false")
    lines += [f"in ip {net} ge 32 allow", "in deny"]
    if component == 0:
        lines += [f"redistribute local ip {own}/32 allow",
                  f"install ip {net} ge 32 pref-src {own}"]
    else:
        lines.append(f"install ip {net} ge 32 pref-src {plan.inter_address(node, component).ip}")
    lines += ["redistribute local deny", "redistribute deny"]
    return lines


class BabelRouting(RoutingStrategy):
    name = "babel"
    summary = "babeld in every component; routes over any number of hops"

    def daemon(self, plan: AddressPlan, node: int, component: int) -> list[str]:
        # No pid file (-I ""): babeld refuses to start over an old one, and a component
        # restarted by `swap --restart` keeps its files. No state file either (-S "").
        command = ["babeld", "-D", "-I", "", "-L", LOG_FILE, "-S", ""]
        for line in statements(plan, node, component):
            command += ["-C", line]
        return command
