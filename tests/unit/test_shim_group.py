"""The node image's shim wrapper (images/dind/shim-group), run here with a stand-in for
the real containerd shim: a start joins the shim a sibling container already uses while
something listens on its socket (busy or not), and only a dead or missing shim makes the
real `start` run.

The real `start` dials with a 100 ms timeout and replaces the socket of a shim that
misses it; that lost a node's GNAB in the emulated VM (the wrapper's comment)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

WRAPPER = Path(__file__).resolve().parents[2] / "images" / "dind" / "shim-group"
GROUP = '"io.containerd.runc.v2.group":"nestednet"'


def namespace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A bundle directory beside others (containerd's <state>/<ns>/<id>), and the
    environment that runs the wrapper with a fake real shim recording its calls."""
    ns = tmp_path / "moby"
    bundle = ns / "new"
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_text('{"ociVersion":"1.0.2"}')
    fake = tmp_path / "real-shim"
    fake.write_text('#!/bin/sh\necho "$*" >>"$CALLS"\nprintf unix:///fresh\n')
    fake.chmod(0o755)
    env = {**os.environ, "NESTEDNET_REAL_SHIM": str(fake), "CALLS": str(tmp_path / "calls"),
           "NESTEDNET_SHIM_LOCK": str(tmp_path / "lock")}
    return bundle, env


def start(bundle: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(WRAPPER), "-namespace", "moby", "-id", "new", "start"],
                          cwd=bundle, env=env, capture_output=True, text=True, timeout=60)


def sibling(bundle: Path, name: str, address: str) -> None:
    (bundle.parent / name).mkdir()
    (bundle.parent / name / "address").write_text(address)


def calls(env: dict[str, str]) -> list[str]:
    path = Path(env["CALLS"])
    return path.read_text().splitlines() if path.exists() else []


def test_a_live_sibling_shim_is_joined_even_when_it_does_not_accept(tmp_path):
    bundle, env = namespace(tmp_path)
    path = tmp_path / "group.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen(8)  # never accepts: a shim too busy to answer within 100 ms
        sibling(bundle, "gnab", f"unix://{path}")
        done = start(bundle, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"unix://{path}"
    assert (bundle / "address").read_text() == f"unix://{path}"
    assert calls(env) == []
    assert GROUP in (bundle / "config.json").read_text()
    json.loads((bundle / "config.json").read_text())


def test_without_a_sibling_the_real_start_makes_the_shim(tmp_path):
    bundle, env = namespace(tmp_path)
    done = start(bundle, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "unix:///fresh"
    assert calls(env) == ["-namespace moby -id new start"]
    assert GROUP in (bundle / "config.json").read_text()


def test_a_dead_sibling_shim_is_passed_over(tmp_path):
    bundle, env = namespace(tmp_path)
    path = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as gone:
        gone.bind(str(path))  # the file stays, nothing listens: connection refused
    sibling(bundle, "gnab", f"unix://{path}")
    sibling(bundle, "iphy1", f"unix://{tmp_path / 'missing.sock'}")
    done = start(bundle, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "unix:///fresh"
    assert calls(env) == ["-namespace moby -id new start"]
    assert not (bundle / "address").exists()


def test_other_commands_and_a_second_start_pass_through_unchanged(tmp_path):
    bundle, env = namespace(tmp_path)
    done = subprocess.run(["sh", str(WRAPPER), "-id", "new", "delete"], cwd=bundle, env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and calls(env) == ["-id new delete"]
    assert GROUP not in (bundle / "config.json").read_text()
    start(bundle, env)
    start(bundle, env)
    assert (bundle / "config.json").read_text().count(GROUP) == 1
