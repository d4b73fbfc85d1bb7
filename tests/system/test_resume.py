"""A run survives its own death (issue #32): `nestednet run` is killed with SIGKILL
mid-run, and `nestednet run --resume RUN_DIR` takes over on the real lab.

small-4x2 plays steps at 0, 10 and 20 s (30 s at speed 1), here with two faults from
1 s: n1-n2 down until 15 s and n4 crashed (frozen, its links cut) until 25 s. The CLI is
killed once step 0's links are up and both faults have begun; the links must still be
there (flows are the lab's, not the process's), the resumed run must adopt exactly
those, carry on from the scenario time it is, never make a link that is already up, and
leave one valid JSON-lines events stream with one `resumed` event. The faults under way
must be applied again (their cues came before the resumed time and are never played):
no link of n1-n2 before 15 s nor of n4 before 25 s, n4 still frozen meanwhile (its agent
silent: the resumed run must not wait for its HELLO) and thawed by its restart cue.
`--rm` then deletes the lab as the first run was asked.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labs import forget

from nestednet.lab import designs
from nestednet.lab.nodes import Lab
from nestednet.lab.record import LabRecord
from nestednet.lab.runs import RUNS_DIR, RunMarker
from nestednet.model.scenario_file import load_scenario

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "nestednet")
LAB = "trs"
SCENARIO = ROOT / "scenarios" / "small-4x2.json"


def _wait(what: str, check, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (found := check()):
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _links_now() -> set[tuple[str, str]]:
    lab = Lab.open(LAB)
    found = designs.of(lab.meta).links(lab.record, lab.meta).links()
    return {(str(a), str(b)) for a, b in found}


def _n4_paused() -> bool:
    parent = Lab.open(LAB).parent(4)
    parent.reload()
    return parent.status == "paused"


def test_a_killed_run_is_resumed_with_its_links_and_one_event_stream(tmp_path):
    forget(LAB)
    scenario = tmp_path / "small-4x2-faults.json"
    scenario.write_text(json.dumps(json.loads(SCENARIO.read_text()) | {"actions": [
        {"action": "link-down", "from": 1, "until": 15, "between": ["n1", "n2"]},
        {"action": "crash", "from": 1, "until": 25, "node": "n4"}]}))
    before = {p.name for p in RUNS_DIR.glob(f"{LAB}-*")} if RUNS_DIR.is_dir() else set()
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen([CLI, "run", str(scenario), "--lab", LAB, "--speed", "1",
                              "--rm"], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    try:
        run_dir = _wait("the run's directory and record", lambda: next(
            (p for p in RUNS_DIR.glob(f"{LAB}-*")
             if p.name not in before and (p / "run.json").exists()), None))
        events = run_dir / "events.jsonl"
        _wait("step 0's links", lambda: events.exists() and any(
            r["event"] == "link_up" for r in _records(events)))
        _wait("both faults begun", lambda: {(r["action"], r["op"]) for r in _records(events)
                                            if r["event"] == "action"}
              >= {("link-down", "cut"), ("crash", "crash"), ("crash", "cut")})
        time.sleep(1.0)  # the cuts' links go down; step 1 is at 10 s
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    killed_at = time.time()
    links = _links_now()
    assert links, "the killed run's links should still be in the lab's flows"
    assert RunMarker(LAB).read().get("pid") == first.pid
    before_kill = _records(events)

    assert _n4_paused(), "the crash should have frozen n4 before the kill"

    paused: list[tuple[float, bool]] = []  # (scenario time, n4 frozen) while resumed
    try:
        second = subprocess.Popen([CLI, "run", "--resume", str(run_dir), "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL)
        try:
            origin = None
            while second.poll() is None:
                time.sleep(0.5)
                if origin is None:
                    origin = next((r["t0_wall"] for r in _records(events)[len(before_kill):]
                                   if r["event"] == "play"), None)
                    continue
                with contextlib.suppress(Exception):  # the lab goes at the end (--rm)
                    state = _n4_paused()
                    now = time.time() - origin
                    if now < 29:
                        paused.append((now, state))
            out, err = second.communicate(timeout=300)
        finally:
            if second.poll() is None:
                second.kill()
        assert second.returncode == 0, f"{out}\n{err[-3000:]}"
        summary = json.loads(out)
    finally:
        forget(LAB)

    records = _records(events)  # every line parses: one valid stream
    assert records[:len(before_kill)] == before_kill
    resumed = [r for r in records if r["event"] == "resumed"]
    assert len(resumed) == 1, resumed
    names = load_scenario(SCENARIO).node_names
    adopted = {tuple(sorted((f"n{names.index(a) + 1}:iphy{ai}",
                             f"n{names.index(b) + 1}:iphy{bi}")))
               for a, ai, b, bi in resumed[0]["links"]}
    assert adopted == {tuple(sorted(pair)) for pair in links}
    last_step = max(r["scenario_time"] for r in before_kill if r["event"] == "step")
    waited = resumed[0]["wall_time"] - killed_at
    assert resumed[0]["scenario_time"] >= last_step and waited >= 0

    up = {frozenset((a, b)) for a, _, b, _ in resumed[0]["links"]}
    after = records[records.index(resumed[0]) + 1:]
    for record in after:
        pair = frozenset(record.get("nodes", ()))
        if record["event"] == "link_up":
            assert pair not in up, f"link made twice: {record}"
            up.add(pair)
        elif record["event"] == "link_down":
            assert pair in up, f"a link that was not up went down: {record}"
            up.discard(pair)
    # The step in effect at the resumed time is applied again at once, then the rest.
    assert [r["step"] for r in after if r["event"] == "step"] == \
        list(range(int(resumed[0]["scenario_time"] // 10), 3))
    assert summary["removed_lab"] and summary["scenario_time"] == pytest.approx(30, abs=1)
    assert not LabRecord(LAB).exists() and not RunMarker(LAB).path.exists()

    # The faults under way were applied again, then ended at their own cues.
    resumed_at = resumed[0]["scenario_time"]
    again = {(r["action"], r["op"]) for r in after
             if r["event"] == "action" and r.get("reapplied")}
    assert again == {("link-down", "cut"), ("crash", "crash"), ("crash", "cut")}, after
    ends = {(r["action"], r["op"]): r for r in after
            if r["event"] == "action" and not r.get("reapplied")}
    assert "error" not in ends[("crash", "restart")], ends
    for record in after:
        if record["event"] != "link_up":
            continue
        nodes = set(record["nodes"])
        assert nodes != {"n1", "n2"} or record["scenario_time"] >= 15, record
        assert "n4" not in nodes or record["scenario_time"] >= 25, record
    frozen = [t for t, p in paused if p]
    thawed = [t for t, p in paused if not p]
    assert frozen and min(t for t, _ in paused) < 24, paused  # seen frozen while crashed
    # thawed by the restart cue at 25 s, not before (1 s for the reads' own time)
    assert all(t < 26 for t in frozen) and thawed and min(thawed) > 24.5, paused
    assert resumed_at < 15, resumed_at


def test_a_full_events_disk_stops_the_run_cleanly_and_names_the_disk(tmp_path):
    """A 64 KiB tmpfs holds the events file, filled until 4 KiB are left: small-4x2's
    events (about 9 KB) outgrow it mid-run. The run must stop (exit 1) naming that disk,
    with its links removed, and the file must end on a whole line."""
    forget(LAB)
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 1024)
        except OSError:
            pass
        finally:
            os.close(fd)
        # tmpfs counts whole pages: free exactly one (step 0 fits, the run's rest does not)
        os.truncate(filler, (filler.stat().st_size // 4096 - 1) * 4096)
        events = disk / "events.jsonl"
        done = subprocess.run([CLI, "run", str(SCENARIO), "--lab", LAB, "--speed", "3",
                               "--events", str(events)], capture_output=True, text=True,
                              timeout=300, stdin=subprocess.DEVNULL)
        assert done.returncode == 1, f"{done.stdout}\n{done.stderr}"
        assert f"the disk of {disk} refused the events file" in done.stderr, done.stderr
        assert "links are removed" in done.stderr
        data = events.read_bytes()
        assert data and data.endswith(b"\n")
        kinds = [json.loads(line)["event"] for line in data.decode().splitlines()]
        assert "step" in kinds
        assert _links_now() == set(), "the stopped run left links behind"
        assert not RunMarker(LAB).path.exists()
    finally:
        subprocess.run(["umount", str(disk)], check=False)
        forget(LAB)
