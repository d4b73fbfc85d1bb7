"""Per-step figures of a run, counted from its event record (pure).

`nestednet run` prints one line per step. Counting from the events (rather than
from the CA's live counters) makes the line agree with the events file by
construction: a step's figures are the events stamped with that step, and they are
final once the next step's ``step`` event (or the end of the run) has been seen,
because the CA stamps every event with the step in effect when it happens.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nestednet.model.events import LINK_DOWN, LINK_FAIL, LINK_REQUEST, LINK_UP, STEP, Event


@dataclass
class StepFigures:
    step: int
    """0-based index of the step."""
    scenario_time: float
    requests: int = 0
    links_up: int = 0
    refused: int = 0
    links_down: int = 0
    links_after: int = 0
    """Links standing once the step's events are counted (all steps so far)."""


_FIELD = {LINK_REQUEST: "requests", LINK_UP: "links_up", LINK_FAIL: "refused",
          LINK_DOWN: "links_down"}


class StepTally:
    """Feed events in file order; collect the steps they close."""

    def __init__(self) -> None:
        self.current: StepFigures | None = None
        self._links = 0

    def add(self, events: Iterable[Event]) -> list[StepFigures]:
        """Count ``events``; return the steps that are now final (a later step began)."""
        done: list[StepFigures] = []
        for event in events:
            if event.event == STEP and event.step is not None:
                if self.current is not None:
                    done.append(self.current)
                self.current = StepFigures(event.step, event.scenario_time,
                                           links_after=self._links)
                continue
            name = _FIELD.get(event.event)
            if name is None or self.current is None or event.step != self.current.step:
                continue
            setattr(self.current, name, getattr(self.current, name) + 1)
            if event.event in (LINK_UP, LINK_DOWN):
                self._links += 1 if event.event == LINK_UP else -1
                self.current.links_after = self._links
        return done

    def finish(self) -> list[StepFigures]:
        """The last step, final now that the run is over."""
        last, self.current = self.current, None
        return [last] if last is not None else []
