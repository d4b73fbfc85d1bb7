"""Rules for manual inter-node links (pure), as in the paper's Algorithm 1.

A link joins one iPHY of one node to one iPHY of another. An iPHY is a single
transceiver, so it serves at most one link, and two nodes are joined at most once.
"""

from __future__ import annotations

from collections.abc import Iterable

from nestednet.errors import UsageError
from nestednet.model.topology import Endpoint

Link = tuple[Endpoint, Endpoint]


def normalized(a: Endpoint, b: Endpoint) -> Link:
    return (a, b) if a <= b else (b, a)


def check_new_link(existing: Iterable[Link], a: Endpoint, b: Endpoint) -> Link:
    """The link a<->b in normal order, or UsageError saying which rule it breaks."""
    if a.node == b.node:
        raise UsageError(f"{a} and {b} are in the same node: links join different nodes")
    links = [normalized(*link) for link in existing]
    new = normalized(a, b)
    if new in links:
        raise UsageError(f"link {new[0]} <-> {new[1]} exists already")
    for x, y in links:
        for end in (a, b):
            if end in (x, y):
                raise UsageError(f"{end} is busy: it serves the link {x} <-> {y} "
                                 "(one link per iPHY)")
        if {x.node, y.node} == {a.node, b.node}:
            raise UsageError(f"nodes n{a.node} and n{b.node} are linked already ({x} <-> {y}); "
                             "a node pair gets at most one link")
    return new


def find_link(existing: Iterable[Link], a: Endpoint, b: Endpoint) -> Link:
    wanted = normalized(a, b)
    for link in existing:
        if normalized(*link) == wanted:
            return wanted
    raise UsageError(f"no link {wanted[0]} <-> {wanted[1]}")
