"""The CA's link table and Algorithm 1 (seed thesis §3.4), as pure logic.

The communication assistant keeps one table of established links (node pair and the
iPHY used on each side) and the free iPHYs of every node. A GNAB with a free iPHY
asks for a link with LINK_REQ(src node, dst node, src iPHY); the table answers:

- LINK_FAIL when either node is unknown, the two are the same node, they do not see
  each other now, the src iPHY is not one of src's or is already in a link, a link
  between the two nodes exists already (``mutual_already_won`` when the other side's
  request made it, ``link_exists`` when src's own earlier request did), or dst has
  no free iPHY;
- otherwise LINK_OK with the destination iPHY chosen (dst's lowest-numbered free
  one): the link is recorded and both iPHYs are taken.

When visibility changes, every link whose two nodes no longer see each other is
removed and returned, so the caller removes its flows and sends LINK_DOWN to both
ends; the freed iPHYs may be requested again.

Invariants held after every call: links only between nodes that see each other, at
most one link per node pair, every iPHY in at most one link.

Concurrency: every public method is atomic (it holds ``table.lock``, a re-entrant
lock), so requests arriving on many connections are serialised and A->B and B->A
arriving together yield exactly one link. A caller that must do several things as
one unit (decide, install flows, roll back on failure) holds ``with table.lock:``
around them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from nestednet.model.line_of_sight import Pair, pair


class FailReason(StrEnum):
    UNKNOWN_NODE = "unknown_node"
    SAME_NODE = "same_node"
    NOT_VISIBLE = "not_visible"
    SRC_IPHY_UNKNOWN = "src_iphy_unknown"
    SRC_IPHY_BUSY = "src_iphy_busy"
    LINK_EXISTS = "link_exists"
    MUTUAL_ALREADY_WON = "mutual_already_won"
    NO_FREE_IPHY = "no_free_iphy"


@dataclass(frozen=True)
class Link:
    """An established link; ``src`` is the node whose LINK_REQ created it."""

    src: str
    src_iphy: int
    dst: str
    dst_iphy: int

    @property
    def pair(self) -> Pair:
        return pair(self.src, self.dst)

    def iphy_of(self, node: str) -> int:
        if node == self.src:
            return self.src_iphy
        if node == self.dst:
            return self.dst_iphy
        raise KeyError(node)

    def peer_of(self, node: str) -> str:
        return self.dst if node == self.src else self.src


@dataclass(frozen=True)
class LinkOk:
    """LINK_OK: the link is recorded; tell src (its iPHY) and dst (dst_iphy)."""

    link: Link


@dataclass(frozen=True)
class LinkFail:
    """LINK_FAIL with why; nothing changed."""

    src: str
    dst: str
    src_iphy: int
    reason: FailReason
    detail: str


Answer = LinkOk | LinkFail


class InterNodeLinks:
    """Established links and free iPHYs, changed only through atomic methods."""

    def __init__(self, inventory: Mapping[str, Iterable[int]],
                 visible: Iterable[Pair] = ()) -> None:
        """``inventory``: each node's iPHY numbers (e.g. Scenario.iphy_inventory())."""
        self.lock = threading.RLock()
        self._iphys: dict[str, frozenset[int]] = {n: frozenset(i) for n, i in inventory.items()}
        self._busy: dict[tuple[str, int], Link] = {}
        self._links: dict[Pair, Link] = {}
        self._visible: frozenset[Pair] = frozenset()
        self.set_visibility(visible)

    # -- queries -------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self._iphys)

    @property
    def visible(self) -> frozenset[Pair]:
        return self._visible

    def links(self) -> list[Link]:
        with self.lock:
            return sorted(self._links.values(), key=lambda link: link.pair)

    def link_between(self, a: str, b: str) -> Link | None:
        with self.lock:
            return self._links.get(pair(a, b))

    def links_of(self, node: str) -> list[Link]:
        with self.lock:
            return sorted((lk for lk in self._links.values() if node in (lk.src, lk.dst)),
                          key=lambda link: link.pair)

    def iphys_of(self, node: str) -> list[int]:
        """Every iPHY the table knows for ``node`` (its inventory), free or not."""
        return sorted(self._iphys.get(node, ()))

    def free_iphys(self, node: str) -> list[int]:
        with self.lock:
            return sorted(i for i in self._iphys.get(node, ()) if (node, i) not in self._busy)

    def visible_peers(self, node: str) -> list[str]:
        with self.lock:
            return sorted(b if a == node else a for a, b in self._visible if node in (a, b))

    # -- Algorithm 1 ---------------------------------------------------------

    def request(self, src: str, dst: str, src_iphy: int,
                dst_claims: Mapping[int, str] | None = None) -> Answer:
        """Handle LINK_REQ(src, dst, src_iphy): LINK_OK (link recorded) or LINK_FAIL.

        Algorithm 1 takes "a suitable free iPHY" of dst. ``dst_claims`` (dst's own
        requests the caller holds but has not decided yet: iPHY -> the peer asked)
        picks which: the iPHY dst is asking src from, else dst's lowest free iPHY that
        no such request names, else its lowest free one. Whether the link is made
        never depends on it, only which of dst's free iPHYs it takes, so dst's own
        requests are not refused as src_iphy_busy for an iPHY it had other free ones
        beside.
        """
        with self.lock:
            def fail(reason: FailReason, detail: str) -> LinkFail:
                return LinkFail(src, dst, src_iphy, reason, detail)

            for node in (src, dst):
                if node not in self._iphys:
                    return fail(FailReason.UNKNOWN_NODE, f"no node {node!r} in this lab")
            if src == dst:
                return fail(FailReason.SAME_NODE, "a node cannot link to itself")
            if pair(src, dst) not in self._visible:
                return fail(FailReason.NOT_VISIBLE, f"{src} and {dst} do not see each other")
            if src_iphy not in self._iphys[src]:
                return fail(FailReason.SRC_IPHY_UNKNOWN, f"{src} has no iPHY {src_iphy}")
            existing = self._links.get(pair(src, dst))
            if existing is not None:
                if existing.src == dst:
                    return fail(FailReason.MUTUAL_ALREADY_WON,
                                f"{dst}'s request to {src} already made the link "
                                f"({dst} iPHY {existing.src_iphy} - {src} iPHY "
                                f"{existing.dst_iphy})")
                return fail(FailReason.LINK_EXISTS,
                            f"{src} iPHY {existing.src_iphy} - {dst} iPHY "
                            f"{existing.dst_iphy} exists already")
            if (src, src_iphy) in self._busy:
                other = self._busy[(src, src_iphy)]
                return fail(FailReason.SRC_IPHY_BUSY,
                            f"{src} iPHY {src_iphy} is in the link with {other.peer_of(src)}")
            free = self.free_iphys(dst)
            if not free:
                return fail(FailReason.NO_FREE_IPHY, f"{dst} has no free iPHY")
            link = Link(src=src, src_iphy=src_iphy, dst=dst,
                        dst_iphy=_suitable(free, dst_claims or {}, src))
            self._add(link)
            return LinkOk(link)

    def set_visibility(self, visible: Iterable[Pair]) -> list[Link]:
        """Adopt a new visibility; returns the links removed (send LINK_DOWN to both ends).

        Pairs naming nodes outside the table are ignored.
        """
        with self.lock:
            known = self._iphys
            self._visible = frozenset(pair(a, b) for a, b in visible
                                      if a in known and b in known and a != b)
            lost = [lk for p, lk in self._links.items() if p not in self._visible]
            for link in lost:
                self._remove(link)
            return sorted(lost, key=lambda link: link.pair)

    def adopt(self, links: Iterable[Link]) -> list[str]:
        """Take links that already exist (a resumed run finds them as flows) into an empty
        table, their pairs made visible; the reasons any was refused, in words (nothing is
        taken then). The next set_visibility() drops those no longer visible."""
        links = list(links)
        with self.lock:
            if self._links:
                return ["the table already holds links"]
            trial = InterNodeLinks({n: i for n, i in self._iphys.items()},
                                   [*self._visible, *(lk.pair for lk in links)])
            refused = []
            for link in links:
                if link.src == link.dst or link.pair in trial._links:
                    refused.append(f"link {link.src}-{link.dst} twice or to itself")
                    continue
                trial._add(link)
            refused += trial.violations()
            if refused:
                return refused
            self._visible = trial._visible
            for link in links:
                self._add(link)
            return []

    def remove_link(self, a: str, b: str) -> Link | None:
        """Drop the link between a and b, if any (e.g. its flows could not be installed)."""
        with self.lock:
            link = self._links.get(pair(a, b))
            if link is not None:
                self._remove(link)
            return link

    def remove_node_links(self, node: str) -> list[Link]:
        """Drop every link of a node (e.g. its agent restarted and must re-request)."""
        with self.lock:
            gone = self.links_of(node)
            for link in gone:
                self._remove(link)
            return gone

    # -- checks --------------------------------------------------------------

    def violations(self) -> list[str]:
        """Broken invariants, in words; empty when the table is sound."""
        with self.lock:
            found = []
            used: dict[tuple[str, int], Pair] = {}
            for p, link in self._links.items():
                if p != link.pair:
                    found.append(f"link {link} filed under {p}")
                if p not in self._visible:
                    found.append(f"link {p[0]}-{p[1]} between nodes that do not see each other")
                for end in ((link.src, link.src_iphy), (link.dst, link.dst_iphy)):
                    if end[1] not in self._iphys.get(end[0], ()):
                        found.append(f"link {p[0]}-{p[1]} uses unknown iPHY {end[1]} of {end[0]}")
                    if end in used:
                        found.append(f"{end[0]} iPHY {end[1]} in two links: "
                                     f"{used[end]} and {p}")
                    used[end] = p
                    if self._busy.get(end) != link:
                        found.append(f"{end[0]} iPHY {end[1]} not marked busy for {p}")
            if set(used) != set(self._busy):
                found.append("busy-iPHY bookkeeping differs from the links")
            return found

    def unlinked_feasible_pairs(self) -> list[Pair]:
        """Visible, unlinked pairs where both nodes still have a free iPHY.

        Once a step has settled this is empty: the GNABs asked for every link they could.
        """
        with self.lock:
            return sorted(p for p in self._visible if p not in self._links
                          and self.free_iphys(p[0]) and self.free_iphys(p[1]))

    # -- internals -----------------------------------------------------------

    def _add(self, link: Link) -> None:
        self._links[link.pair] = link
        self._busy[(link.src, link.src_iphy)] = link
        self._busy[(link.dst, link.dst_iphy)] = link

    def _remove(self, link: Link) -> None:
        del self._links[link.pair]
        del self._busy[(link.src, link.src_iphy)]
        del self._busy[(link.dst, link.dst_iphy)]


def _suitable(free: list[int], claims: Mapping[int, str], src: str) -> int:
    mutual = [i for i in free if claims.get(i) == src]
    unclaimed = [i for i in free if i not in claims]
    return (mutual or unclaimed or free)[0]


def requests_to_send(free_iphys: Iterable[int], visible_peers: Iterable[str],
                     linked_peers: Iterable[str], failed_peers: Iterable[str] = (),
                     pending_peers: Iterable[str] = ()) -> list[tuple[str, int]]:
    """Which LINK_REQs a GNAB sends now: (peer, own iPHY) pairs.

    Free iPHYs (highest first: the CA gives an incoming link the destination's lowest
    free iPHY, so requests from the top rarely meet it) are matched with visible
    peers it has no link to, has not already asked (pending) and that refused it this
    step (failed), in name order. ``failed_peers`` should hold peers refused for a
    reason about the peer (no_free_iphy, not_visible, link_exists, mutual_already_won); after
    src_iphy_busy (an incoming link took that iPHY meanwhile) the peer may be asked
    again with another free iPHY. At most ``spare_limit`` requests go out at once.
    The agent re-implements this with the standard library only, so it stays this
    simple.
    """
    pending = set(pending_peers)
    skip = set(linked_peers) | set(failed_peers) | pending
    peers = sorted(p for p in set(visible_peers) if p not in skip)
    free = sorted(free_iphys, reverse=True)
    return list(zip(peers, free[:spare_limit(len(free), bool(pending))], strict=False))


def spare_limit(free: int, asking: bool) -> int:
    """How many of ``free`` iPHYs a GNAB may ask from now: all but one, so an incoming
    link (which takes the lowest free iPHY) finds one no request of ours is using;
    the last one only when nothing is in flight (``asking`` false)."""
    return max(free - 1, 0 if asking else min(free, 1))
