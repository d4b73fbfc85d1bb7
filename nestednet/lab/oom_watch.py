"""Components killed for memory during a run, seen from the host (a run's `oom` events).

A component's memory limit (`create --memory MB`) is its container's cgroup. When a
process in it goes past the limit the kernel kills one, and the cgroup counts the kill:
the watch reads those counters (nestednet.adapters.cgroups) once a second, so it sees
kills of exec'd processes and of the main one alike, with the node's engine parked or
not. It only reports: a kill changes no link (the CA's table and the flows are left as
visibility made them; a killed GNAB agent restarts and says HELLO again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from nestednet.adapters import cgroups
from nestednet.lab import designs
from nestednet.lab.nodes import Lab

OnOom = Callable[[int, str, int, int], None]
"""Called with (lab node number, component, new kills, kills in all) from the watch's
thread."""

POLL_S = 1.0
"""How often the counters are read: one small file per component (a 48 x 4 lab: 240
reads a second, well under a millisecond each)."""


class OomWatch:
    """Start, then every new OOM kill in a component calls ``on_oom``; stop."""

    def __init__(self, lab: Lab, on_oom: OnOom, poll: float = POLL_S) -> None:
        self.lab = lab
        self.on_oom = on_oom
        self.poll = poll
        self.counters: dict[tuple[int, str], Path] = {}
        self._seen: dict[tuple[int, str], int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> OomWatch:
        design = designs.of(self.lab.meta)
        try:
            self.counters = design.oom_counters(self.lab)
        finally:
            design.close()
        # Kills from before the run are the lab's history, not this run's events.
        self._seen = {key: cgroups.oom_kills(path) or 0 for key, path in self.counters.items()}
        self._thread = threading.Thread(target=self._read, name="nestednet-oom", daemon=True)
        self._thread.start()
        return self

    def check(self) -> None:
        """Read every counter once; call ``on_oom`` for each that grew."""
        for key, path in self.counters.items():
            kills = cgroups.oom_kills(path)
            if kills is not None and kills > self._seen[key]:
                new, self._seen[key] = kills - self._seen[key], kills
                self.on_oom(key[0], key[1], new, kills)

    def _read(self) -> None:
        while not self._stop.wait(self.poll):
            self.check()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self.check()  # a kill in the last second is reported too

    def __enter__(self) -> OomWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
