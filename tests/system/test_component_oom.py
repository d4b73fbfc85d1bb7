"""A component that hits its memory limit during a run (issue #32, item 5b).

A 2 x 1 nested lab made with `--memory 32` (every component's cgroup limit) plays a
scenario where n1 and n2 stay visible, so their one link stays up. Once it is up, a
memory hog started with `nestednet exec` in n1's iPHY goes past the limit and the
kernel kills it. The run must say so (an `oom` event naming the node and the
component, the summary's `oom`, `status`) and change nothing else: the link's flows
are the same before and after, and no link comes down.

About 35 s (create, a 15 s scenario, delete); marked `long`: `scripts/test oom` runs it
alone, `scripts/test long` with the others; `make test` leaves it out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labs import forget

from nestednet.model.events import read_events

pytestmark = [pytest.mark.system, pytest.mark.long]

CLI = str(Path(sys.executable).parent / "nestednet")
LAB = "hloom"
LIMIT_MB = 32
HOG = "b = b'x' * (256 << 20)"
"""256 MiB written at once: eight times the limit."""
SCENARIO = {
    "format": "nestednet-scenario/1", "name": "oom-2x1", "duration": 15, "iphys": 1,
    "nodes": [{"name": "n1", "id": 1}, {"name": "n2", "id": 2}],
    "steps": [{"time": 0, "visible": [["n1", "n2"]]}, {"time": 10, "visible": [["n1", "n2"]]}],
}


def nn(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def events_of(path: Path, kind: str) -> list:
    return [e for e in read_events(path) if e.event == kind] if path.exists() else []


def wait_for(what: str, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)
    return found


def test_a_component_killed_at_its_memory_limit_is_reported_and_its_links_stay(tmp_path):
    forget(LAB)
    t0 = time.monotonic()
    made = nn("create", "--lab", LAB, "-n", "2", "-m", "1", "--memory", str(LIMIT_MB))
    assert made.returncode == 0, made.stderr
    scenario, events = tmp_path / "oom.json", tmp_path / "events.jsonl"
    scenario.write_text(json.dumps(SCENARIO))
    run = subprocess.Popen([CLI, "run", str(scenario), "--lab", LAB, "--events", str(events),
                            "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        wait_for("link up", lambda: events_of(events, "link_up"), 120)
        before = json.loads(nn("link", "list", "--lab", LAB, "--json").stdout)
        assert len(before) == 1, before

        hog = nn("exec", "--lab", LAB, "n1", "iphy1", "--", "python3", "-c", HOG)
        assert hog.returncode == 137, (hog.returncode, hog.stderr)  # SIGKILL: the kernel's
        t_kill = time.monotonic()
        oom = wait_for("oom event", lambda: events_of(events, "oom"), 10)
        seen_s = time.monotonic() - t_kill

        after = json.loads(nn("link", "list", "--lab", LAB, "--json").stdout)
        assert after == before
        status = json.loads(nn("status", "--lab", LAB, "--json").stdout)
        comps = {(n["node"], c["component"]): c for n in status["nodes"]
                 for c in n["components"]}
        assert comps[("n1", "iphy1")]["oom_kills"] >= 1, comps
        assert comps[("n1", "iphy1")]["state"] == "running"  # the hog died, not the iPHY
        assert all(c["oom_kills"] == 0 for key, c in comps.items() if key != ("n1", "iphy1"))
        table = nn("status", "--lab", LAB).stdout
        assert "OOM" in table, table  # "running, 1 OOM kill" (wrapped in a narrow table)

        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(30)
        gone = nn("delete", "--lab", LAB)
    assert run.returncode == 0, err
    assert gone.returncode == 0, gone.stderr
    summary = json.loads(out)
    assert summary["oom"] == {"n1:iphy1": 1}, summary

    assert len(oom) == 1, oom
    first = oom[0]
    assert first.nodes == ("n1",)
    assert first.extra["component"] == "iphy1"
    assert first.extra["kills"] == 1 and first.extra["oom_kills"] >= 1
    assert first.extra["memory_mb"] == LIMIT_MB
    assert first.extra["links"] == 1
    assert events_of(events, "link_down") == []
    assert len(events_of(events, "link_up")) == 1
    print(f"\n[oom] kill seen as an event {seen_s:.2f} s after the hog's exit; "
          f"test {time.monotonic() - t0:.0f} s")
