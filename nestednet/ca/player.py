"""Playing a scenario's time steps into the CA in real time (times a speed factor)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nestednet.ca.assistant import CommunicationAssistant
from nestednet.ca.server import ControlServer
from nestednet.model.scenario import Scenario


@dataclass(frozen=True)
class PlayResult:
    steps_played: int
    scenario_time: float
    interrupted: bool


class Cues(Protocol):
    """A scenario's actions as the player sees them (nestednet.ca.actions.ActionPlayer):
    cues with a ``time``, played at that time, and a filter on each step's visibility."""

    cues: Sequence[Any]

    def begin(self, t0_wall: float) -> None: ...
    def resume(self, scenario_time: float) -> None: ...
    def visible(self, pairs: frozenset) -> frozenset: ...
    def play(self, cue: Any, scenario_time: float) -> None: ...


class Player:
    """Posts each step to the CA's thread when its (scaled) time comes."""

    def __init__(self, scenario: Scenario, server: ControlServer, ca: CommunicationAssistant,
                 *, speed: float = 1.0, until: float | None = None,
                 actions: Cues | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.scenario = scenario
        self.server = server
        self.ca = ca
        self.speed = speed
        self.end = min(scenario.duration, until) if until is not None else scenario.duration
        self.actions = actions

    def apply_now(self, index: int, timeout: float = 30.0) -> None:
        """Apply step ``index`` on the CA thread and wait until it has been applied."""
        step = self.scenario.steps[index]
        visible = step.visible if self.actions is None else self.actions.visible(step.visible)
        self.server.call(lambda: self.ca.apply_step(index, step.time, sorted(visible)),
                         timeout)

    def play(self, stop: threading.Event, on_tick: Callable[[float], None] = lambda t: None,
             tick: float = 0.25,
             on_step_done: Callable[[int], None] = lambda index: None,
             start_at: float = 0.0,
             on_start: Callable[[float], None] = lambda wall: None) -> PlayResult:
        """Block until the scenario ends (or ``stop`` is set); ``on_tick`` gets scenario time,
        ``on_step_done`` each played step's index once its time is over, ``on_start`` the
        wall-clock time of scenario time 0.

        ``start_at``: the scenario time to start from (a resumed run): the clock starts
        there, the step in effect then is applied at once and the earlier ones never
        (nor the action cues before it: the faults they began that still hold are
        applied again first, `Cues.resume`).
        """
        start = time.monotonic() - start_at / self.speed
        on_start(time.time() - start_at / self.speed)
        current = self.step_at(start_at)
        played, last = 0, None
        # Steps and action cues in time order; at one instant the cues go first, so a
        # step that starts with a cut is filtered from its first moment.
        timeline: list[tuple[float, int, int, Any]] = [
            (step.time, 1, index, None) for index, step in enumerate(self.scenario.steps)
            if index >= current]
        if self.actions is not None:
            self.actions.begin(time.time() - start_at / self.speed)
            if start_at > 0:
                self.actions.resume(start_at)  # faults under way, before the step
            timeline += [(cue.time, 0, n, cue) for n, cue in enumerate(self.actions.cues)
                         if cue.time >= start_at]
        for when, _, index, cue in sorted(timeline, key=lambda item: item[:3]):
            if when > self.end:
                break
            if self._wait_until(start, when, stop, on_tick, tick):
                return PlayResult(played, self._now(start), True)
            if cue is not None:
                assert self.actions is not None
                self.actions.play(cue, when)
                continue
            if last is not None:
                on_step_done(last)
            self.apply_now(index)
            played, last = played + 1, index
        interrupted = self._wait_until(start, self.end, stop, on_tick, tick)
        if last is not None and not interrupted:
            on_step_done(last)
        return PlayResult(played, min(self._now(start), self.end), interrupted)

    def step_at(self, scenario_time: float) -> int:
        """The index of the step in effect at ``scenario_time`` (0 before the first)."""
        index = 0
        for k, step in enumerate(self.scenario.steps):
            if step.time <= scenario_time:
                index = k
        return index

    def _now(self, start: float) -> float:
        return (time.monotonic() - start) * self.speed

    def _wait_until(self, start: float, scenario_time: float, stop: threading.Event,
                    on_tick: Callable[[float], None], tick: float) -> bool:
        """Sleep until ``scenario_time``; True when stopped first. A run behind its
        clock has nothing to sleep, and must still see the stop: a 48-node soak that fell
        behind went on stepping for minutes after Ctrl-C."""
        while True:
            if stop.is_set():
                return True
            now = self._now(start)
            on_tick(now)
            remaining = (scenario_time - now) / self.speed
            if remaining <= 0:
                return False
            if stop.wait(min(tick, remaining)):
                return True
