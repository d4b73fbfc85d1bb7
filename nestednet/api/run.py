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
from nestednet.errors import InputError
from nestednet.lab.runs import RUNS_DIR
from nestednet.model.events import Event

if TYPE_CHECKING:
    from nestednet.api.lab import Lab
    from nestednet.api.nodes import Component, Node
    from nestednet.ca.session import Live, RunSummary

__all__ = ["RUNS_DIR", "Event", "Run", "RunRequest"]


class Run:
    """One scenario run: started, read while it plays, stopped or waited for."""

    def __init__(self, request: RunRequest, *, progress: Callable[[str], None] | None = None,
                 _lab: Lab | None = None) -> None:
        """Check the request (scenario, link model, shaping on this kernel, the events
        file) without starting anything; `start` (or ``with``) starts it."""
        self._lab = _lab
        self._run = runner.Run(request, notify=progress or (lambda _text: None),
                               lab=None if _lab is None else _lab._handle)

    @classmethod
    def start(cls, request: RunRequest, *,
              progress: Callable[[str], None] | None = None) -> Run:
        """Check and start ``request``: lock the lab, create it if it does not exist (on
        this thread), and play on a thread of its own. ``progress`` gets one line of
        text per stage (creating the lab, waiting for the GNABs' HELLOs)."""
        made = cls(request, progress=progress)
        made.begin()
        return made

    @classmethod
    def resume(cls, run_dir: str | Path, *,
               progress: Callable[[str], None] | None = None) -> Run:
        """A run that takes over one whose process died (killed, machine asleep), from
        its directory (``events_path.parent``; `nestednet run` prints it last): the
        same request, its links adopted from the lab's flows, its events file continued
        with a ``resumed`` event, play going on from the scenario time it is now. Not
        started: use ``with`` or `begin`."""
        made = cls.__new__(cls)
        made._run = runner.Run.resume(Path(run_dir), notify=progress or (lambda _text: None))
        return made

    def begin(self) -> Run:
        """Start a run made with ``Run(request)``; returns it."""
        self._run.start()
        return self

    @property
    def request(self) -> RunRequest:
        """What was asked for."""
        return self._run.request

    @property
    def lab(self) -> str:
        """The lab's name."""
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
        """Whether it still plays."""
        return self._run.running()

    def node(self, name: str) -> Node:
        """The lab node playing scenario node ``name`` (the k-th scenario node is lab
        node n<k>); events name scenario nodes. For runs started with `Lab.run`."""
        names = list(self.scenario.node_names)
        if name not in names:
            raise InputError(f"the scenario has no node {name!r} (it has "
                             f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''})")
        return self._lab_handle().node(names.index(name) + 1)

    def component(self, name: str, iphy: int) -> Component:
        """iPHY ``iphy`` of scenario node ``name`` (as an event's ``nodes`` and ``iphys``
        give them)."""
        return self.node(name).iphy(iphy)

    def _lab_handle(self) -> Lab:
        if self._lab is None:
            raise InputError("this run has no lab handle: start it with Lab.run, or open "
                             f"the lab yourself (nn.Lab.open({self.lab!r}))")
        return self._lab

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
