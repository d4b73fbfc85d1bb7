"""`nestednet run` as a user runs it: a process, with and without a terminal.

A 4-node x 2-iPHY lab; a NestedNet-format file played on it without --iphys, and
Ctrl-C (SIGINT without a terminal, ^C typed into a pty under `script`) in the middle
of a run: exit 130, the summary so far, no links left on the main bridge.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labs import module_lab

from nestednet.lab.links import LabLinks
from nestednet.lab.record import LabRecord
from nestednet.model import events as ev

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "nestednet")
LAB = "trcli"
SMALL = ROOT / "scenarios" / "small-4x2.json"


@pytest.fixture(scope="module")
def lab():
    with module_lab(LAB, nodes=4, iphys=2) as record:
        yield record


def _wait_for_link_up(events: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before any link came up"
        if events.exists() and '"event":"link_up"' in events.read_text():
            return
        time.sleep(0.2)
    raise AssertionError("no link_up within the time allowed")


def _no_flows_left(record: LabRecord) -> bool:
    return LabLinks.of(record).links() == []


def test_nestednet_format_file_takes_the_labs_iphys(lab, tmp_path):
    scenario = tmp_path / "nn-format.json"
    made = subprocess.run([CLI, "visibility", "generate", "--nodes", "4", "--duration", "4",
                           "--step", "2", "--range", "100", "--model", "static",
                           "--format", "nestednet", "-o", str(scenario)],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    events = tmp_path / "ev.jsonl"
    done = subprocess.run([CLI, "run", str(scenario), "--lab", LAB, "--speed", "4",
                           "--events", str(events), "--json"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["steps_played"] == 2 and summary["events"] == str(events)
    recorded = ev.read_events(events)
    step_lines = [ln for ln in done.stderr.splitlines() if " step " in ln and "requests" in ln]
    assert len(step_lines) == 2, done.stderr
    for k, line in enumerate(step_lines):
        ups = sum(1 for e in recorded if e.event == ev.LINK_UP and e.step == k)
        assert f"step {k + 1}/2 " in line and f"new {ups}," in line, (line, ups)
    assert _no_flows_left(lab)


def _interrupt_and_check(proc: subprocess.Popen, send, lab: LabRecord,
                         events: Path, code: int = 130) -> str:
    _wait_for_link_up(events, proc)
    sent = time.monotonic()
    send()
    out, _ = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == code, out
    assert "run interrupted" in out and f"events in {events}" in out, out
    assert took < 30, f"Ctrl-C took {took:.1f} s"
    assert _no_flows_left(lab)
    return out


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_without_a_terminal(lab, tmp_path, sig, code):
    """SIGTERM (kill, timeout, a service manager) stops a run as Ctrl-C does: links
    removed, summary printed, and no run marker or clock left beside the lab."""
    events = tmp_path / "ev.jsonl"
    proc = subprocess.Popen([CLI, "run", str(SMALL), "--lab", LAB, "--speed", "0.5",
                             "--events", str(events)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    try:
        out = _interrupt_and_check(proc, lambda: proc.send_signal(sig), lab, events, code)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "KeyError" not in out and "Traceback" not in out
    assert not [p.name for p in lab.path.parent.glob(f"{LAB}.*")
                if p.suffix in (".run", ".clock")]


def test_ctrl_c_under_a_terminal(lab, tmp_path):
    """^C typed into the pty reaches the whole foreground group, as a user's Ctrl-C does."""
    events = tmp_path / "ev.jsonl"
    command = shlex.join([CLI, "run", str(SMALL), "--lab", LAB, "--speed", "0.5",
                          "--events", str(events)])
    proc = subprocess.Popen(["script", "-qec", command, "/dev/null"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env={**os.environ, "TERM": "xterm",
                                                   "COLUMNS": "200"})

    def type_ctrl_c() -> None:
        assert proc.stdin is not None
        proc.stdin.write("\x03")
        proc.stdin.flush()

    try:
        out = _interrupt_and_check(proc, type_ctrl_c, lab, events)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in out
