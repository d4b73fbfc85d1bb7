"""A run's route watch needs every GNAB's pid (NodeDesign.gnab_pid): a GNAB that is not
running is a located error naming the node and how it ended, not a failed pid lookup."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from nestednet.errors import EnvironmentProblem
from nestednet.lab.nested import NestedDesign

pytestmark = pytest.mark.unit


class StoppedGnabLab:
    record = SimpleNamespace(lab="uu")

    @contextlib.contextmanager
    def inner(self, number: int):
        yield object()

    def child(self, _inner, name: str):
        assert name == "gnab"
        return SimpleNamespace(attrs={"State": {
            "Status": "exited", "Pid": 0, "ExitCode": 137,
            "FinishedAt": "2026-11-27T01:00:00Z"}})

    def parent(self, number: int):
        raise AssertionError("the parent is not needed once the GNAB is known stopped")

    def data_dir(self, number: int) -> Path:
        return Path(f"/nonexistent/uu/n{number}/docker")  # no record: the engine is asked

    def state_dir(self, number: int) -> Path:
        return Path(f"/var/lib/nestednet/labs/uu/n{number}/state")


def test_a_stopped_gnab_is_named_with_how_it_ended() -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        NestedDesign().gnab_pid(StoppedGnabLab(), 3)
    text = str(raised.value)
    assert "n3's GNAB is not running" in text and "exited" in text and "137" in text
    assert "/var/lib/nestednet/labs/uu/n3/state/log/" in raised.value.hint
