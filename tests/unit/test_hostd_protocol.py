"""The per-host helper's protocol (nestednet.hostd): frames, request checks, and a server
on loopback answering in order, in batches and with located errors. No root, no
namespaces: the server runs a fake helper."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from nestednet.errors import EnvironmentProblem
from nestednet.hostd import protocol as p
from nestednet.hostd import server, streams
from nestednet.hostd.client import Forward, HelperClient, HelperError, RemoteTc
from nestednet.model.tcplan import TcOp

pytestmark = pytest.mark.unit


def test_a_frame_is_a_length_and_a_json_object_and_reads_back():
    frame = p.encode({"op": "hello", "args": {}})
    assert frame[:4] == struct.pack(">I", len(frame) - 4)
    stream = [frame + p.encode({"ok": True, "result": [1, 2]})]

    def recv_exact(n: int) -> bytes:
        data, stream[0] = stream[0][:n], stream[0][n:]
        return data

    assert p.read_frame(recv_exact) == {"op": "hello", "args": {}}
    assert p.read_frame(recv_exact) == {"ok": True, "result": [1, 2]}
    assert p.read_frame(recv_exact) is None


@pytest.mark.parametrize(("raw", "words"), [
    (struct.pack(">I", p.MAX_FRAME + 1), "over the"),
    (b"\x00\x00", "inside a frame header"),
    (struct.pack(">I", 10) + b"{}", r"inside a frame \(2 of 10"),
    (struct.pack(">I", 2) + b"[]", "holds a list, not an object"),
    (struct.pack(">I", 3) + b"\xff{}", "not UTF-8 JSON"),
])
def test_broken_frames_are_refused_with_what_is_wrong(raw, words):
    stream = [raw]

    def recv_exact(n: int) -> bytes:
        data, stream[0] = stream[0][:n], stream[0][n:]
        return data

    with pytest.raises(p.ProtocolError, match=words):
        p.read_frame(recv_exact)


def test_an_oversized_message_is_not_sent():
    with pytest.raises(p.ProtocolError, match="over the"):
        p.encode({"blob": "x" * (p.MAX_FRAME + 1)})


GOOD_VXLAN = {"lab": "mh", "name": "mh-t1", "vni": 7001, "local": "10.0.0.1",
              "remote": "10.0.0.2", "port": 4789, "underlay": "eth0", "mtu": None,
              "master": None}


@pytest.mark.parametrize(("message", "words"), [
    ({"op": "rm -rf", "args": {}}, "'rm -rf' is not one of"),
    ({"args": {}}, "None is not one of"),
    ({"op": "hello", "args": []}, "args must be an object"),
    ({"op": "hello", "args": {"x": 1}}, "unknown argument"),
    ({"op": "link.vxlan", "args": {**GOOD_VXLAN, "vni": "7001"}}, "vni must be int"),
    ({"op": "link.vxlan", "args": {**GOOD_VXLAN, "vni": True}}, "vni must be int"),
    ({"op": "link.vxlan", "args": {k: v for k, v in GOOD_VXLAN.items() if k != "mtu"}},
     "argument mtu is missing"),
    ({"op": "link.vxlan", "args": {**GOOD_VXLAN, "name": "eth0"}}, "not one of lab mh's"),
    ({"op": "link.vxlan", "args": {**GOOD_VXLAN, "name": "mh-" + "x" * 20}},
     "not one of lab mh's"),
    ({"op": "link.delete", "args": {"lab": "mh", "names": ["mh-1x1", "docker0"]}},
     "'docker0' is not one of lab mh's"),
    ({"op": "link.delete", "args": {"lab": "mhx", "names": ["mh-1x1"]}}, "not one of lab"),
    ({"op": "link.delete", "args": {"lab": "MH", "names": []}}, "not a lab name"),
    ({"op": "link.delete", "args": {"lab": "mh", "names": "mh-1x1"}}, "list of at most 4096 str"),
    ({"op": "state.remove", "args": {"lab": "mh", "names": [".."]}}, "not a parent directory"),
    ({"op": "state.remove", "args": {"lab": "mh", "names": ["mh-n1/../../etc"]}},
     "not a parent directory"),
    ({"op": "state.mkdir", "args": {"lab": "mh", "name": "ab-n1"}}, "not a parent directory"),
    ({"op": "forward", "args": {"lab": "mh", "parent": "mh-n1", "socket": "../../x.sock"}},
     "is not one of docker.sock"),
    ({"op": "forward", "args": {"lab": "mh", "parent": "/var/run", "socket": "docker.sock"}},
     "is not a parent of lab mh"),
    ({"op": "tc", "args": {"lab": "mh", "function": "__import__", "args": []}},
     "is not one of"),
    ({"op": "memory", "args": {"lab": "mh", "node": 1, "pid": 0}},
     "pid must be a positive integer"),
    ({"op": "routes", "args": {"lab": "mh", "pids": {"n1": 5}}}, "digit-string keys"),
    ({"op": "batch", "args": {"requests": [{"op": "forward", "args": {}}]}},
     "request #0: op forward: not allowed inside a batch"),
    ({"op": "batch", "args": {"requests": [{"op": "hello", "args": {}}, 5]}},
     "request #1 is not an object"),
    ({"op": "batch", "args": {"requests": [
        {"op": "link.delete", "args": {"lab": "mh", "names": ["lo"]}}]}},
     "request #0: link.delete"),
])
def test_requests_are_checked_before_anything_runs(message, words):
    with pytest.raises(p.ProtocolError, match=words):
        p.check_request(message)


def test_good_requests_pass_and_the_client_builds_only_good_ones():
    assert p.check_request({"op": "link.vxlan", "args": GOOD_VXLAN}) == ("link.vxlan",
                                                                          GOOD_VXLAN)
    assert p.check_request(p.request("forward", lab="mh", parent="mh-n12",
                                     socket="ovs/db.sock"))[0] == "forward"
    assert p.check_request(p.request("routes", lab="mh", pids={"1": 4242}))[0] == "routes"
    with pytest.raises(p.ProtocolError):
        p.request("state.mkdir", lab="mh", name="mh-n0")


class FakeHelper:
    """Answers as the helper would, without a kernel."""

    def __init__(self) -> None:
        self.state_dir = Path("/nonexistent")
        self.seen: list[tuple[str, dict]] = []

    def run(self, op: str, args: dict, client: str = server.INSECURE):
        self.seen.append((op, args))
        if op == "qdiscs":
            time.sleep(0.02)
        if op == "link.exists":
            return {n: n == "lo" for n in args["names"]}
        if op == "link.delete":
            raise EnvironmentProblem(f"cannot delete {args['names'][0]}")
        if op == "tc":
            return {"function": args["function"], "args": args["args"]}
        return {"version": p.VERSION, "state_dir": "/x"}


@pytest.fixture
def loopback():
    helper = FakeHelper()
    srv = server.Server(helper, "127.0.0.1", 0, None)
    port = srv.listener.getsockname()[1]
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    client = HelperClient("hostA", "127.0.0.1", port, None, timeout=5, insecure=True)
    yield helper, client, port
    client.close()
    srv.close()


def test_a_server_answers_in_order_on_one_kept_connection(loopback):
    helper, client, _port = loopback
    assert client.call("hello")["version"] == p.VERSION
    answers = client.pipeline([p.request("link.exists", names=["lo"]),
                               p.request("link.exists", names=["mh-t1"])])
    assert answers == [{"lo": True}, {"mh-t1": False}]
    assert client.batch([("hello", {}), ("link.exists", {"names": ["lo", "x"]})]) == [
        {"version": p.VERSION, "state_dir": "/x"}, {"lo": True, "x": False}]
    assert [op for op, _ in helper.seen] == ["hello", "link.exists", "link.exists", "hello",
                                             "link.exists"]
    assert client.round_trips == 3 and len(client._idle) == 1


def test_errors_come_back_located_and_the_connection_stays_usable(loopback):
    helper, client, _port = loopback
    with pytest.raises(HelperError, match="host hostA: helper: cannot delete mh-1x1") as err:
        client.call("link.delete", lab="mh", names=["mh-1x1"])
    assert err.value.kind == "environment"
    with pytest.raises(HelperError, match=r"batch request #1 \(link.delete\)"):
        client.batch([("hello", {}), ("link.delete", {"lab": "mh", "names": ["mh-1x1"]}),
                      ("hello", {})])
    assert [op for op, _ in helper.seen][-2:] == ["hello", "link.delete"], "stops at #1"
    # A request the client would not build, sent raw: refused, nothing run.
    before = len(helper.seen)
    with pytest.raises(HelperError, match="not one of lab mh's") as err:
        client.pipeline([{"op": "link.delete", "args": {"lab": "mh", "names": ["eth0"]}}])
    assert err.value.kind == "protocol" and len(helper.seen) == before
    assert client.call("hello")["state_dir"] == "/x"


def test_a_broken_frame_closes_only_that_connection(loopback):
    _helper, client, port = loopback
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(struct.pack(">I", p.MAX_FRAME + 5))
        reply = p.read_frame(lambda n: streams.recv_exact(raw, n))
        assert reply["ok"] is False and reply["error"]["kind"] == "protocol"
        assert raw.recv(1) == b""
    assert client.call("hello")["version"] == p.VERSION


def test_remote_tc_sends_ops_as_dicts_and_no_namespace(loopback):
    _helper, client, _port = loopback
    op = TcOp("mh-1x1", "add", "htb", "1:0", {"default": 1}, "root")
    sent = RemoteTc(client, "mh").build([op], "hostd:hostA", ["mh-1x1"], ["mh-1x1"],
                                        "nestednet")
    assert sent == {"function": "build", "args": [[op.as_dict()], None, ["mh-1x1"],
                                                  ["mh-1x1"], "nestednet"]}
    with pytest.raises(AttributeError):
        getattr(RemoteTc(client, "mh"), "system")  # noqa: B009 (the refusal is the point)


def test_no_helper_is_an_environment_problem_naming_the_host_and_the_fix():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = HelperClient("hostB", "127.0.0.1", port, None, timeout=2, insecure=True)
    with pytest.raises(EnvironmentProblem, match="host hostB: no helper at") as err:
        client.call("hello")
    assert "hosts prepare" in (err.value.hint or "")


def test_the_helper_records_nothing_the_client_did_not_record_first():
    recorded = server.Prerecorded(["mh-1i0", "mh-1c0"])
    recorded.add("veth", "mh-1i0", "hostA")
    with pytest.raises(EnvironmentProblem, match="did not record first"):
        recorded.add("veth", "mh-1x1", "hostA")
    calls: list = []
    switch = server.Deferred("node", calls)
    switch.add_port("mh-node", "mh-1i0", external_ids={"a": "b"})
    assert calls == [["node", "add_port", ["mh-node", "mh-1i0"], {"external_ids": {"a": "b"}}]]
    with pytest.raises(AttributeError):
        switch.del_bridge("x")
    calls.clear()
    switch.add_ports("mh-node", [("mh-1i0", {"external_ids": {}}),
                                 ("mh-1i1", {"external_ids": {}, "ofport": None})])
    assert calls == [["node", "add_port", ["mh-node", "mh-1i0"], {"external_ids": {}}],
                     ["node", "add_port", ["mh-node", "mh-1i1"],
                      {"external_ids": {}, "ofport": None}]]


def test_the_helper_service_listens_per_host_and_takes_tls_files_from_the_state_dir():
    """One global service spec for every host: each task picks its own address; with
    `ssl` the helper gets the host's key, certificate and the clients' CA under the
    state directory, without it plain TCP on another port; the spec's hash changes with
    what matters."""
    from nestednet.hostd import service
    from nestednet.model import placement as pl

    hosts = pl.HostSet((pl.Host("a", "10.0.0.1"), pl.Host("b", "10.0.0.2")),
                       ssl=pl.Tls("k", "c", "ca"), state_dir="/srv/nn")
    spec = service.spec(hosts, "nestednet/hostd:t")
    cmd = spec["command"]
    assert cmd[cmd.index("--listen-map") + 1] == "a=10.0.0.1,b=10.0.0.2"
    assert cmd[cmd.index("--port") + 1] == "6650" and "--insecure" not in cmd
    assert [cmd[cmd.index(f) + 1] for f in ("--private-key", "--certificate", "--ca-cert")] \
        == ["/srv/nn/pki/host-privkey.pem", "/srv/nn/pki/host-cert.pem",
            "/srv/nn/pki/controllerca.pem"]
    assert ["/srv/nn", "/srv/nn", False] in spec["mounts"]
    assert ["/proc", service.HOST_PROC, False] in spec["mounts"]
    assert ["/sys/fs/cgroup", service.HOST_CGROUP, True] in spec["mounts"]
    plain = pl.HostSet(hosts.hosts, insecure=True)
    assert "--insecure" in service.command(plain) and service.port_of(plain) == 6651
    assert service.service_name(plain) != service.service_name(hosts)
    assert service.state_dir_of(plain) == service.DEFAULT_STATE_DIR
    assert service.spec_hash(spec) == service.spec_hash(service.spec(hosts, "nestednet/hostd:t"))
    assert service.spec_hash(spec) != service.spec_hash(service.spec(hosts, "nestednet/hostd:u"))


def test_the_helper_picks_its_address_from_the_listen_map_by_node_name(monkeypatch, capsys):
    from nestednet.hostd import __main__ as cli

    monkeypatch.setenv("NESTEDNET_HOSTD_NODE", "c")
    assert cli.main(["--listen-map", "a=10.0.0.1,b=10.0.0.2", "--port", "7000",
                     "--state-dir", "/tmp", "--insecure"]) == 1
    assert "host c is not in --listen-map (a, b)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--listen", "127.0.0.1", "--port", "7000", "--state-dir", "/tmp"])
    assert exit_.value.code == 2, "neither TLS files nor --insecure"


def test_a_forward_leaves_no_directory_behind_even_unclosed() -> None:
    closed = Forward(None, "mh", "mh-n1", "docker.sock")  # type: ignore[arg-type]
    assert closed.path.is_socket()
    closed.close()
    assert not closed.directory.exists()
    code = ("from nestednet.hostd.client import Forward\n"
            "print(Forward(None, 'mh', 'mh-n1', 'ovs/db.sock').directory)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out.startswith(tempfile.gettempdir()) and not Path(out).exists()
