"""A lab's shape and the names of everything in it.

Every name a user types (`n1`, `iphy2`, `n3:iphy1`) and every name the host sees
(containers, veths, bridges, namespaces) is made here, so the two never drift
apart and the 15-character Linux interface-name limit is checked in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nestednet.errors import UsageError

DEFAULT_LAB = "nn"
LAB_NAME_RE = re.compile(r"[a-z][a-z0-9]{0,7}")
RESERVED_LAB_RE = re.compile(
    r"(br|ovs|docker|veth|kube|cni|flannel|virbr|lxc|lxcbr|cali|cilium|weave|vxlan|genev|"
    r"podman|tun|tap|wg|vnet|eth|lo|nm)[0-9]*")
"""Lab names refused for new labs and by the per-host helper: ``<lab>-`` would prefix
interfaces other software makes (Docker's ``br-<hex>``, ``ovs-system``, ``kube-ipvs0``,
``cni-podman0``, ``virbr0-nic``...), which a lab's delete would then match."""
MAX_NODES = 999
"""Node numbers are at most three digits in host interface names."""
MAX_IPHYS = 99
"""iPHY numbers are at most two digits in host interface names."""
GNAB = "gnab"
IFNAME_MAX = 15

# Interface names inside a child (its own network namespace, so no lab prefix needed).
CHILD_INTRA_IF = "intra"
CHILD_INTER_IF = "inter"
CHILD_CONTROL_IF = "ctl"


def check_lab_name(name: str) -> str:
    """Lab names prefix every host interface name, so they must be short and plain."""
    if not LAB_NAME_RE.fullmatch(name):
        raise UsageError(
            f"bad lab name {name!r}: use a lower-case letter then up to 7 letters or digits "
            "(it prefixes host interface names, which Linux limits to 15 characters)")
    return name


def check_new_lab_name(name: str) -> str:
    """`check_lab_name`, and not a name whose ``<name>-`` prefixes other software's
    interfaces (RESERVED_LAB_RE): what `create` takes."""
    check_lab_name(name)
    if RESERVED_LAB_RE.fullmatch(name):
        raise UsageError(f"bad lab name {name!r}: reserved, since interfaces named "
                         f"{name}-... belong to other software (Docker, OVS, Kubernetes, "
                         "libvirt...) and a lab's delete removes its name's interfaces")
    return name


@dataclass(frozen=True)
class Shape:
    """N nodes, each with one GNAB and M iPHYs."""

    nodes: int
    iphys: int

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= MAX_NODES:
            raise UsageError(f"--nodes must be between 1 and {MAX_NODES}, not {self.nodes}")
        if not 1 <= self.iphys <= MAX_IPHYS:
            raise UsageError(f"--iphys must be between 1 and {MAX_IPHYS}, not {self.iphys}")

    def node_numbers(self) -> range:
        return range(1, self.nodes + 1)

    def components(self) -> list[str]:
        return [GNAB, *(f"iphy{j}" for j in range(1, self.iphys + 1))]

    def check_node(self, node: str) -> int:
        number = node_number(node)
        if number > self.nodes:
            raise UsageError(f"no node {node} in this lab (it has n1..n{self.nodes})")
        return number

    def check_component(self, component: str) -> int:
        """Index of ``component``: 0 for the GNAB, j for iphy j."""
        index = component_index(component)
        if index > self.iphys:
            raise UsageError(f"no component {component} (this lab has gnab, iphy1..iphy"
                             f"{self.iphys})")
        return index


def node_name(number: int) -> str:
    return f"n{number}"


def node_number(node: str) -> int:
    match = re.fullmatch(r"n([1-9][0-9]*)", node)
    if not match:
        raise UsageError(f"bad node name {node!r}: nodes are named n1, n2, ...")
    return int(match.group(1))


def component_index(component: str) -> int:
    if component == GNAB:
        return 0
    match = re.fullmatch(r"iphy([1-9][0-9]*)", component)
    if not match:
        raise UsageError(f"bad component name {component!r}: use gnab or iphy1, iphy2, ...")
    return int(match.group(1))


def component_name(index: int) -> str:
    return GNAB if index == 0 else f"iphy{index}"


@dataclass(frozen=True, order=True)
class Endpoint:
    """One iPHY of one node: one end of an inter-node link."""

    node: int
    iphy: int

    def __str__(self) -> str:
        return f"n{self.node}:iphy{self.iphy}"


def parse_endpoint(text: str, shape: Shape | None = None) -> Endpoint:
    """Parse `n1:iphy2` (checked against ``shape`` when given)."""
    node, sep, component = text.partition(":")
    if not sep:
        raise UsageError(f"bad endpoint {text!r}: write NODE:IPHY, e.g. n1:iphy2")
    number = node_number(node)
    index = component_index(component)
    if index == 0:
        raise UsageError(f"bad endpoint {text!r}: links join iPHYs, not the GNAB")
    if shape is not None:
        shape.check_node(node)
        shape.check_component(component)
    return Endpoint(number, index)


# --- host-visible names -----------------------------------------------------------


def parent_container(lab: str, node: int) -> str:
    return f"{lab}-n{node}"


def main_bridge(lab: str) -> str:
    return f"{lab}-main"


def tunnel_port(lab: str, peer: int) -> str:
    """The VXLAN port on a host's main bridge towards the host numbered ``peer`` (its index
    in the hosts file): `<lab>-t<peer>`, which no veth name (`<lab>-<digit>...`) can be."""
    return f"{lab}-t{peer}"


def control_tunnel_host(lab: str) -> str:
    """A multi-host lab's control VXLAN on a host (one per host): `<lab>-tc`, which
    neither a veth (`<lab>-<digit>...`) nor a data tunnel (`<lab>-t<digit>`) can be."""
    return f"{lab}-tc"


def control_tunnel_ca(lab: str, host: int) -> str:
    """The CA's end of host ``host``'s control VXLAN (its index in the hosts file), in
    the lab's control namespace (made first in this machine's own): `<lab>-c<host>`."""
    return f"{lab}-c{host}"


def node_bridge(lab: str) -> str:
    """The internal OVS bridge inside every node parent (its own network namespace)."""
    return f"{lab}-node"


def control_netns(lab: str) -> str:
    return f"nestednet-{lab}-ctl"


def control_bridge(lab: str) -> str:
    """The Linux bridge inside the control namespace, where the CA's address lives."""
    return f"{lab}-ctl"


VETH_ROLES = {
    "intra-parent": "p",  # intra-net end in the node parent, a port of the node bridge
    "intra-child": "k",   # intra-net end in the child (renamed CHILD_INTRA_IF)
    "inter-host": "x",    # inter-net end in the host, a port of the main bridge
    "inter-child": "y",   # inter-net end in the iPHY (renamed CHILD_INTER_IF)
    "control-host": "c",  # control end in the control namespace, on the control bridge
    "control-child": "g",  # control end in the GNAB (renamed CHILD_CONTROL_IF)
}


def veth_name(lab: str, node: int, role: str, component: int) -> str:
    """`<lab>-<node><role letter><component>`: unique per host, at most 15 characters."""
    name = f"{lab}-{node}{VETH_ROLES[role]}{component}"
    if len(name) > IFNAME_MAX:
        raise UsageError(f"interface name {name} longer than {IFNAME_MAX} characters")
    return name
