"""Issue #33: what the per-host helper refuses, root-free. Each test names the attack it
stands for; tests/system/test_hostd_security.py tries them against a real helper."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.hostd import protocol as p
from nestednet.hostd import server, service, streams
from nestednet.hostd.client import HelperClient, check_host_name
from nestednet.lab import multihost as mh
from nestednet.model import placement as pl
from nestednet.model import topology as topo

pytestmark = pytest.mark.unit

HOSTS = (pl.Host("a", "10.0.0.1"), pl.Host("b", "10.0.0.2"))


# --- 1. plain TCP only when asked for by name -------------------------------------------


def test_plain_tcp_needs_insecure_everywhere(capsys):
    from nestednet.hostd import __main__ as cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--listen", "127.0.0.1", "--port", "7000", "--state-dir", "/tmp"])
    assert exit_.value.code == 2 and "--insecure" in capsys.readouterr().err
    with pytest.raises(UsageError, match="no `ssl`"):
        service.command(pl.HostSet(HOSTS))
    assert "--insecure" in service.command(pl.HostSet(HOSTS, insecure=True))
    with pytest.raises(UsageError, match="plain TCP"):
        HelperClient("a", "10.0.0.1", 6651, None)
    doc = pl.hosts_doc(pl.HostSet(HOSTS, insecure=True))
    assert doc["insecure"] is True and pl.hosts_from_doc(doc).insecure


# --- 2. names: reserved labs, fullmatch, masters and underlays ---------------------------


@pytest.mark.parametrize("lab", ["br", "ovs", "docker", "veth", "kube", "cni", "flannel",
                                 "virbr", "virbr0", "docker1", "lo"])
def test_lab_names_that_prefix_other_softwares_interfaces_are_reserved(lab):
    with pytest.raises(UsageError, match="reserved"):
        topo.check_new_lab_name(lab)
    with pytest.raises(p.ProtocolError, match="reserved"):
        p.check_request({"op": "link.delete", "args": {"lab": lab, "names": [f"{lab}-x"]}})


def test_ordinary_names_starting_like_a_reserved_one_stay_allowed():
    for lab in ("bravo", "ovsx1", "mh", "lab1", "lobby"):
        assert topo.check_new_lab_name(lab) == lab
        p.check_request({"op": "link.list", "args": {"lab": lab}})


@pytest.mark.parametrize("message", [
    {"op": "state.mkdir", "args": {"lab": "ab", "name": "ab-n1\n"}},
    {"op": "link.list", "args": {"lab": "ab\n"}},
    {"op": "link.delete", "args": {"lab": "ab", "names": ["ab-x\n"]}},
    {"op": "forward", "args": {"lab": "ab", "parent": "ab-n1\n", "socket": "docker.sock"}},
])
def test_a_trailing_newline_does_not_pass_a_name_check(message):
    with pytest.raises(p.ProtocolError):
        p.check_request(message)


VXLAN = {"lab": "mh", "name": "mh-t1", "vni": 7, "local": "10.0.0.1", "remote": "10.0.0.2",
         "port": 4789, "underlay": "eth0", "mtu": None, "master": None}


def test_a_tunnel_master_must_be_the_labs():
    with pytest.raises(p.ProtocolError, match="master 'docker0'"):
        p.check_request({"op": "link.vxlan", "args": {**VXLAN, "master": "docker0"}})
    p.check_request({"op": "link.vxlan", "args": {**VXLAN, "master": "mh-ctl"}})


# --- 3. sizes ---------------------------------------------------------------------------


def test_request_sizes_are_capped():
    hello = {"op": "hello", "args": {}}
    with pytest.raises(p.ProtocolError, match="at most 256 requests"):
        p.check_request({"op": "batch", "args": {"requests": [hello] * (p.MAX_BATCH + 1)}})
    p.check_request({"op": "batch", "args": {"requests": [hello] * p.MAX_BATCH}})
    with pytest.raises(p.ProtocolError, match="at most 1000"):
        p.check_request({"op": "routes", "args": {"lab": "mh", "pids": {
            str(i): i for i in range(1, 1002)}}})
    with pytest.raises(p.ProtocolError, match="at most 1000"):
        p.check_request({"op": "pids", "args": {"lab": "mh", "node": 1, "parent": 5,
                                                "inner": list(range(1, 1002))}})
    with pytest.raises(p.ProtocolError, match="over the 1048576"):
        p.frame_length(struct.pack(">I", 16 * 1024 * 1024))


def test_deeply_nested_json_is_a_protocol_error():
    with pytest.raises(p.ProtocolError, match="too deeply"):
        p.decode(b"[" * 100_000 + b"]" * 100_000)


def test_frames_are_read_into_one_buffer():
    a, b = socket.socketpair()
    def send() -> None:
        a.sendall(b"x" * 300_000)
        a.shutdown(socket.SHUT_WR)

    with a, b:
        sender = threading.Thread(target=send)
        sender.start()
        data = streams.recv_exact(b, 400_000)
        sender.join()
    assert isinstance(data, bytearray) and len(data) == 300_000


# --- 2. the helper's own checks: owners, pids, tc ports ----------------------------------


@pytest.fixture
def helper(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    return server.Helper(state, labs_file=state / "hostd" / "labs.json")


def test_a_lab_belongs_to_the_client_that_made_it(helper):
    helper.authorise("link.bridge", {"lab": "mh", "name": "mh-ctl"}, "CN=alice")
    helper.labs.add("mh", ["mh-ctl"])
    for op, args in (("link.delete", {"lab": "mh", "names": ["mh-ctl"]}),
                     ("link.list", {"lab": "mh"}),
                     ("forward", {"lab": "mh", "parent": "mh-n1", "socket": "docker.sock"})):
        with pytest.raises(server.Refused, match="belongs to another client"):
            helper.authorise(op, args, "CN=mallory")
    helper.authorise("link.list", {"lab": "mh"}, "CN=alice")
    # Kept across a restart, 0600 in a 0700 directory.
    labs_file = helper.state_dir / "hostd" / "labs.json"
    assert json.loads(labs_file.read_text())["mh"]["owner"] == "CN=alice"
    assert labs_file.stat().st_mode & 0o777 == 0o600
    assert labs_file.parent.stat().st_mode & 0o777 == 0o700
    again = server.Helper(helper.state_dir, labs_file=labs_file)
    with pytest.raises(server.Refused):
        again.authorise("link.list", {"lab": "mh"}, "CN=mallory")
    # Once nothing of it is left, the name is free again.
    again.labs.discard("mh", ["mh-ctl"])
    again.labs.settle("mh")
    again.authorise("link.bridge", {"lab": "mh", "name": "mh-ctl"}, "CN=mallory")


def test_a_pid_must_be_the_named_nodes_parent(helper):
    (helper.state_dir / "mh-n1").mkdir()
    helper.labs.claim("mh", "c")
    for op, args in (("memory", {"lab": "mh", "node": 1, "pid": os.getpid()}),
                     ("pids", {"lab": "mh", "node": 1, "parent": 1, "inner": [1]})):
        with pytest.raises(server.Refused, match="is not the parent of lab mh's node 1"):
            helper.authorise(op, args, "c")
    with pytest.raises(server.Refused, match="is not a process of lab mh's node 1"):
        helper.authorise("routes", {"lab": "mh", "pids": {"1": os.getpid()}}, "c")


def test_tc_names_only_the_labs_recorded_ports(helper):
    helper.labs.claim("mh", "c")
    helper.labs.add("mh", ["mh-1x1", "mh-2x1"])
    op = {"port": "mh-1x1", "command": "add", "kind": "htb", "handle": "1:0", "params": {}}
    helper.authorise("tc", {"lab": "mh", "function": "build",
                            "args": [[op], None, ["mh-1x1"], ["mh-1x1"], "x"]}, "c")
    for function, args in (
            ("build", [[{**op, "port": "eth0"}], None, ["mh-1x1"], [], "x"]),
            ("apply", [[op], None, ["eth0"]]),
            ("remove_trees", [None, ["docker0"]]),
            ("change_batch", [[op], None, {"eth0": 2}]),
            ("check_ports", [None, ["eth0"], ["mh-1x1"], "x"])):
        with pytest.raises(server.Refused, match="not among lab mh's"):
            helper.authorise("tc", {"lab": "mh", "function": function, "args": args}, "c")


def test_ports_recorded_as_ours_on_other_hosts_are_dropped_not_refused(helper, monkeypatch):
    """A shaper records its trees on every host of the lab; a helper keeps this host's
    (a port elsewhere, or eth0, never counts as the lab's tree here)."""
    helper.labs.claim("mh", "c")
    helper.labs.add("mh", ["mh-1x1"])
    seen = []
    monkeypatch.setattr(server.tc, "check_ports",
                        lambda netns, ports, ours, owner: seen.append((netns, ports, ours)))
    args = {"lab": "mh", "function": "check_ports",
            "args": [None, ["mh-1x1"], ["mh-1x1", "mh-2x1", "eth0"], "x"]}
    helper.run("tc", args, "c")
    assert seen == [(None, ["mh-1x1"], ["mh-1x1"])]


# --- 3. connections ----------------------------------------------------------------------


class SlowHelper:
    """Answers `qdiscs` slowly, `hello` at once; no kernel."""

    def __init__(self) -> None:
        self.state_dir = Path("/nonexistent")
        self.seen: list[str] = []

    def run(self, op: str, args: dict, client: str = server.INSECURE):
        self.seen.append(op)
        if op == "qdiscs":
            time.sleep(0.02)
        return {"version": p.VERSION}


def _serve(limits: server.Limits, helper=None):
    helper = helper or SlowHelper()
    srv = server.Server(helper, "127.0.0.1", 0, None, limits)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, helper, srv.listener.getsockname()[1]


def test_an_idle_connection_is_closed_after_login():
    srv, _helper, port = _serve(server.Limits(idle_timeout=0.5))
    try:
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.sendall(p.encode({"op": "hello", "args": {}}))
            assert p.read_frame(lambda n: streams.recv_exact(raw, n))["ok"]
            raw.settimeout(5)
            t0 = time.monotonic()
            told = p.read_frame(lambda n: streams.recv_exact(raw, n))
            assert told["ok"] is False and "timed out" in told["error"]["message"]
            assert raw.recv(1) == b""
            assert time.monotonic() - t0 < 3
    finally:
        srv.close()


def test_a_refused_frame_is_answered_and_the_rest_of_it_read_before_closing():
    """A 16 MiB frame is refused at its header; the client, sending 3 MB of it before it
    reads, must finish sending and then get the refusal: closing with unread data would
    reset the connection under the client's send (and may lose the answer)."""
    srv, _helper, port = _serve(server.Limits())
    try:
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.settimeout(10)
            raw.sendall(struct.pack(">I", 16 * 1024 * 1024) + b"{" * 3_000_000)
            told = p.read_frame(lambda n: streams.recv_exact(raw, n))
            assert told["ok"] is False and "over the 1048576" in told["error"]["message"]
            assert raw.recv(1) == b""
    finally:
        srv.close()


def test_a_client_that_keeps_sending_is_closed_after_the_linger_bounds():
    """The helper drops at most ``linger_bytes`` after a refusal, then closes."""
    srv, _helper, port = _serve(server.Limits(linger_bytes=100_000, linger_seconds=5))
    try:
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.settimeout(10)
            t0 = time.monotonic()
            with pytest.raises(OSError):
                raw.sendall(struct.pack(">I", 16 * 1024 * 1024) + b"{" * 20_000_000)
            assert time.monotonic() - t0 < 4
    finally:
        srv.close()


def test_connections_are_capped_per_peer_and_the_helper_keeps_serving():
    srv, _helper, port = _serve(server.Limits(per_peer=8))
    held = []
    try:
        for _ in range(30):
            held.append(socket.create_connection(("127.0.0.1", port)))
        deadline = time.monotonic() + 5
        while srv.connections() < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert srv.connections() == 8
        for sock in held:
            sock.close()
        client = HelperClient("h", "127.0.0.1", port, None, timeout=5, insecure=True)
        deadline = time.monotonic() + 5
        while True:
            try:
                assert client.call("hello")["version"] == p.VERSION
                break
            except EnvironmentProblem:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        client.close()
    finally:
        srv.close()


def test_the_accept_loop_outlives_a_failure_to_start_a_thread(monkeypatch):
    srv, _helper, port = _serve(server.Limits())
    real = threading.Thread.start
    failed = []

    def start(self):
        if getattr(self, "_target", None) == srv._connection and not failed:
            failed.append(1)
            raise RuntimeError("can't start new thread")
        return real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    try:
        with socket.create_connection(("127.0.0.1", port)) as first:
            first.settimeout(5)
            assert first.recv(1) == b""
        client = HelperClient("h", "127.0.0.1", port, None, timeout=5, insecure=True)
        assert client.call("hello")["version"] == p.VERSION
        client.close()
        deadline = time.monotonic() + 5
        while srv.connections() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert failed and srv.connections() == 0
    finally:
        srv.close()


def test_a_batch_stops_when_its_client_goes():
    srv, helper, port = _serve(server.Limits())
    try:
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.sendall(p.encode(p.request("batch", requests=[
                {"op": "qdiscs", "args": {}}] * p.MAX_BATCH)))
            time.sleep(0.1)
        time.sleep(0.5)
        ran = len(helper.seen)
        time.sleep(0.3)
        assert ran == len(helper.seen) < p.MAX_BATCH // 2, ran
    finally:
        srv.close()


# --- 5. the client: the host's certificate name, the switch calls a helper hands back -----


def test_the_client_checks_the_hosts_certificate_names_it():
    ovs_pki = {"subject": ((("organizationName", "Open vSwitch"),),
                           (("commonName", "h0 id:1c2e"),))}
    check_host_name("h0", ovs_pki)
    with pytest.raises(EnvironmentProblem, match="names h0, not h1"):
        check_host_name("h1", ovs_pki)
    check_host_name("h1", {"subjectAltName": (("DNS", "h1"),)})


@pytest.mark.parametrize("call", [
    ["host", "add_port", ["br-int", "mh-1x1"], {}],
    ["host", "add_port", ["mh-main", "eth0"], {}],
    ["host", "del_port", ["eth0"], {}],
    ["host", "add_bridge", ["mh-main"], {}],
    ["node", "add_bridge", ["docker0"], {}],
    ["node", "add_port", ["mh-node", "mh-1i1"], {"other": 1}],
    ["node", "del_bridge", ["mh-node"], {}],
])
def test_switch_calls_from_the_helper_are_checked_before_any_is_applied(call):
    applied = []

    class Switch:
        def __getattr__(self, name):
            return lambda *a, **k: applied.append(name)

    good = ["node", "add_port", ["mh-node", "mh-1i1"], {"external_ids": {}}]
    with pytest.raises(EnvironmentProblem):
        mh.apply_switch_calls("mh", [good, call], Switch(), Switch())
    assert applied == []
    mh.apply_switch_calls("mh", [good, ["host", "del_port", ["mh-1x1"], {}]], Switch(),
                          Switch())
    assert applied == ["add_ports", "del_port"]


def test_a_run_of_port_adds_on_one_bridge_is_applied_as_one_transaction():
    """The helper hands back one add_port per port (the protocol's calls); the client
    makes each run on one switch's bridge one add_ports, keeping the order of the rest."""
    made = []

    class Switch:
        def __init__(self, name):
            self.name = name

        def __getattr__(self, method):
            return lambda *a, **k: made.append((self.name, method, a))

    ids = {"external_ids": {"x": "1"}}
    calls = [["node", "add_bridge", ["mh-node"], {"datapath_type": "netdev"}],
             ["node", "add_port", ["mh-node", "mh-1i0"], ids],
             ["node", "add_port", ["mh-node", "mh-1i1"], ids],
             ["host", "add_port", ["mh-main", "mh-1x1"], {**ids, "ofport": 5}],
             ["host", "add_port", ["mh-main", "mh-1x2"], {**ids, "ofport": 6}],
             ["host", "del_port", ["mh-1x3"], {}],
             ["host", "add_port", ["mh-main", "mh-1x3"], {**ids, "ofport": 7}]]
    mh.apply_switch_calls("mh", calls, Switch("node"), Switch("host"))
    assert made == [
        ("node", "add_bridge", ("mh-node",)),
        ("node", "add_ports", ("mh-node", [("mh-1i0", ids), ("mh-1i1", ids)])),
        ("host", "add_ports", ("mh-main", [("mh-1x1", {**ids, "ofport": 5}),
                                           ("mh-1x2", {**ids, "ofport": 6})])),
        ("host", "del_port", ("mh-1x3",)),
        ("host", "add_ports", ("mh-main", [("mh-1x3", {**ids, "ofport": 7})]))]
