"""Issue #33: the attacks on the per-host helper, tried against the real helpers of the
emulated hosts (tests/system/conftest.py: the multi-host suite's hosts, started once),
each refused, with the helper still serving afterwards and never restarted:

- a helper started for plain TCP without `--insecure` (the user's `hosts prepare` and
  the helper's own command);
- a pid that is not the named lab's node's parent; a bridge that is not the lab's as a
  tunnel's master, a device that does not hold the tunnel's address as its underlay;
  tc on eth0; the lab name "br" (Docker's br-<hex> bridges); another client's lab
  (a second certificate of the same PKI);
- 2,000 idle connections (from the other host's address, as an outsider would), a
  16 MiB frame, a 100,000-request batch.

One small lab (2 x 1, a node on each host, over TLS) is the victim. Marked multihost
and system; `scripts/test multihost` and `make test` run it with the multi-host suite.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import docker.errors
import pytest

from nestednet import images
from nestednet.adapters import tc
from nestednet.hostd import protocol as p
from nestednet.hostd import service
from nestednet.hostd.client import HelperClient, HelperError
from nestednet.hostd.streams import recv_exact
from nestednet.lab.record import LabRecord
from nestednet.lab.wiring import LAB_ID
from nestednet.model import placement as pl
from nestednet.model.tcplan import TcOp

pytestmark = [pytest.mark.system, pytest.mark.multihost]

LAB = "secl"
CLI = str(Path(sys.executable).parent / "nestednet")


def nn(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def helper_containers(hosts) -> dict[str, tuple[str, str]]:
    """Each host's helper containers: (id, started at), to tell a restart."""
    return {name: sorted((c.id, c.attrs["State"]["StartedAt"]) for c in
                         h.engine.containers.list(filters={"label": service.LABEL}))
            for name, h in hosts.handles.items()}


@pytest.fixture(scope="module")
def victim(emulated):
    """A 2 x 1 lab over both hosts (n1 on h0), made over TLS; removed at the end. Also
    the helpers' containers as they were before any attack."""
    before = helper_containers(emulated)
    path = emulated.root / "hosts-ssl.json"
    done = nn("create", "--lab", LAB, "-n", "2", "-m", "1", "--hosts", str(path))
    assert done.returncode == 0, done.stderr
    try:
        yield emulated, before
    finally:
        if LabRecord(LAB).exists():
            nn("delete", "--lab", LAB)


def tls_client(hosts, tls=None, host: int = 0) -> HelperClient:
    h = hosts.ssl_hostset.hosts[host]
    return HelperClient(h.name, h.address, service.port_of(hosts.ssl_hostset),
                        tls or hosts.ssl_hostset.ssl, timeout=30)


def refused(client: HelperClient, op: str, kind: str = "refused", **args) -> str:
    """The helper's refusal of a request sent as is (the client's own checks skipped)."""
    with pytest.raises(HelperError) as err:
        client.pipeline([{"op": op, "args": args}])
    assert err.value.kind == kind, err.value
    return str(err.value)


def parent_pid(hosts, host: str, node: int) -> int:
    found = hosts.handles[host].engine.containers.list(
        filters={"label": f"{LAB_ID}={LAB}", "name": f"{LAB}-n{node}"})
    return int(found[0].attrs["State"]["Pid"])


def test_no_plain_helper_without_insecure(victim, tmp_path):
    hosts, _ = victim
    doc = pl.hosts_doc(replace(hosts.hostset, insecure=False, hostd_port=6699))
    (tmp_path / "hosts.json").write_text(json.dumps(doc))
    done = nn("hosts", "prepare", "--hosts", str(tmp_path / "hosts.json"))
    assert done.returncode == 2 and "insecure" in done.stderr, done.stderr
    assert service.find(hosts.manager, "nestednet-hostd-6699") is None
    engine = hosts.handles[hosts.names[0]].engine
    with pytest.raises(docker.errors.ContainerError) as err:
        engine.containers.run(images.HOSTD_IMAGE, ["python3", "-m", "nestednet.hostd",
                                                   "--listen", "127.0.0.1", "--port", "6699",
                                                   "--state-dir", "/tmp"],
                              network_mode="none", remove=True)
    assert err.value.exit_status == 2 and b"--insecure" in err.value.stderr


def test_a_pid_must_be_the_named_nodes_parent(victim):
    hosts, _ = victim
    h0 = hosts.names[0]
    own = parent_pid(hosts, h0, 1)
    engine = hosts.handles[h0].engine
    foreign = int(engine.containers.list(filters={"label": service.LABEL})[0]
                  .attrs["State"]["Pid"])
    client = tls_client(hosts)
    try:
        assert client.call("memory", lab=LAB, node=1, pid=own) is not None  # the control
        assert client.call("pids", lab=LAB, node=1, parent=own, inner=[1]) == {"1": own}
        for pid in (foreign, 1):
            refused(client, "memory", lab=LAB, node=1, pid=pid)
            refused(client, "pids", lab=LAB, node=1, parent=pid, inner=[1])
            with pytest.raises(HelperError, match="not a process of lab secl's node 1"):
                client.stream("routes", lab=LAB, pids={"1": pid})
        refused(client, "memory", lab=LAB, node=2, pid=own)  # n2 is on the other host
        assert client.call("hello")["hostname"] == h0
    finally:
        client.close()


def test_a_tunnel_takes_only_the_labs_bridge_and_the_hosts_underlay(victim):
    hosts, _ = victim
    h0 = hosts.ssl_hostset.hosts[0]
    vxlan = {"lab": LAB, "name": f"{LAB}-x9", "vni": 4242, "local": h0.address,
             "remote": "10.231.0.99", "port": 4789, "underlay": "eth0", "mtu": None,
             "master": None}
    client = tls_client(hosts)
    try:
        assert "master 'docker0'" in refused(client, "link.vxlan", "protocol",
                                             **{**vxlan, "master": "docker0"})
        refused(client, "link.vxlan", **{**vxlan, "master": f"{LAB}-main"})
        assert "does not hold" in refused(client, "link.vxlan",
                                          **{**vxlan, "underlay": "lo"})
        assert client.call("link.exists", names=[f"{LAB}-x9"]) == {f"{LAB}-x9": False}
    finally:
        client.close()


def test_no_tc_on_a_port_that_is_not_the_labs(victim):
    hosts, _ = victim
    local = hosts.local[hosts.names[0]]
    before = tc.snapshot(local.netns, ["eth0"])
    cut = TcOp("eth0", "add", "netem", "1:0", {"loss": 100}, "root").as_dict()
    client = tls_client(hosts)
    try:
        for function, args in (("apply", [[cut], None, ["eth0"]]),
                               ("build", [[cut], None, [f"{LAB}-1x1"], [], "x"]),
                               ("remove_trees", [None, ["eth0"]]),
                               ("change_batch", [[cut], None, {"eth0": 2}])):
            refused(client, "tc", lab=LAB, function=function, args=args)
    finally:
        client.close()
    assert tc.snapshot(local.netns, ["eth0"]) == before


def test_the_lab_name_br_is_reserved(victim):
    hosts, _ = victim
    client = tls_client(hosts)
    try:
        assert "reserved" in refused(client, "link.delete", "protocol", lab="br",
                                     names=["br-0123456789ab"])
    finally:
        client.close()
    done = nn("create", "--lab", "br", "-n", "1", "-m", "1")
    assert done.returncode == 2 and "reserved" in done.stderr
    assert not LabRecord("br").exists()


def test_another_clients_certificate_cannot_touch_the_lab(victim):
    hosts, _ = victim
    work = Path(hosts.ssl_hostset.ssl.certificate).parent
    subprocess.run(["ovs-pki", f"--dir={hosts.control.pki}", "--force", "-b", "req+sign",
                    "mallory", "controller"], check=True, capture_output=True, cwd=work)
    mallory = pl.Tls(str(work / "mallory-privkey.pem"), str(work / "mallory-cert.pem"),
                     hosts.ssl_hostset.ssl.ca_cert)
    own = parent_pid(hosts, hosts.names[0], 1)
    other = tls_client(hosts, mallory)
    try:
        for op, args in (("forward", {"lab": LAB, "parent": f"{LAB}-n1",
                                      "socket": "docker.sock"}),
                         ("state.parent", {"lab": LAB, "name": f"{LAB}-n1"}),
                         ("link.list", {"lab": LAB}),
                         ("link.delete", {"lab": LAB, "names": [f"{LAB}-main"]}),
                         ("memory", {"lab": LAB, "node": 1, "pid": own})):
            assert "belongs to another client" in refused(other, op, **args)
        assert other.call("link.list", lab="mal") == []  # a lab of its own: fine
    finally:
        other.close()
    client = tls_client(hosts)
    try:
        assert client.call("state.parent", lab=LAB, name=f"{LAB}-n1")["ready"]
    finally:
        client.close()


FLOOD = """
import resource, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
held = []
for _ in range(int(sys.argv[3])):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect((sys.argv[1], int(sys.argv[2])))
    except BlockingIOError:
        pass
    held.append(s)
print("open", flush=True)
time.sleep(float(sys.argv[4]))
"""


@pytest.mark.parametrize("secure", [True, False])
def test_2000_idle_connections_do_not_stop_the_helper(victim, secure):
    """Opened from the other host's address (an outsider's), held while this machine's
    client is served."""
    hosts, _ = victim
    hostset = hosts.ssl_hostset if secure else hosts.hostset
    h0, h1 = hosts.names
    target = hostset.named(h0)
    flood = subprocess.Popen(
        ["nsenter", f"--net=/proc/{hosts.local[h1].pid}/ns/net", sys.executable, "-c", FLOOD,
         target.address, str(service.port_of(hostset)), "2000", "8"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout.readline().strip() == "open"
        time.sleep(1)
        served = []
        for _ in range(3):
            client = HelperClient(h0, target.address, service.port_of(hostset), hostset.ssl,
                                  timeout=10, insecure=hostset.insecure)
            t0 = time.monotonic()
            try:
                assert client.call("hello")["hostname"] == h0
            finally:
                client.close()
            served.append(round(time.monotonic() - t0, 3))
        print(f"hello during the flood ({'TLS' if secure else 'plain'}): {served} s")
    finally:
        flood.wait(timeout=60)
    client = HelperClient(h0, target.address, service.port_of(hostset), hostset.ssl,
                          insecure=hostset.insecure)
    try:
        assert client.call("hello")["hostname"] == h0
    finally:
        client.close()


def _send_raw(client: HelperClient, data: bytes) -> dict | None:
    """``data`` on a new connection, then the helper's answer. Sent whole before reading:
    a helper that refuses a frame at its header reads and drops the rest (at most 4 MiB,
    for at most 2 s: nestednet.hostd.server.linger) before it closes, so the client's
    sending ends and the answer is not lost to a reset. (This sent on a second thread
    before, sharing one TLS connection between two threads, which OpenSSL does not
    allow: the answer was lost in CI once, and a local client doing the same against
    the helper's earlier close crashed once in 50 tries.)"""
    conn = client.connect()
    try:
        conn.sendall(data)
        return p.read_frame(lambda n: recv_exact(conn, n), p.MAX_ANSWER)
    finally:
        conn.close()


def test_a_16_mib_frame_and_a_100k_request_batch_are_refused(victim):
    hosts, _ = victim
    client = tls_client(hosts)
    try:
        t0 = time.monotonic()
        big = _send_raw(client, struct.pack(">I", 16 * 1024 * 1024) + b"{" * 65536)
        assert big["ok"] is False and "over the 1048576" in big["error"]["message"]
        body = json.dumps({"op": "batch", "args": {"requests": [
            {"op": "qdiscs", "args": {}}] * 100_000}}).encode()
        answer = _send_raw(client, struct.pack(">I", len(body)) + body)
        assert answer["ok"] is False and "limit" in answer["error"]["message"], answer
        small = json.dumps({"op": "batch", "args": {"requests": [
            {"op": "hello", "args": {}}] * 10_000}}).encode()
        answer = _send_raw(client, struct.pack(">I", len(small)) + small)
        assert answer["ok"] is False and "at most 256 requests" in answer["error"]["message"]
        print(f"three oversized requests refused in {time.monotonic() - t0:.2f} s")
        assert client.call("hello")["version"] == p.VERSION
    finally:
        client.close()


def test_the_helpers_served_throughout_and_never_restarted(victim):
    hosts, before = victim
    assert helper_containers(hosts) == before
    for hostset in (hosts.hostset, hosts.ssl_hostset):
        for h in hostset.hosts:
            client = HelperClient(h.name, h.address, service.port_of(hostset), hostset.ssl,
                                  insecure=hostset.insecure)
            try:
                assert client.call("hello")["hostname"] == h.name
            finally:
                client.close()
