"""Route changes in every node, watched from the host (a run's route events).

Whatever routes (the GNAB agent under `direct`, babeld under `babel`, the user's own
code), the GNAB's routing table shows the node's view, so the watcher listens to
IPv4 route changes in each GNAB's network namespace through netlink, from the host:
nothing runs in the components for it, and a user's image needs nothing. Only
routes to node addresses count.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable
from ipaddress import IPv4Network

from nestednet.lab import designs
from nestednet.lab.nodes import Lab
from nestednet.model.addressing import plan_from_dict

OnChange = Callable[[int, dict, float], None]
"""Called with (lab node number, change, Unix time) from the watcher's thread."""


def gnab_pids(lab: Lab) -> dict[int, int]:
    """Node number -> pid of its GNAB (its network namespace is the node's view), found
    the lab's design's way: here, or on the node's host (multi-host labs)."""
    design = designs.of(lab.meta)
    try:
        return {number: design.gnab_pid(lab, number) for number in lab.shape.node_numbers()}
    finally:
        design.close()


class RouteWatch:
    """Start, then every change to a node-address route calls ``on_change``; stop."""

    def __init__(self, lab: Lab, on_change: OnChange) -> None:
        self.lab = lab
        self.on_change = on_change
        self.node_net = IPv4Network(plan_from_dict(lab.shape, lab.meta["plan"]).node)
        self._sources: list = []
        self._design = None
        """The design whose connections the remote sources live on (closed in `stop`)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RouteWatch:
        design = designs.of(self.lab.meta)
        try:
            self._sources = design.route_sources(self.lab)
        except BaseException:
            design.close()
            raise
        self._design = design
        self._thread = threading.Thread(target=self._read, name="nestednet-routes",
                                        daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        sources = list(self._sources)
        while not self._stop.is_set() and sources:
            ready, _, _ = select.select(sources, [], [], 0.2)
            for source in ready:
                try:
                    changes = source.read()
                except (OSError, ValueError):
                    sources.remove(source)  # its host's helper went away
                    continue
                now = time.time()
                for node, change in changes:
                    if IPv4Network(change["dst"], strict=False).subnet_of(self.node_net):
                        self.on_change(node, change, now)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        for source in self._sources:
            source.close()
        self._sources = []
        if self._design is not None:
            self._design.close()
            self._design = None

    def __enter__(self) -> RouteWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
