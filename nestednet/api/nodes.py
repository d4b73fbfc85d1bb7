"""The nodes of a lab and their components, as objects: addresses, state, commands.

A node is a GNAB plus M iPHYs (`nestednet create`); `Node.exec` runs in its GNAB,
which holds the node's routable address (10.100.0.i) on its loopback.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestednet.api import process
from nestednet.api.process import Command, Process, Result
from nestednet.model import topology as topo

if TYPE_CHECKING:
    from nestednet.api.lab import Lab


class Component:
    """One component of a node: ``gnab`` or ``iphy<j>``."""

    def __init__(self, lab: Lab, node: int, index: int) -> None:
        self._lab = lab
        self.node_number = node
        self.index = index
        """0 for the GNAB, j for iPHY j."""

    @property
    def name(self) -> str:
        """``gnab`` or ``iphy<j>``."""
        return topo.component_name(self.index)

    @property
    def node(self) -> Node:
        """The node it belongs to."""
        return Node(self._lab, self.node_number)

    @property
    def is_gnab(self) -> bool:
        """Whether it is its node's GNAB (else an iPHY)."""
        return self.index == 0

    @property
    def endpoint(self) -> str:
        """``n<i>:<component>``, as `Lab.link` and the command line take it."""
        return f"{topo.node_name(self.node_number)}:{self.name}"

    @property
    def address(self) -> str:
        """Where other nodes reach it: an iPHY's inter-node address (192.168.2.x, what a
        link joins); for the GNAB its intra-node address (192.168.0.1)."""
        plan = self._lab._plan
        if self.is_gnab:
            return str(plan.intra_address(0).ip)
        return str(plan.inter_address(self.node_number, self.index).ip)

    @property
    def intra_address(self) -> str:
        """Its address on the node's internal switch (192.168.0.0/24)."""
        return str(self._lab._plan.intra_address(self.index).ip)

    @property
    def node_address(self) -> str:
        """Its node's routable address (10.100.0.i; see `Lab.create`'s ``routing``)."""
        return str(self._lab._plan.node_address(self.node_number).ip)

    def status(self) -> dict[str, Any]:
        """Its state (``running`` ...) and addresses, as `nestednet status` has them."""
        for entry in self.node.status().get("components", []):
            if entry.get("component") == self.name:
                return entry
        return {"component": self.name, "state": "missing"}

    def exec(self, command: Command, *, stdout: process.Write | None = None,
             stderr: process.Write | None = None) -> Result:
        """Run ``command`` (a shell line, or an argument list) to its end.

        ``stdout`` / ``stderr``: called with each chunk of bytes as it comes, instead of
        collecting it into the `Result` (which then holds empty strings).
        """
        if stdout is None and stderr is None:
            return process.run(self._runner, command)
        code = self._runner(process.argv(command), stdout or (lambda _data: None),
                            stderr or (lambda _data: None))
        return Result(code, "", "")

    def popen(self, command: Command) -> Process:
        """Start ``command`` and return at once (traffic, servers); see `Process`."""
        return Process(self._runner, command, self.endpoint)

    def swap(self, path: str | Path, *, restart: bool = False) -> dict[str, Any]:
        """Copy your code ``path`` into it (/opt/nestednet/user; see `nestednet swap`);
        ``restart``: restart it alone (same addresses and ports: links stay). Returns
        ``{"to": ..., "restarted": ...}``."""
        return self._lab._swap(topo.node_name(self.node_number), self.name, Path(path),
                               restart)

    def _runner(self, argv: list[str], out: process.Write, err: process.Write) -> int:
        return self._lab._exec(topo.node_name(self.node_number), self.name, argv, out, err)

    def __repr__(self) -> str:
        return f"<Component {self.endpoint}>"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Component) and other._lab is self._lab
                and (other.node_number, other.index) == (self.node_number, self.index))

    def __hash__(self) -> int:
        return hash((id(self._lab), self.node_number, self.index))


class Node:
    """Node ``n<i>`` of a lab."""

    def __init__(self, lab: Lab, number: int) -> None:
        self._lab = lab
        self.number = number

    @property
    def name(self) -> str:
        """``n<i>``."""
        return topo.node_name(self.number)

    @property
    def address(self) -> str:
        """Its routable address (10.100.0.i on its GNAB's loopback)."""
        return str(self._lab._plan.node_address(self.number).ip)

    node_address = address

    @property
    def components(self) -> list[Component]:
        """Its GNAB, then its iPHYs in order."""
        return [Component(self._lab, self.number, i)
                for i in range(self._lab.shape.iphys + 1)]

    @property
    def gnab(self) -> Component:
        """Its GNAB (global network access brain): the agent, the node address."""
        return Component(self._lab, self.number, 0)

    @property
    def iphys(self) -> list[Component]:
        """Its iPHYs, iphy1 first: the components links join."""
        return self.components[1:]

    def component(self, name: str) -> Component:
        """``gnab`` or ``iphy<j>``; InputError naming what exists otherwise."""
        return Component(self._lab, self.number, self._lab.shape.check_component(name))

    def iphy(self, j: int) -> Component:
        """iPHY ``j`` (1-based)."""
        return self.component(topo.component_name(j))

    def status(self) -> dict[str, Any]:
        """Its container's state and memory, and each component's state and addresses."""
        return self._lab._node_status(self.number)

    def exec(self, command: Command) -> Result:
        """Run ``command`` in its GNAB (where the node address lives)."""
        return self.gnab.exec(command)

    def popen(self, command: Command) -> Process:
        """Start ``command`` in its GNAB and return at once."""
        return self.gnab.popen(command)

    def __repr__(self) -> str:
        return f"<Node {self.name} of lab {self._lab.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and other._lab is self._lab and other.number == self.number

    def __hash__(self) -> int:
        return hash((id(self._lab), self.number))
