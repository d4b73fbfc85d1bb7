"""The lab lock (nestednet.lab.lock) and the scenario size limits, without root."""

from __future__ import annotations

import json
import math
import multiprocessing
import time

import pytest

from nestednet.errors import UsageError
from nestednet.lab import lock
from nestednet.model import limits
from nestednet.model.scenario_file import parse_scenario

pytestmark = pytest.mark.unit


def _hold_for(root, purpose: str, seconds: float, ready) -> None:
    with lock.hold("lab1", purpose, root=root):
        ready.set()
        time.sleep(seconds)


def _other_process(tmp_path, purpose: str, seconds: float):
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_hold_for, args=(tmp_path, purpose, seconds, ready))
    proc.start()
    assert ready.wait(10)
    return proc


def test_a_second_process_waits_then_gets_the_lock(tmp_path):
    proc = _other_process(tmp_path, "link add", 0.5)
    started = time.monotonic()
    with lock.hold("lab1", "link add", root=tmp_path, wait=10):
        waited = time.monotonic() - started
    proc.join()
    assert waited >= 0.3


def test_busy_lab_is_refused_naming_the_holder(tmp_path):
    proc = _other_process(tmp_path, "create", 2)
    with (pytest.raises(UsageError, match=r"busy: `nestednet create` \(pid \d+\)"),
          lock.hold("lab1", "delete", root=tmp_path, wait=0.2)):
        pass
    proc.join()


def test_a_run_is_refused_at_once(tmp_path):
    proc = _other_process(tmp_path, lock.RUN, 2)
    started = time.monotonic()
    with (pytest.raises(UsageError, match="playing a scenario"),
          lock.hold("lab1", "link add", root=tmp_path, wait=30)):
        pass
    assert time.monotonic() - started < 1
    proc.join()


def test_reentrant_within_a_process_and_released_after(tmp_path):
    with lock.hold("lab1", "run", root=tmp_path), lock.hold("lab1", "create", root=tmp_path,
                                                             wait=0):
        pass
    proc = _other_process(tmp_path, "delete", 0)
    proc.join()
    assert proc.exitcode == 0
    assert oct(lock.lock_path("lab1", tmp_path).stat().st_mode & 0o777) == "0o600"


def test_forget_while_held_does_not_let_two_hold(tmp_path):
    with lock.hold("lab1", "delete", root=tmp_path):
        lock.forget("lab1", tmp_path)
    with lock.hold("lab1", "create", root=tmp_path, wait=0):
        assert json.loads(lock.lock_path("lab1", tmp_path).read_text())["purpose"] == "create"


@pytest.mark.parametrize("doc, words", [
    ({"format": "x", "duration": 1e308, "nodes": [], "steps": []}, "duration: duration"),
    ({"duration": 1, "nodes": [{"name": "a", "id": 10**30}], "steps": []}, r"nodes\[0\].id"),
    ({"duration": 1, "nodes": [{"name": f"n{i}", "id": i} for i in range(5001)],
      "steps": []}, "5001 nodes, more than the limit of 5000"),
    ({"duration": 1, "nodes": [], "steps": [{}] * (limits.MAX_STEPS + 1)}, "steps: 10001"),
    ({"MobilecomScnDef": {"simDuration": 1, "MobileNodeDef": [
        {"nodeName": "a", "nodeID": 1, "Time": t} for t in range(limits.MAX_STEPS + 1)]}},
     "distinct Times"),
])
def test_limits_are_checked_first_and_located(doc, words):
    started = time.monotonic()
    with pytest.raises(UsageError, match=f"^f.json: .*{words}"):
        parse_scenario(doc, "f.json")
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("value, finite", [
    (0, True), (-1.5, True), (10**308, True), (-(10**308), True), (2 * 10**308, False),
    (-(10**400), False), (math.inf, False), (math.nan, False), (True, False), ("1", False),
])
def test_finite_number_also_refuses_integers_no_float_holds(value, finite):
    assert limits.finite_number(value) is finite


def test_a_huge_integer_is_described_without_converting_it():
    assert limits.describe_number(10**400) == \
        "an integer of about 401 digits (beyond ±1.8e308)"
    assert limits.describe_number(-(10**400)).startswith("a negative integer of about 401")
    assert limits.describe_number(2.5) == "2.5"
