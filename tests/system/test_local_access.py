"""Issue #33 (sections 4, 5) and #32 (item 4): what a local user who is not root can reach.
A probe runs as `nobody` (the system Python, standard library only) while a linkemu
router runs on a bridge of this test's, its state directory below a directory everyone
may enter (so only the router's own 0700 directory protects it), and after NestedNet
made a run directory under /var/lib/nestednet. The probe must be refused everything:
the router's REST API and OpenFlow listener (unix sockets) and its old TCP ports, every
directory and file under /var/lib/nestednet, the engine's and Open vSwitch's sockets
(through which a lab or a link would be changed, or a node's engine read). Root still
reaches the router (the control)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from linkemu import router
from nestednet.adapters.files import STATE_ROOT
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.nodes import ovs_datapath
from nestednet.lab import runs

pytestmark = pytest.mark.system

BRIDGE = "secacc-br"
PROBE = r"""
import json, os, socket, sys
out = {}
def attempt(label, action):
    try:
        action()
        out[label] = "allowed"
    except PermissionError:
        out[label] = "denied"
    except OSError as exc:
        out[label] = f"refused: {exc.strerror or exc}"
def unix(path):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
    finally:
        s.close()
def tcp(port):
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
def read_all(root):
    # Any entry listed or any file opened under root is a finding.
    for entry in os.listdir(root):
        out[f"listed {root}/{entry}"] = "allowed"
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if os.path.isdir(path):
            read_all(path)
        else:
            open(path, "rb").close()
args = json.loads(sys.argv[1])
attempt("router REST socket", lambda: unix(args["rest"]))
attempt("router OpenFlow socket", lambda: unix(args["openflow"]))
attempt("router state file", lambda: open(args["state"]).close())
for port in (6633, 6653, 16653, 18081):
    attempt(f"tcp 127.0.0.1:{port}", lambda port=port: tcp(port))
attempt("/var/lib/nestednet", lambda: read_all("/var/lib/nestednet"))
for name in args["below"]:
    attempt(f"/var/lib/nestednet/{name}",
            lambda name=name: os.listdir(f"/var/lib/nestednet/{name}"))
attempt("docker engine socket", lambda: unix("/var/run/docker.sock"))
attempt("ovsdb socket", lambda: unix(args["ovsdb"]))
print(json.dumps(out))
"""


@pytest.fixture
def running_router():
    outer = Path(f"/var/tmp/nestednet-secacc-{os.getpid()}")
    outer.mkdir(mode=0o755)
    os.chmod(outer, 0o755)  # anyone may enter: the router's own directory must protect it
    with Ovsdb() as db:
        db.add_bridge(BRIDGE, datapath_type=ovs_datapath(), external_ids={"owner": "test"})
    try:
        state = router.start(BRIDGE, directory=outer / "linkemu")
        yield state, outer / "linkemu"
    finally:
        router.stop(outer / "linkemu")
        with Ovsdb() as db:
            db.del_bridge(BRIDGE)
        shutil.rmtree(outer, ignore_errors=True)


def _ovsdb_socket() -> str:
    for path in ("/var/run/openvswitch/db.sock", "/run/openvswitch/db.sock"):
        if os.path.exists(path):
            return path
    return "/var/run/openvswitch/db.sock"


def test_nobody_reaches_neither_the_router_nor_nestednets_state(running_router):
    state, where = running_router
    made = runs.results_dir("secacc")  # NestedNet's own state directory, made as it makes it
    try:
        below = sorted(p.name for p in STATE_ROOT.iterdir())
        args = {"rest": state.rest_socket, "openflow": state.ofp_socket,
                "state": str(where / router.STATE_FILE), "below": below,
                "ovsdb": _ovsdb_socket()}
        done = subprocess.run(["/usr/bin/python3", "-c", PROBE, json.dumps(args)],
                              capture_output=True, text=True, timeout=60, user="nobody",
                              group="nogroup", extra_groups=[], cwd="/")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        print(json.dumps(found, indent=1))
        allowed = {k: v for k, v in found.items() if v == "allowed"}
        assert allowed == {}, allowed
        for key in ("router REST socket", "router OpenFlow socket", "router state file",
                    "/var/lib/nestednet", "docker engine socket"):
            assert found[key] == "denied", (key, found[key])
        assert all(found[f"tcp 127.0.0.1:{p}"].startswith("refused")
                   for p in (6633, 6653, 16653, 18081))
    finally:
        shutil.rmtree(made, ignore_errors=True)
    # The control: root reaches the router, and the bridge joined it over the socket.
    assert router.status(where).healthy
    assert state.api().connected(state.dpid)
    assert STATE_ROOT.stat().st_mode & 0o777 == 0o700
    assert (where / router.STATE_FILE).stat().st_mode & 0o777 == 0o600
