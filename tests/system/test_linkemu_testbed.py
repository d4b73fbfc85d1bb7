"""The software testbed end to end: real namespaces, real OVS, real os-ken rest_router.

Everything here is named ler* and uses its own state dir and loopback ports, so a
user's testbed (le*) on the same machine is never touched. Runs on the host's
userspace datapath and, unchanged, in the full-kernel VM (kernel datapath):
    scripts/kernel-vm .venv/bin/python -m pytest -m system tests/system/test_linkemu_testbed.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from linkemu import router, router_plan, testbed
from linkemu.cli import main
from linkemu.router_api import NotConnected, RouterApi
from nestednet.adapters import netns_exec
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.errors import EnvironmentProblem, UsageError

PREFIX = "ler"
CLIENTS = 2


def _in_ns(namespace: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return netns_exec.run(namespace, argv, timeout=timeout)


def _namespaces() -> list[str]:
    from pyroute2 import netns

    return [n for n in netns.listnetns() if n.startswith(f"{PREFIX}-")]


def _host_links() -> list[str]:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        names = [link.get_attr("IFLA_IFNAME") for link in ipr.get_links()]
    return [n for n in names if n.startswith(f"{PREFIX}-")]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("linkemu-state")
    result = CliRunner().invoke(main, [
        "testbed", "up", "--clients", str(CLIENTS), "--prefix", PREFIX, "--state-dir",
        str(where), "--json"])
    try:
        assert result.exit_code == 0, result.output + repr(result.exception)
        yield where
    finally:
        testbed.down(where)


@pytest.fixture(scope="module")
def info(state: Path) -> dict:
    layout = testbed.Layout(clients=CLIENTS, prefix=PREFIX)
    rec = testbed.recorded(state)
    assert rec is not None and rec["prefix"] == PREFIX
    return {"layout": layout, "router": router.load_state(state)}


@pytest.mark.system
def test_every_client_pings_the_server_through_the_router(info: dict) -> None:
    layout = info["layout"]
    for i in range(1, CLIENTS + 1):
        done = _in_ns(layout.client_ns(i), "ping", "-c", "3", "-i", "0.2", "-W", "3",
                      str(layout.SERVER.ip))
        assert done.returncode == 0, done.stdout + done.stderr
        # 64 - edge router - OVS router: the reply was routed by rest_router's flows.
        assert re.search(r"ttl=62 ", done.stdout), done.stdout


@pytest.mark.system
def test_a_tcp_transfer_completes(info: dict) -> None:
    layout = info["layout"]
    size = 4 * 1024 * 1024
    receiver = textwrap.dedent(f"""
        import hashlib, socket
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("{layout.SERVER.ip}", 25201)); s.listen(1); s.settimeout(30)
        print("ready", flush=True)
        c, _ = s.accept(); c.settimeout(30); h = hashlib.sha256(); n = 0
        while chunk := c.recv(65536):
            h.update(chunk); n += len(chunk)
        print(n, h.hexdigest(), flush=True)
    """)
    sender = textwrap.dedent(f"""
        import hashlib, os, socket
        data = os.urandom({size})
        c = socket.create_connection(("{layout.SERVER.ip}", 25201), timeout=30)
        c.sendall(data); c.close()
        print({size}, hashlib.sha256(data).hexdigest())
    """)
    server = netns_exec.popen(layout.server_ns, [sys.executable, "-c", receiver],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        sent = _in_ns(layout.client_ns(1), sys.executable, "-c", sender, timeout=60)
        assert sent.returncode == 0, sent.stderr
        received, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert received.split() == sent.stdout.split()


@pytest.mark.system
def test_router_status_is_healthy_and_holds_the_plan(state: Path, info: dict) -> None:
    st = router.status(state)
    assert st.healthy, st.problems
    assert st.problems == ()
    plan = router_plan.plan(info["layout"].link_table())
    assert st.router is not None
    assert set(st.router["addresses"]) == {str(a.address) for a in plan.addresses}
    assert {(r["destination"], r["gateway"]) for r in st.router["routes"]} == {
        (str(r.destination), str(r.gateway)) for r in plan.routes}
    result = CliRunner().invoke(main, ["router", "status", "--state-dir", str(state), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["healthy"] is True
    from nestednet.capabilities.nodes import ovs_datapath

    with Ovsdb() as db:  # kernel datapath where the module exists (the VM), else netdev
        kind = db.api.db_get("Bridge", f"{PREFIX}-br", "datapath_type").execute(check_error=True)
    assert kind == ovs_datapath()


@pytest.mark.system
def test_configuring_the_same_plan_again_sends_nothing(state: Path, info: dict) -> None:
    result = router.configure(router_plan.plan(info["layout"].link_table()), state)
    assert result["changed"] is False


@pytest.mark.system
def test_rest_errors_are_clear_and_change_nothing(state: Path, info: dict) -> None:
    rs: router.RouterState = info["router"]
    api = rs.api()
    before = api.get(rs.dpid)
    with pytest.raises(UsageError, match=r"198\.18\.300\.1/24.*not an IPv4 address"):
        api.add_address(rs.dpid, "198.18.300.1/24")
    # Sent as is, rest_router itself crashes (HTTP 500 + traceback): still a clear error.
    with pytest.raises(UsageError, match=r"router rejected POST .*bogus.*HTTP 500"):
        api.post(rs.dpid, {"address": "bogus"})
    with pytest.raises(UsageError, match="overlaps a network the router already has"):
        api.add_address(rs.dpid, "198.18.0.9/24")
    with pytest.raises(UsageError, match="gateway is in none of the router's networks"):
        api.add_route(rs.dpid, "10.9.0.0/16", "10.1.1.1")
    with pytest.raises(NotConnected, match="not connected"):
        api.get("00000000000000ff")
    with pytest.raises(EnvironmentProblem, match="not answering"):
        RouterApi(str(state / "absent.sock"), timeout=2).get(rs.dpid)
    assert api.get(rs.dpid) == before
    with pytest.raises(UsageError, match="bridge"):
        router.configure(router_plan.plan(testbed.Layout(prefix="lerq").link_table()), state)


@pytest.mark.system
def test_failed_up_removes_what_it_built(tmp_path: Path) -> None:
    layout = testbed.Layout(clients=1, prefix="ler9")
    # A state directory too long for a unix socket path: the router cannot start.
    where = tmp_path / ("x" * 100)
    with pytest.raises(UsageError, match="too long for a unix socket"):
        testbed.up(layout, directory=where)
    from pyroute2 import netns

    assert not [n for n in netns.listnetns() if n.startswith("ler9-")]
    assert not [n for n in _host_links() if n.startswith("ler9-")]
    with Ovsdb() as db:
        assert not db.bridge_exists(layout.bridge)
    assert testbed.recorded(where) is None


@pytest.mark.system
def test_router_on_someone_elses_bridge_restores_its_settings(tmp_path: Path) -> None:
    from nestednet.capabilities.nodes import ovs_datapath

    bridge = "lerx-ctl"
    with Ovsdb() as db:
        db.add_bridge(bridge, datapath_type=ovs_datapath(),
                      external_ids={"owner": "someone"},
                      protocols=("OpenFlow10",))
        db.set_controller(bridge, "tcp:127.0.0.1:1", connection_mode="in-band")
    try:
        started = router.start(bridge, directory=tmp_path)
        assert router.status(tmp_path).healthy
        with Ovsdb() as db:
            assert db.controllers(bridge) == [started.controller]
            assert "OpenFlow13" in db.protocols(bridge)
        assert router.stop(tmp_path)["stopped"] is True
        assert not router.process_alive(started.pid, started.argv)
        with Ovsdb() as db:
            assert db.controllers(bridge) == ["tcp:127.0.0.1:1"]
            assert db.protocols(bridge) == ["OpenFlow10"]
        assert router.stop(tmp_path)["stopped"] is False
    finally:
        router.stop(tmp_path)
        with Ovsdb() as db:
            db.del_bridge(bridge)


@pytest.mark.system
def test_down_removes_exactly_what_up_made(state: Path, info: dict) -> None:
    rs: router.RouterState = info["router"]
    with Ovsdb() as db:
        db.add_bridge("lerx-keep", datapath_type="netdev", external_ids={"owner": "someone"})
    try:
        result = CliRunner().invoke(main, ["testbed", "down", "--state-dir", str(state),
                                           "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["removed"]
        assert _namespaces() == []
        assert _host_links() == []
        assert not router.process_alive(rs.pid, rs.argv)
        with Ovsdb() as db:
            assert not db.bridge_exists(f"{PREFIX}-br")
            assert db.bridge_exists("lerx-keep")
        assert not router.status(state).running
        again = CliRunner().invoke(main, ["testbed", "down", "--state-dir", str(state)])
        assert again.exit_code == 0 and "nothing to remove" in again.output
    finally:
        with Ovsdb() as db:
            db.del_bridge("lerx-keep")
