"""`Run`: a scenario playing on a lab, as the communication assistant negotiates its
links, read from Python while it plays.

`Lab.run` starts one on an open lab; `Run.start(RunRequest(...))` is `nestednet run`
itself (it creates the lab from the scenario's shape when it does not exist). Events
arrive as typed `Event` objects (nestednet.model.events: ``event`` is the kind,
``scenario_time``, ``nodes``, ``iphys``, ``extra`` for the rest) in the order the CA
writes them to the run's events file, which stays on disk after the run.

Leaving a ``with`` block stops a run still playing: the CA withdraws every link it
made, and the lab's lock is released.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestednet.ca import runner
from nestednet.ca.runner import RunRequest
from nestednet.lab.runs import RUNS_DIR
from nestednet.model.events import Event

if TYPE_CHECKING:
    from nestednet.ca.session import Live, RunSummary
    from nestednet.lab.nodes import Lab as LabHandle

__all__ = ["RUNS_DIR", "Event", "Run", "RunRequest"]


class Run:
    """One scenario run: started, read while it plays, stopped or waited for."""

    def __init__(self, request: RunRequest, *, progress: Callable[[str], None] | None = None,
                 _lab: LabHandle | None = None) -> None:
        """Check the request (scenario, link model, shaping on this kernel, the events
        file) without starting anything; `start` (or ``with``) starts it."""
        self._run = runner.Run(request, notify=progress or (lambda _text: None), lab=_lab)

    @classmethod
    def start(cls, request: RunRequest, *,
              progress: Callable[[str], None] | None = None) -> Run:
        """Check and start ``request``: lock the lab, create it if it does not exist (on
        this thread), and play on a thread of its own. ``progress`` gets one line of
        text per stage (creating the lab, waiting for the GNABs' HELLOs)."""
        made = cls(request, progress=progress)
        made.begin()
        return made

    def begin(self) -> Run:
        """Start a run made with ``Run(request)``; returns it."""
        self._run.start()
        return self

    @property
    def request(self) -> RunRequest:
        return self._run.request

    @property
    def lab(self) -> str:
        return self._run.request.lab

    @property
    def scenario(self) -> Any:
        """The scenario being played (nestednet.model.scenario.Scenario)."""
        return self._run.scenario

    @property
    def events_path(self) -> Path:
        """The events file (JSON lines; known once started)."""
        return self._run.events_path

    @property
    def live(self) -> Live:
        """What a display reads while it plays: ``phase``, ``scenario_time``, ``step``,
        ``steps``, ``duration``, ``links``."""
        return self._run.live

    def running(self) -> bool:
        return self._run.running()

    def events(self, kinds: Container[str] | None = None, *,
               poll: float = 0.25) -> Iterator[Event]:
        """Every event as it is written, until the run ends (``kinds``: only these,
        e.g. ``{"link_up", "link_down"}``). Stopping the run ends the iteration."""
        for event in self._run.events(poll):
            if kinds is None or event.event in kinds:
                yield event

    def new_events(self) -> list[Event]:
        """The events written since the last call, without waiting."""
        return self._run.new_events()

    def stop(self) -> None:
        """Ask the run to stop now (the CA withdraws its links); see `wait`."""
        self._run.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` s for the run to end; True while it still plays."""
        return self._run.wait(timeout)

    def summary(self) -> RunSummary:
        """Its figures once it has ended (waits, then releases the lab): steps played,
        links made, refused and taken down, requests, negotiation latency, routes. The
        run's own error is raised here if it failed."""
        try:
            return self._run.summary()
        finally:
            if not self._run.running():
                self._run.close()

    def close(self) -> None:
        """Stop it if it still plays, wait for it, release the lab."""
        self._run.close()

    def __enter__(self) -> Run:
        if not self._run.started:
            self.begin()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Run of {self.scenario.name or 'a scenario'} on lab {self.lab}>"
