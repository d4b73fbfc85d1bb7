"""One scenario run as a library call, for every caller alike.

`nestednet run`, `nestednet demo` and the Python API all describe a run with a
`RunRequest` (typed and checked when it is made) and play it with `Run`. No command
calls another command to get there: that once let `demo` hand click's raw option
defaults (the string "NET_ADMIN,NET_RAW" for the component capabilities) to the lab,
which then asked Docker for one capability per character.

A `Run` checks everything it can before it touches the machine (scenario, link model,
shaping on this kernel, the events file), then, on entering its context, takes the
lab's lock, writes the run marker, creates the lab if needed (on the calling thread:
python-ovs needs the main thread) and plays the scenario on a thread of its own, so
the caller keeps its thread for a display, for Ctrl-C or for reading events.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from nestednet.errors import UsageError
from nestednet.lab import lock, runs
from nestednet.model.component_spec import check_component_caps
from nestednet.model.events import Event
from nestednet.model.scenario import LENGTH_UNITS, MAX_IPHYS, Scenario
from nestednet.model.scenario_file import (
    DEFAULT_IPHYS,
    dumps_scenario,
    load_link_model,
    load_scenario,
    with_length_unit,
)
from nestednet.model.shaping_policy import FULL, MODES
from nestednet.routing import strategies

if TYPE_CHECKING:
    from nestednet.ca import session
    from nestednet.lab.nodes import Lab

Notify = Callable[[str], None]


def _session() -> ModuleType:
    # Lazy: the CA runtime loads docker, and a RunRequest alone must not.
    from nestednet.ca import session

    return session


@dataclass(frozen=True)
class RunRequest:
    """Everything a run is asked for; the defaults are `nestednet run`'s.

    Made once from typed values (a CLI's parsed options, an API call) and refused at
    construction when a value has the wrong type or range, so no caller can pass raw
    text where a parsed value is meant.
    """

    scenario: Path | Scenario
    """A scenario file, or a scenario already loaded or built (nestednet.api.Scenario)."""
    lab: str = "nn"
    speed: float = 1.0
    until: float | None = None
    events: Path | None = None
    """Event log (JSON lines); None: a new results directory under runs.RUNS_DIR."""
    remove_lab: bool = False
    iphys: int | None = None
    """iPHYs per node for NestedNet-format scenarios; None: the lab's, else the default."""
    hello_timeout: float = 90.0
    plot_dir: Path | None = None
    link_model: Path | None = None
    length_unit: str | None = None
    shaping_mode: str = FULL
    keep_order: bool = False
    routing: str = strategies.DEFAULT
    """Routing of a lab this run creates (an existing lab keeps its own)."""
    component_caps: tuple[str, ...] | None = None
    """Capabilities of a created lab's components; None: the default set."""
    allow_faults: bool = False
    """Let crash/churn actions freeze nodes of a lab this run did not create."""

    def __post_init__(self) -> None:
        for name in ("scenario", "events", "plot_dir", "link_model"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path | Scenario):
                object.__setattr__(self, name, Path(value))
        if self.component_caps is not None:
            object.__setattr__(self, "component_caps",
                               check_component_caps(self.component_caps))
        _check_number("speed", self.speed, minimum=0.0, open_minimum=True)
        if self.until is not None:
            _check_number("until", self.until, minimum=0.0)
        _check_number("hello_timeout", self.hello_timeout, minimum=1.0)
        if self.iphys is not None and (isinstance(self.iphys, bool)
                                       or not isinstance(self.iphys, int)
                                       or not 1 <= self.iphys <= MAX_IPHYS):
            raise UsageError(f"iphys: {self.iphys!r} is not a whole number in 1..{MAX_IPHYS}")
        if self.shaping_mode not in MODES:
            raise UsageError(f"shaping_mode: {self.shaping_mode!r} is not one of "
                             f"{', '.join(MODES)}")
        if self.length_unit is not None and self.length_unit not in LENGTH_UNITS:
            raise UsageError(f"length_unit: {self.length_unit!r} is not one of "
                             f"{', '.join(sorted(LENGTH_UNITS))}")
        if self.routing not in strategies.STRATEGIES:
            raise UsageError(f"routing: {self.routing!r} is not one of "
                             f"{', '.join(strategies.STRATEGIES)}")


def _check_number(name: str, value: object, *, minimum: float,
                  open_minimum: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < minimum \
            or (open_minimum and value == minimum):
        bound = f"> {minimum:g}" if open_minimum else f">= {minimum:g}"
        raise UsageError(f"{name}: {value!r} is not a finite number {bound}")


def iphys_for(lab: str, given: int | None, opened: Lab | None = None) -> int:
    """iPHYs per node for a NestedNet-format scenario: ``given``, else the existing lab's
    count (``opened``: that lab, already read; a scenario fits the lab it runs on), else
    the default."""
    if given is not None:
        return given
    if opened is not None:
        return opened.shape.iphys
    return runs.lab_iphys(lab) or DEFAULT_IPHYS


def _open_existing(name: str) -> Lab | None:
    """The lab ``name`` read once for the whole run, or None when it does not exist yet."""
    # Lazy: the lab runtime loads docker, and a RunRequest alone must not.
    from nestednet.lab.nodes import Lab
    from nestednet.lab.record import LabRecord

    return Lab.open(name) if LabRecord(name).exists() else None


def check_faults_allowed(scenario: Scenario, request: RunRequest, lab: Lab | None,
                         source: str) -> None:
    """A crash freezes a node: on a lab the run did not make, only when asked (exit 2)."""
    crashes = [a for a in scenario.actions if a.kind in ("crash", "churn")]
    if crashes and not request.allow_faults and lab is not None:
        raise UsageError(f"{source}: {crashes[0].label}: lab {request.lab} exists "
                         "and this run did not create it; a crash would freeze its nodes",
                         hint="add --allow-faults, or run on a new --lab (run creates it)")


class Run:
    """A scenario played on a lab: made (checked), entered (started), left (finished).

    ::

        with Run(RunRequest(Path("scenarios/small-4x2.json"), lab="demo")) as run:
            for event in run.events():
                ...
        print(run.summary())

    Leaving the context stops a run still playing (its links are withdrawn), waits for
    it, and releases the lab; `summary()` then gives the figures, or raises the error
    the run ended with.
    """

    def __init__(self, request: RunRequest, *, notify: Notify = lambda text: None,
                 lab: Lab | None = None) -> None:
        """``lab``: the run's lab as the caller opened it (the Python API's handle); by
        default it is opened here when it exists. Either way its record is read once
        and that reading serves the whole run."""
        if not isinstance(request, RunRequest):
            raise TypeError(f"Run takes a RunRequest, not {type(request).__name__}")
        self.request = request
        self._notify = notify
        if lab is not None and lab.record.lab != request.lab:
            raise ValueError(f"the request names lab {request.lab}, the handle {lab.record.lab}")
        self.lab: Lab | None = lab if lab is not None else _open_existing(request.lab)
        if isinstance(request.scenario, Scenario):
            source = request.scenario.name or "<scenario>"
            self.scenario: Scenario = with_length_unit(request.scenario, request.length_unit,
                                                       source)
        else:
            source = str(request.scenario)
            self.scenario = load_scenario(
                request.scenario,
                nestednet_iphys=iphys_for(request.lab, request.iphys, self.lab),
                length_unit=request.length_unit)
        if self.lab is not None:
            _session().check_fits(self.scenario, self.lab)
        check_faults_allowed(self.scenario, request, self.lab, source)
        model = load_link_model(request.link_model) if request.link_model is not None \
            else None
        links = _session().plan_shaping(self.scenario, model, request.shaping_mode,
                                     source, self._netem, keep_order=request.keep_order)
        if request.events is not None:
            runs.check_writable(request.events, "--events")
        self.options = _session().RunOptions(
            lab=request.lab, speed=request.speed, until=request.until, events=request.events,
            remove_lab=request.remove_lab, hello_timeout=request.hello_timeout,
            plot_dir=request.plot_dir, links=links[0] if links else None,
            shaping=links[1] if links else None, routing=request.routing,
            component_caps=request.component_caps)
        self.live = _session().Live()
        """What a display reads while the run plays (phase, scenario time, step)."""
        self._stop = threading.Event()
        self._stack: contextlib.ExitStack | None = None
        self._started = False
        self._thread: threading.Thread | None = None
        self._summary: session.RunSummary | None = None
        self._error: BaseException | None = None
        self._tail: runs.EventTail | None = None
        self._resume: tuple[Path, dict] | None = None
        self.run_dir: Path | None = None
        """The run's directory (its record, and its events unless --events said where)."""

    @classmethod
    def resume(cls, run_dir: Path, *, notify: Notify = lambda text: None) -> Run:
        """A run to take over a run whose process died, from its directory's record: the
        same request, its events file continued, its links adopted from the flows."""
        record = runs.read_run_record(run_dir)
        where = Path(run_dir) / runs.RUN_RECORD
        try:
            asked = dict(record["request"])
            caps = asked.pop("component_caps")
            # The same run goes on: a lab it created is its own to freeze (crash actions)
            # whatever the record (older ones do not say allow_faults).
            asked["allow_faults"] = bool(asked.get("allow_faults")
                                         or record.get("created_lab"))
            request = RunRequest(**asked, component_caps=tuple(caps) if caps is not None
                                 else None)
        except (KeyError, TypeError) as exc:
            raise UsageError(f"{where}: not a complete run record ({exc})") from None
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
        made = cls(request, notify=notify)
        if made.lab is None:
            raise UsageError(f"{run_dir}: lab {request.lab} no longer exists: nothing to resume")
        made._resume = (Path(run_dir), record)
        return made

    def _record(self, run_dir: Path, events_offset: int) -> dict:
        """What `resume` needs, as JSON: the request (a scenario object is saved beside
        it), whether this run made its lab, and where its events start."""
        request = self.request
        if isinstance(request.scenario, Scenario):
            scenario = run_dir / "scenario.json"
            scenario.write_text(dumps_scenario(request.scenario))
        else:
            scenario = request.scenario.resolve()

        def text(path: Path | None) -> str | None:
            return str(path.resolve()) if path is not None else None

        assert self.options.events is not None
        return {"version": 1, "created_lab": self.options.created_lab,
                "events": text(self.options.events), "events_offset": events_offset,
                "pid": os.getpid(), "started_wall": time.time(),
                "request": {
                    "scenario": str(scenario), "lab": request.lab, "speed": request.speed,
                    "until": request.until, "events": text(self.options.events),
                    "remove_lab": request.remove_lab, "iphys": request.iphys,
                    "hello_timeout": request.hello_timeout,
                    "plot_dir": text(request.plot_dir), "link_model": text(request.link_model),
                    "length_unit": request.length_unit, "shaping_mode": request.shaping_mode,
                    "keep_order": request.keep_order, "routing": request.routing,
                    "allow_faults": request.allow_faults,
                    "component_caps": list(request.component_caps)
                    if request.component_caps is not None else None}}

    def _take_over(self, stack: contextlib.ExitStack) -> None:
        """Lock the lab for a resumed run: only when the run it takes over is dead."""
        assert self._resume is not None
        run_dir, record = self._resume
        lab = self.request.lab
        stack.enter_context(lock.hold(lab, lock.RUN))
        marker = runs.RunMarker(lab).read()
        if not marker:
            raise UsageError(f"{run_dir}: nothing to resume: no run is recorded on lab {lab} "
                             "(it ended, or `nestednet cleanup` undid it)")
        if runs.alive(int(marker.get("pid", 0)), str(marker.get("start", ""))):
            raise UsageError(f"{run_dir}: the run on lab {lab} is still going (pid "
                             f"{marker['pid']})", hint="stop it first, or let it end")
        stack.enter_context(runs.RunMarker(lab).held(self.request.remove_lab,
                                                     creates=bool(record["created_lab"])))
        self.options.created_lab = bool(record["created_lab"])
        self.options.events = Path(record["events"])
        origin = runs.clock_origin(self.options.events, int(record["events_offset"]),
                                   self.request.speed)
        end = self.scenario.duration if self.request.until is None \
            else min(self.scenario.duration, self.request.until)
        self.options.resume_at = 0.0 if origin is None \
            else max(0.0, min(end, (time.time() - origin) * self.request.speed))
        self.run_dir = run_dir

    def _netem(self) -> bool:
        """Whether the kernels that will shape the run's links have sch_netem: an existing
        lab's (each host's, for a lab over several hosts), else this machine's."""
        # Lazy: the probe imports pyroute2 and a lab's runtime; only shaped runs ask.
        from nestednet.lab import designs
        from nestednet.lab.shaping import netem_available

        if self.lab is None:
            return netem_available()
        return designs.of(self.lab.meta).links(self.lab.record, self.lab.meta) \
            .netem_available()

    @property
    def events_path(self) -> Path:
        """Where the events go (known once the run has started)."""
        if self.options.events is None:
            raise RuntimeError("the run has not started: its results directory is made then")
        return self.options.events

    def start(self) -> Run:
        """Lock the lab, create it if needed, and start playing on a thread of our own."""
        if self._started:
            raise RuntimeError("this run was started already")
        self._started = True
        stack = contextlib.ExitStack()
        try:
            if self._resume is not None:
                self._take_over(stack)
                assert self.options.events is not None
                self._tail = runs.EventTail(self.options.events)
            else:
                stack.enter_context(lock.hold(self.request.lab, lock.RUN))
                stack.enter_context(
                    runs.RunMarker(self.request.lab).held(self.request.remove_lab))
                self.options.created_lab = _session().ensure_lab(self.scenario, self.options,
                                                              notify=self._notify)
                if self.lab is None:
                    self.lab = _open_existing(self.request.lab)
                self.run_dir = runs.results_dir(self.request.lab)
                if self.options.events is None:
                    self.options.events = self.run_dir / "events.jsonl"
                self._tail = runs.EventTail(self.options.events)
                runs.write_run_record(self.run_dir,
                                      self._record(self.run_dir, self._tail.offset))
            self._thread = threading.Thread(target=self._play, name="nestednet-run")
            self._thread.start()
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def _play(self) -> None:
        try:
            self._summary = _session().run(self.scenario, self.options, self._stop, self.live,
                                        notify=self._notify, lab=self.lab)
            if self.run_dir is not None:
                self._summary.run_dir = str(self.run_dir)
        except BaseException as exc:  # handed to whoever asks for the summary
            self._error = exc

    @property
    def started(self) -> bool:
        """Whether `start` was called."""
        return self._started

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the run to end; True while it still plays."""
        if self._thread is None:
            return False
        self._thread.join(timeout)
        return self._thread.is_alive()

    def stop(self) -> None:
        """Ask the run to stop now; it withdraws its links and ends (see summary())."""
        self._stop.set()

    def new_events(self) -> list[Event]:
        """Events written since the last call (whole lines only), without waiting."""
        return self._tail.read() if self._tail is not None else []

    def events(self, poll: float = 0.25) -> Iterator[Event]:
        """Every event of this run as it is written, until the run ends."""
        while True:
            alive = self.wait(poll)
            yield from self.new_events()
            if not alive:
                return

    def summary(self) -> session.RunSummary:
        """The run's figures once it has ended (waits for it); the run's error if it failed."""
        if self._thread is None:
            raise RuntimeError("the run was never started")
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._summary is not None, "the run thread ended without a result"
        return self._summary

    def close(self) -> None:
        """Stop the run if it still plays, wait for it, release the lab's lock."""
        if self._stack is None:
            return
        try:
            if self.running():
                self.stop()
            if self._thread is not None:
                self._thread.join()
        finally:
            stack, self._stack = self._stack, None
            stack.close()

    def __enter__(self) -> Run:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
