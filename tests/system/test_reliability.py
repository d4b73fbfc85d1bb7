"""Reliability under an unlucky or hostile user (issue 15): one writer per lab, crashes
at any instant, Ctrl-C, leaks and who may reach what NestedNet makes on the host.

The long versions run through `scripts/test crash` and `scripts/test race`, which set
NESTEDNET_CRASH_POINTS (SIGKILL points per command) and NESTEDNET_RACE_TRIES
(concurrent `link add` pairs); `make test` runs a few of each.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import host_state
import pytest
from labs import forget

from nestednet import images
from nestednet.lab import lock
from nestednet.lab.links import LabLinks
from nestednet.lab.nodes import Lab
from nestednet.lab.record import LabRecord

pytestmark = pytest.mark.system

CLI = str(Path(sys.executable).parent / "nestednet")
RACE_LAB = "trace"
CRASH_LAB = "tcrash"
CRASH_POINTS = int(os.environ.get("NESTEDNET_CRASH_POINTS", "2"))
RACE_TRIES = int(os.environ.get("NESTEDNET_RACE_TRIES", "4"))
SEED = int(os.environ.get("NESTEDNET_CRASH_SEED", str(int(time.time()))))

TWO_NODES = {
    "format": "nestednet-scenario/1", "name": "crash-2x2", "duration": 12, "iphys": 2,
    "nodes": [{"name": "n1", "id": 1}, {"name": "n2", "id": 2}],
    "steps": [{"time": 0, "visible": [["n1", "n2"]]}, {"time": 6, "visible": []}],
}


def nn(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


# --- one writer per lab ---------------------------------------------------------------

@pytest.fixture(scope="module")
def race_lab():
    forget(RACE_LAB)
    done = nn("create", "--lab", RACE_LAB, "-n", "2", "-m", "2", "--memory", "64")
    assert done.returncode == 0, done.stderr
    try:
        yield LabLinks.of(LabRecord(RACE_LAB))
    finally:
        forget(RACE_LAB)


def test_concurrent_link_adds_never_give_a_pair_two_links(race_lab):
    """`link add n1:iphy1 n2:iphy1 & link add n1:iphy2 n2:iphy2 & wait`, RACE_TRIES times:
    exactly one wins each time, the other is refused (exit 2, one link per pair)."""
    doubled, outcomes, odd = 0, [], []
    for _ in range(RACE_TRIES):
        race_lab.clear()
        procs = [subprocess.Popen([CLI, "link", "add", "--lab", RACE_LAB, f"n1:iphy{k}",
                                   f"n2:iphy{k}"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for k in (1, 2)]
        results = sorted((p.wait(timeout=120), p.stderr.read().strip()) for p in procs)
        outcomes.append(tuple(code for code, _ in results))
        if outcomes[-1] != (0, 2):
            odd.append(results)
        doubled += len(race_lab.links()) > 1
    race_lab.clear()
    print(f"race: {RACE_TRIES} tries, {doubled} gave the pair two links, exit codes "
          f"{ {c: outcomes.count(c) for c in set(outcomes)} }")
    assert doubled == 0
    assert odd == []


def test_links_are_refused_while_a_run_holds_the_lab(race_lab):
    with lock.hold(RACE_LAB, lock.RUN):
        started = time.monotonic()
        done = nn("link", "add", "--lab", RACE_LAB, "n1:iphy1", "n2:iphy1")
    assert done.returncode == 2, done.stderr
    assert "playing a scenario" in done.stderr and time.monotonic() - started < 30
    assert race_lab.links() == []


def test_a_run_refuses_a_lab_with_manual_links(race_lab, tmp_path):
    scenario = tmp_path / "two.json"
    scenario.write_text(json.dumps(TWO_NODES))
    assert nn("link", "add", "--lab", RACE_LAB, "n1:iphy1", "n2:iphy1").returncode == 0
    try:
        done = nn("run", str(scenario), "--lab", RACE_LAB, "--events",
                  str(tmp_path / "ev.jsonl"))
        assert done.returncode == 2 and "link(s) made by `nestednet link add`" in done.stderr
    finally:
        race_lab.clear()


# --- crashes at any instant -------------------------------------------------------------

def _killed_at(cmd: list[str], delay: float) -> tuple[float | None, str]:
    """Run ``cmd`` and SIGKILL it ``delay`` seconds in: (None if killed, else how long it
    ran; what happened)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        proc.wait(timeout=delay)
        ran = time.monotonic() - started
        return ran, (f"ended by itself (exit {proc.returncode}) after {ran:.2f} s, "
                     f"before {delay:.2f} s")
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return None, f"SIGKILL at {delay:.2f} s"


def _cleanup_leaves(before: set[str], what: str) -> tuple[dict, bool]:
    """`cleanup`, then what differs from ``before``; and whether the lab was complete.

    A kill after `create` wrote its record as complete leaves a whole lab, which cleanup
    rightly keeps: then `delete` must leave nothing instead.
    """
    time.sleep(0.5)  # a Docker request the killed process sent may still be finishing
    done = nn("cleanup")
    assert done.returncode == 0, done.stderr
    complete = LabRecord(CRASH_LAB).meta().get("status") == "complete"
    if complete:
        gone = nn("delete", "--lab", CRASH_LAB)
        assert gone.returncode == 0, gone.stderr
    diff = host_state.difference(before, host_state.snapshot())
    return ({"what": what, **diff} if diff["left"] or diff["gone"] else {}), complete


def _crash_points(duration: float, count: int, rng: random.Random) -> list[float]:
    """Kill points over the command's span. The last 5 % is left out: a repeat may finish a
    little sooner than the timed run, and a command that ended by itself proves nothing."""
    if count <= 3:  # make test: spread evenly, early, middle, late
        return [duration * (k + 0.5) / count for k in range(count)]
    return sorted(rng.uniform(0.05, 0.95 * duration) for _ in range(count))


@pytest.mark.parametrize("command", ["create", "run"])
def test_sigkill_at_any_instant_then_cleanup_leaves_the_host_as_before(command, tmp_path):
    forget(CRASH_LAB)
    scenario = tmp_path / "two.json"
    scenario.write_text(json.dumps(TWO_NODES))
    cmd = {"create": [CLI, "create", "--lab", CRASH_LAB, "-n", "2", "-m", "2"],
           "run": [CLI, "run", str(scenario), "--lab", CRASH_LAB, "--rm", "--speed", "2",
                   "--events", str(tmp_path / "ev.jsonl")]}[command]
    before = host_state.snapshot()
    started = time.monotonic()
    full = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    duration = time.monotonic() - started
    assert full.returncode == 0, full.stderr
    forget(CRASH_LAB)
    rng = random.Random(SEED)
    residue, log, kills = [], [], 0
    points = _crash_points(duration, CRASH_POINTS, rng)
    while points and len(log) < 2 * CRASH_POINTS:
        ran, what = _killed_at(cmd, points.pop(0))
        kills += ran is None
        left, complete = _cleanup_leaves(before, f"{command}: {what}")
        log.append(what + (" (the lab was complete: deleted)" if complete else ""))
        if left:
            residue.append(left)
        if ran is not None:  # it finished first (the timed run was slower): draw within this run
            kept = [p for p in points if p < 0.95 * ran]
            fresh = [rng.uniform(0.05, 0.95 * ran) for _ in range(CRASH_POINTS - kills - len(kept))]
            points = sorted(kept + fresh)
    print(f"crash {command}: seed {SEED}, full run {duration:.1f} s, {kills} SIGKILLs in "
          f"{len(log)} tries, {len(residue)} with residue: {log}")
    assert residue == []
    assert kills == CRASH_POINTS, f"only {kills} of {CRASH_POINTS} tries were killed: {log}"


# --- Ctrl-C ------------------------------------------------------------------------------

def _interactive_sigint() -> None:
    """The CLI as a user at a terminal starts it. A test suite started in the background
    of a non-interactive shell has SIGINT ignored, the CLI inherits that and rightly keeps
    it (as under `nohup ... &`): a Ctrl-C test would then see create finish (exit 0)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("terminal", [False, True])
def test_ctrl_c_during_create_rolls_back_and_exits_130(terminal):
    forget(CRASH_LAB)
    before = host_state.snapshot()
    create = [CLI, "create", "--lab", CRASH_LAB, "-n", "2", "-m", "2"]
    if terminal:
        cmd = ["script", "-qec", shlex.join(create), "/dev/null"]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, preexec_fn=_interactive_sigint)
    else:
        proc = subprocess.Popen(create, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=_interactive_sigint)
    deadline = time.monotonic() + 120
    while not (LabRecord(CRASH_LAB).path / "n1").exists():  # nodes are being built
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    if terminal:
        proc.stdin.write(b"\x03")
        proc.stdin.flush()
    else:
        proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=120)[0].decode(errors="replace")
    assert proc.returncode == 130, output
    assert "interrupted (Ctrl-C); rolled back, removed" in output
    assert "Aborted" not in output and "Traceback" not in output
    assert host_state.difference(before, host_state.snapshot()) == {"left": [], "gone": []}


# --- leaks and modes ---------------------------------------------------------------------

def test_the_privilege_probe_leaves_no_volume():
    from nestednet.adapters import docker_engine
    from nestednet.capabilities.nodes import _probe_parent_security

    client = docker_engine.connect()
    before = {v.name for v in client.volumes.list()}
    _probe_parent_security(client, images.DIND_IMAGE)
    assert {v.name for v in client.volumes.list()} - before == set()


def _mode(path: Path) -> tuple[str, int, int]:
    st = path.lstat()
    return stat.filemode(st.st_mode), st.st_uid, st.st_gid


def test_what_a_lab_makes_on_the_host_is_root_only(race_lab):
    """The labs directory is root's alone, engine sockets are root:root 0600 (as every
    wake makes them: dockerd makes its socket anew each start) and no socket, directory
    or record is open to others."""
    record = LabRecord(RACE_LAB)
    lab = Lab.open(RACE_LAB)
    for node in lab.shape.node_numbers():
        with lab.inner(node):
            pass
    found = {record.path.parent: _mode(record.path.parent)}
    for top, dirs, files in os.walk(record.path):
        dirs[:] = [d for d in dirs if d != "docker"]  # a node's inner data root
        for name in dirs + files:
            found[Path(top, name)] = _mode(Path(top, name))
    assert found[record.path.parent][0] == "drwx------"
    engines = {p: m for p, m in found.items() if p.name == "docker.sock"}
    assert len(engines) == 2 and set(engines.values()) == {("srw-------", 0, 0)}, engines
    open_to_others = {p: m for p, m in found.items() if "w" in m[0][7:] or m[1] != 0
                      or (m[0][0] == "s" and m[0][7:] != "---")}
    assert open_to_others == {}
    assert _mode(lock.lock_path(RACE_LAB))[0] == "-rw-------"
