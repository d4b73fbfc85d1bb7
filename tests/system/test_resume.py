"""A run survives its own death (issue #32): `nestednet run` is killed with SIGKILL
mid-run, and `nestednet run --resume RUN_DIR` takes over on the real lab.

small-4x2 plays steps at 0, 10 and 20 s (30 s at speed 1). The CLI is killed once step
0's links are up; the links must still be there (flows are the lab's, not the
process's), the resumed run must adopt exactly those, carry on from the scenario time
it is, never make a link that is already up, and leave one valid JSON-lines events
stream with one `resumed` event; `--rm` then deletes the lab as the first run was asked.
"""

from __future__ import annotations

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


def test_a_killed_run_is_resumed_with_its_links_and_one_event_stream(tmp_path):
    forget(LAB)
    before = {p.name for p in RUNS_DIR.glob(f"{LAB}-*")} if RUNS_DIR.is_dir() else set()
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen([CLI, "run", str(SCENARIO), "--lab", LAB, "--speed", "1",
                              "--rm"], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    try:
        run_dir = _wait("the run's directory and record", lambda: next(
            (p for p in RUNS_DIR.glob(f"{LAB}-*")
             if p.name not in before and (p / "run.json").exists()), None))
        events = run_dir / "events.jsonl"
        _wait("step 0's links", lambda: events.exists() and any(
            r["event"] == "link_up" for r in _records(events)))
        time.sleep(1.0)  # step 0 settles; step 1 is at 10 s
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

    try:
        done = subprocess.run([CLI, "run", "--resume", str(run_dir), "--json"],
                              capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
        summary = json.loads(done.stdout)
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
