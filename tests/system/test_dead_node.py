"""A node killed under a lab (issue 15, item 6), with a real `docker kill` of its container.

Its inner engine, switch and veths die with it. `status`, `link list` and `exec` must say
so and say what to do (re-create the lab); the other node must still answer; `delete`
must leave the host as it was before the lab.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import host_state
import pytest
from labs import forget

from nestednet.model import topology as topo

pytestmark = pytest.mark.system

CLI = str(Path(sys.executable).parent / "nestednet")


def nn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("design", ["nested", "flat"])
def test_a_killed_node_is_reported_with_its_broken_link_and_delete_leaves_nothing(design):
    lab = f"tdead{design[0]}"
    forget(lab)
    before = host_state.snapshot()
    made = nn("create", "--lab", lab, "-n", "2", "-m", "2", "--memory", "64",
              *(["--flat"] if design == "flat" else []))
    assert made.returncode == 0, made.stderr
    try:
        assert nn("link", "add", "--lab", lab, "n1:iphy1", "n2:iphy1").returncode == 0
        subprocess.run(["docker", "kill", topo.parent_container(lab, 1)], check=True,
                       capture_output=True)

        status = json.loads(nn("status", "--lab", lab, "--json").stdout)
        states = {n["node"]: n["state"] for n in status["nodes"]}
        assert states == {"n1": "exited", "n2": "running"}, states

        rows = json.loads(nn("link", "list", "--lab", lab, "--json").stdout)
        assert [r["broken"] for r in rows] == ["n1:iphy1 on a dead node"], rows
        text = nn("link", "list", "--lab", lab).stdout
        assert "BROKEN" in text and "dead nodes: n1" in text and "create the lab again" in text

        dead = nn("exec", "--lab", lab, "n1", "gnab", "--", "true")
        assert dead.returncode != 0
        assert "n1 is dead" in dead.stderr and "create the lab again" in dead.stderr
        assert "Docker engine not reachable" not in dead.stderr
        assert "Traceback" not in dead.stderr
        alive = nn("exec", "--lab", lab, "n2", "gnab", "--", "true")
        assert alive.returncode == 0, alive.stderr
    finally:
        gone = nn("delete", "--lab", lab)
    assert gone.returncode == 0, gone.stderr
    diff = host_state.difference(before, host_state.snapshot())
    assert not diff["left"] and not diff["gone"], diff
