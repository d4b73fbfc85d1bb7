"""`nestednet` nodes on the real Docker engine, Open vSwitch and network namespaces.

One 2-node x 2-iPHY lab (`t2`) is shared by the tests of this module; the tests
that need their own lab (delete, rollback, crash cleanup) use `t3`..`t5`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from labs import swap_code

from nestednet import images
from nestednet.adapters import netns_exec, packet_sockets
from nestednet.adapters.ovsdb import HOST_VSWITCHD_PIDFILE
from nestednet.datapath import PORT_RCVBUF_BYTES, reads_ports_by_socket
from nestednet.model import topology as topo

LAB = "t2"
CLI = str(Path(sys.executable).parent / "nestednet")
LABS = Path("/var/lib/nestednet/labs")


def nn(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def run_in(node: str, component: str, *cmd: str, lab: str = LAB) -> subprocess.CompletedProcess:
    return nn("exec", "--lab", lab, node, component, "--", *cmd)


def pings(node: str, component: str, address: str) -> bool:
    """True when any of 3 pings is answered (this 2-core host is shared and busy)."""
    return run_in(node, component, "ping", "-c", "3", "-i", "0.3", "-W", "2",
                  address).returncode == 0


def tcp_client(node: str, component: str, *args: str) -> subprocess.CompletedProcess:
    """iperf3 client, retried while the just-started server may not listen yet."""
    for _ in range(10):
        done = run_in(node, component, "iperf3", "-c", *args)
        if done.returncode == 0 or "refused" not in done.stdout + done.stderr:
            return done
        time.sleep(0.3)
    return done


def lab_traces(lab: str) -> list[str]:
    """Everything of ``lab`` still on this host: containers, veths, bridges, netns, mounts."""
    found = []
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=org.nestednet.lab={lab}",
                          "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    found += [f"container {n}" for n in out.split()]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link {ln.split(':')[1].strip()}" for ln in links.splitlines()
              if ln.split(":")[1].strip().startswith(f"{lab}-")]
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout
    found += [f"bridge {b}" for b in bridges.split() if b.startswith(f"{lab}-")]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {n}" for n in netns.split() if n == f"nestednet-{lab}-ctl"]
    mounts = Path("/proc/self/mountinfo").read_text()
    found += [f"mount {m}" for m in mounts.splitlines()
              if f"/labs/{lab}/" in m or f"nestednet-{lab}-ctl" in m]
    if (LABS / lab).exists():
        found.append(f"directory {LABS / lab}")
    return found


CREATED: dict = {}
"""What `create --json` printed for the module's lab."""


@pytest.fixture(scope="module")
def lab():
    nn("delete", "--lab", LAB)
    done = nn("create", "--lab", LAB, "--nodes", "2", "--iphys", "2", "--memory", "64",
              "--json")
    assert done.returncode == 0, done.stderr
    CREATED.update(json.loads(done.stdout))
    yield LAB
    nn("delete", "--lab", LAB)
    assert lab_traces(LAB) == []


def permanent_neighbours(node: str, component: str) -> dict[str, str]:
    """A component's permanent ARP entries on its intra-node interface: address -> MAC."""
    shown = run_in(node, component, "ip", "-4", "neigh", "show", "nud", "permanent")
    assert shown.returncode == 0, shown.stderr
    return {f[0]: f[f.index("lladdr") + 1] for f in map(str.split, shown.stdout.splitlines())
            if "lladdr" in f}


@pytest.mark.system
def test_iphy_reaches_gnab_inside_each_node(lab):
    assert pings("n1", "iphy1", "192.168.0.1")
    assert pings("n2", "iphy2", "192.168.0.1")
    assert pings("n1", "gnab", "192.168.0.12")


@pytest.mark.system
def test_intra_node_net_needs_no_arp(lab):
    assert permanent_neighbours("n2", "gnab") == {"192.168.0.11": "02:4e:00:02:01:01",
                                                  "192.168.0.12": "02:4e:00:02:02:01"}
    assert permanent_neighbours("n1", "iphy2") == {"192.168.0.1": "02:4e:00:01:00:01",
                                                   "192.168.0.11": "02:4e:00:01:01:01"}


def _ipv6_addresses(*netns_args: str) -> dict[str, list[str]]:
    """Interface -> its IPv6 addresses with their flags, in a namespace (`ip` args)."""
    out = subprocess.run([*netns_args, "ip", "-o", "-6", "addr"], capture_output=True,
                         text=True, check=True).stdout
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        fields = line.split()
        found.setdefault(fields[1], []).append(" ".join(fields[3:]))
    return found


@pytest.mark.system
def test_switch_ports_have_no_ipv6_address_and_components_theirs_at_once(lab):
    """A port of the main, control or internal bridge has no IPv6 address (it would send
    DAD, router solicitations and MLD into the emulated net; the control bridge itself,
    the CA's interface, keeps its own); components keep IPv6 for
    routing daemons, their link-local addresses usable at once (unique MACs: no DAD)."""
    import docker

    host = _ipv6_addresses()
    assert not [i for i in host if i.startswith(f"{LAB}-")], host
    ctl = _ipv6_addresses("ip", "netns", "exec", f"nestednet-{LAB}-ctl")
    assert not [i for i in ctl if i.startswith(f"{LAB}-") and i != f"{LAB}-ctl"], ctl
    pid = docker.from_env().containers.get(f"{LAB}-n1").attrs["State"]["Pid"]
    parent = _ipv6_addresses("nsenter", "-t", str(pid), "-n")
    assert not [i for i in parent if i.startswith(f"{LAB}-")], parent
    for component, ifname in (("gnab", "intra"), ("iphy1", "inter")):
        out = run_in("n1", component, "ip", "-6", "addr", "show", "dev", ifname).stdout
        assert "scope link" in out and "tentative" not in out, (component, out)


@pytest.mark.system
def test_create_json_is_the_lab_record_with_every_phase_timed(lab):
    record = json.loads((LABS / LAB / "lab.json").read_text())
    assert {k: record[k] for k in ("create_s", "timings", "plan")} == {
        k: CREATED[k] for k in ("create_s", "timings", "plan")}
    assert CREATED["status"] == "complete" and CREATED["nodes"] == 2
    assert {"parents", "children", "wiring", "host ports"} <= set(CREATED["timings"])
    assert CREATED["timings"]["wiring"]["count"] == 2


@pytest.mark.system
def test_the_lab_ports_in_the_host_switch_read_through_enlarged_buffers(lab):
    """Create adds the nodes' ports to the host's switch once all are built, and only
    then enlarges the sockets ovs-vswitchd reads them through: each of the lab's
    iPHY ports has one, at the size nestednet.datapath sets (the kernel doubles it)."""
    if not reads_ports_by_socket(CREATED["datapath"]):
        pytest.skip(f"datapath {CREATED['datapath']}: ports are not read through sockets")
    switch = int(HOST_VSWITCHD_PIDFILE.read_text())
    ports = {socket.if_nametoindex(topo.veth_name(LAB, node, "inter-host", iphy))
             for node in (1, 2) for iphy in (1, 2)}
    sizes = packet_sockets.receive_buffers(switch, ports)
    assert len(sizes) == len(ports)
    assert min(sizes) == 2 * PORT_RCVBUF_BYTES


@pytest.mark.system
def test_link_add_and_del_decide_reachability(lab):
    n2_iphy1 = "192.168.2.3"
    assert not pings("n1", "iphy1", n2_iphy1), "nodes must be cut off before link add"
    added = nn("link", "add", "--lab", lab, "n1:iphy1", "n2:iphy1")
    assert added.returncode == 0, added.stderr
    try:
        assert pings("n1", "iphy1", n2_iphy1)
        listed = json.loads(nn("link", "list", "--lab", lab, "--json").stdout)
        assert [(x["a"], x["b"]) for x in listed] == [("n1:iphy1", "n2:iphy1")]
        # TCP too (the userspace datapath stalls TCP unless TX checksum offload is off).
        assert run_in("n2", "iphy1", "iperf3", "-s", "-D", "-1").returncode == 0
        tcp = tcp_client("n1", "iphy1", n2_iphy1, "-t", "1", "-J")
        assert tcp.returncode == 0, tcp.stdout[-500:] + tcp.stderr
        assert json.loads(tcp.stdout)["end"]["sum_received"]["bytes"] > 1_000_000
    finally:
        removed = nn("link", "del", "--lab", lab, "n2:iphy1", "n1:iphy1")
    assert removed.returncode == 0, removed.stderr
    assert not pings("n1", "iphy1", n2_iphy1)
    assert json.loads(nn("link", "list", "--lab", lab, "--json").stdout) == []


@pytest.mark.system
def test_links_that_break_the_rules_are_refused(lab):
    assert nn("link", "add", "--lab", lab, "n1:iphy1", "n2:iphy1").returncode == 0
    try:
        busy = nn("link", "add", "--lab", lab, "n1:iphy1", "n2:iphy2")
        assert busy.returncode == 2 and "busy" in busy.stderr
        pair = nn("link", "add", "--lab", lab, "n1:iphy2", "n2:iphy2")
        assert pair.returncode == 2 and "linked already" in pair.stderr
        same = nn("link", "add", "--lab", lab, "n1:iphy1", "n1:iphy2")
        assert same.returncode == 2
        bad = nn("link", "add", "--lab", lab, "n1:iphy9", "n2:iphy2")
        assert bad.returncode == 2
        assert len(json.loads(nn("link", "list", "--lab", lab, "--json").stdout)) == 1
    finally:
        nn("link", "del", "--lab", lab, "n1:iphy1", "n2:iphy1")


@pytest.mark.system
def test_exec_passes_output_and_exit_code_through(lab):
    done = run_in("n1", "gnab", "sh", "-c", "echo to-out; echo to-err >&2; exit 7")
    assert (done.returncode, done.stdout, done.stderr) == (7, "to-out\n", "to-err\n")
    assert run_in("n1", "iphy3", "true").returncode == 2


@pytest.mark.system
def test_two_components_bind_the_same_tcp_port(lab):
    for component in ("iphy1", "iphy2"):
        done = run_in("n1", component, "iperf3", "-s", "-D", "-1", "-p", "5301")
        assert done.returncode == 0, done.stderr
    time.sleep(0.5)
    for component in ("iphy1", "iphy2"):
        assert ":5301" in run_in("n1", component, "ss", "-ltnH").stdout
    for address in ("192.168.0.11", "192.168.0.12"):
        done = tcp_client("n1", "gnab", address, "-p", "5301", "-t", "1")
        assert done.returncode == 0, done.stdout[-300:] + done.stderr


@pytest.mark.system
def test_memory_limit_is_in_the_cgroup_and_enforced(lab):
    limit = run_in("n1", "iphy1", "sh", "-c",
                   "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null "
                   "|| cat /sys/fs/cgroup/memory.max")
    assert int(limit.stdout) == 64 * 1024 * 1024
    hog = run_in("n1", "iphy1", "python3", "-c",
                 "b = bytearray(200 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])")
    assert hog.returncode != 0, "a 200 MB allocation must not succeed under a 64 MB limit"
    assert pings("n1", "iphy1", "192.168.0.1")


def _inner(lab_name: str, node: str, *args: str) -> str:
    """The docker CLI against a node's inner engine, woken and held for the call."""
    import docker

    from nestednet.lab import engine

    state = LABS / lab_name / node / "state"
    parent = docker.from_env().containers.get(f"{lab_name}-{node}")
    with engine.using(state, parent):
        return subprocess.run(["docker", "-H", f"unix://{state / 'docker.sock'}", *args],
                              capture_output=True, text=True, check=True).stdout


def _parent_procs(lab_name: str, node: str) -> list[Path]:
    """/proc entries of the processes in a node parent's pid namespace."""
    import docker

    pid = docker.from_env().containers.get(f"{lab_name}-{node}").attrs["State"]["Pid"]
    ns = os.readlink(f"/proc/{pid}/ns/pid")
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "ns" / "pid") == ns:
                found.append(entry)
        except OSError:
            continue
    return found


def _parent_commands(lab_name: str, node: str) -> list[tuple[int, str]]:
    """(pid, command name) of the processes in a node parent's pid namespace; one that
    ends meanwhile is left out."""
    found = []
    for entry in _parent_procs(lab_name, node):
        with contextlib.suppress(OSError):
            found.append((int(entry.name), (entry / "comm").read_text().strip()))
    return found


def _parent_processes(lab_name: str, node: str) -> list[str]:
    """Command names of the processes in a node parent's pid namespace."""
    return [name for _pid, name in _parent_commands(lab_name, node)]


def _wait_engine(lab_name: str, node: str, wanted: str, within_s: float) -> bool:
    from nestednet.lab import engine

    deadline = time.monotonic() + within_s
    while engine.state(LABS / lab_name / node / "state") != wanted:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.system
def test_a_parked_engine_frees_its_memory_and_wakes_with_its_children_untouched(lab):
    """Parking stops the inner dockerd and containerd: the components run on under their
    shim (same start time), the node's cgroup holds less, and the next use wakes both
    with a root-only socket."""
    import docker

    from nestednet.adapters.cgroups import cgroup_memory
    from nestednet.lab import engine

    started = _inner(lab, "n2", "inspect", "-f", "{{.State.StartedAt}}", "iphy1").strip()
    parent = docker.from_env().containers.get(f"{lab}-n2")
    engine.park([parent])
    assert _wait_engine(lab, "n2", "parked", 20)
    state = LABS / lab / "n2" / "state"
    assert not (state / "docker.sock").exists()
    assert not {"dockerd", "containerd"} & set(_parent_processes(lab, "n2"))
    assert {"containerd-shim", "ovs-vswitchd"} <= set(_parent_processes(lab, "n2"))
    pid = int(parent.attrs["State"]["Pid"])
    parked = cgroup_memory(pid)["used"]
    assert _inner(lab, "n2", "inspect", "-f", "{{.State.StartedAt}}", "iphy1").strip() == started
    assert engine.state(state) == "up"
    assert {"dockerd", "containerd"} <= set(_parent_processes(lab, "n2"))
    awake = cgroup_memory(pid)["used"]
    assert awake - parked > 10 * 2**20, (parked, awake)
    mode = (state / "docker.sock").stat()
    assert (oct(mode.st_mode & 0o777), mode.st_uid, mode.st_gid) == ("0o600", 0, 0)
    assert pings("n2", "iphy2", "192.168.0.1")


@pytest.mark.system
def test_run_finds_a_parked_nodes_gnab_and_cgroups_without_waking_its_engine(lab):
    """`run` needs every GNAB's pid (route watch) and every child's OOM counter; read
    from the engine's data root they leave the engine parked (a 250-node run had spent
    141 s waking engines), and they are what the engine itself says once woken."""
    import docker

    from nestednet.lab import designs, engine
    from nestednet.lab.nodes import Lab

    parent = docker.from_env().containers.get(f"{lab}-n2")
    engine.park([parent])
    assert _wait_engine(lab, "n2", "parked", 20)
    opened = Lab.open(lab)
    design = designs.of(opened.meta)
    pid = design.gnab_pid(opened, 2)
    counters = {name: path for (node, name), path in design.oom_counters(opened).items()
                if node == 2}
    state = LABS / lab / "n2" / "state"
    assert engine.state(state) == "parked"
    assert not {"dockerd", "containerd"} & set(_parent_processes(lab, "n2"))
    with opened.inner(2) as inner:
        ids = {c.name: c.id for c in inner.containers.list()}
        gnab_inner_pid = inner.containers.get("gnab").attrs["State"]["Pid"]
    assert set(counters) == {"gnab", "iphy1", "iphy2"}
    assert all(ids[name] in str(path) for name, path in counters.items())
    nspid = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                 if line.startswith("NSpid:")).split()[1:]
    assert nspid[1] == str(gnab_inner_pid), nspid  # host, the parent's namespace, ...
    assert ids["gnab"] in Path(f"/proc/{pid}/cgroup").read_text()


@pytest.mark.system
def test_an_engine_in_use_is_not_parked_under_its_user(lab):
    """A park request while the host holds the engine is refused (the parent's `park`
    takes the engine lock without waiting); once the use ends, the next request parks."""
    import docker

    from nestednet.lab import engine

    state = LABS / lab / "n1" / "state"
    parent = docker.from_env().containers.get(f"{lab}-n1")
    with engine.using(state, parent) as client:
        engine.park([parent])
        time.sleep(1.5)
        assert engine.state(state) == "up"
        assert client.ping()
    engine.park([parent])
    assert _wait_engine(lab, "n1", "parked", 20)


def _holding_engine_lock(lab_name: str, node: str) -> list[str]:
    """Processes in a node parent's pid namespace with its engine.lock open."""
    holders = []
    for entry in _parent_procs(lab_name, node):
        try:
            fds = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        if any(target.endswith("/engine.lock") for target in fds):
            holders.append(f"{(entry / 'comm').read_text().strip()}[{entry.name}]")
    return holders


@pytest.mark.system
def test_a_wake_during_a_park_leaves_the_engine_lock_free(lab):
    """A wake (SIGUSR1, as `status` sends every node at once) arriving while the parent
    parks its engine: the daemons it started inherited park's locked fd, and every later
    use of the node waited forever (make test hung in test_api_lab). Wakes at offsets
    through the park: afterwards no daemon holds the lock, a use gets the lock within
    seconds and the engine answers."""
    import docker

    from nestednet.lab import engine

    state = LABS / lab / "n1" / "state"
    parent = docker.from_env().containers.get(f"{lab}-n1")
    for offset in (0.0, 0.05, 0.2, 0.4, 0.8, 1.5):
        with engine.using(state, parent):
            pass
        parent.kill(signal="SIGUSR2")
        time.sleep(offset)
        parent.kill(signal="SIGUSR1")
        deadline = time.monotonic() + 45  # park's shell holds it until both daemons stop
        while _holding_engine_lock(lab, "n1") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _holding_engine_lock(lab, "n1") == [], offset
        began = time.monotonic()
        with engine.using(state, parent) as client:
            assert client.ping(), offset
        assert time.monotonic() - began < 60, offset
        assert engine.state(state) == "up", offset
        names = _parent_processes(lab, "n1")
        assert names.count("dockerd") == 1 and names.count("containerd") == 1, (offset, names)


@pytest.mark.system
def test_a_wake_keeps_the_children_of_a_slow_shim(lab):
    """A wake starts containerd again, which asks each child's shim for its pid; with
    containerd's default 5 s load timeout a shim slower than that (an overloaded
    machine) was taken for dead and its children killed: a run's GNAB had pid 0 after a
    wake. The node's shim is stopped for 15 s across a wake; its children live on."""
    import docker

    from nestednet.lab import engine

    state = LABS / lab / "n1" / "state"
    parent = docker.from_env().containers.get(f"{lab}-n1")
    with engine.using(state, parent) as client:
        before = {c.name: (c.attrs["State"]["StartedAt"], c.attrs["State"]["Pid"])
                  for c in client.containers.list()}
    assert {"gnab", "iphy1", "iphy2"} <= before.keys()
    engine.park([parent])
    assert _wait_engine(lab, "n1", "parked", 45)
    shims = [pid for pid, name in _parent_commands(lab, "n1") if name == "containerd-shim"]
    assert shims
    try:
        for pid in shims:
            os.kill(pid, signal.SIGSTOP)
        parent.kill(signal="SIGUSR1")
        time.sleep(15)
    finally:
        for pid in shims:
            os.kill(pid, signal.SIGCONT)
    with engine.using(state, parent) as client:
        after = {c.name: (c.attrs["State"]["StartedAt"], c.attrs["State"]["Pid"])
                 for c in client.containers.list()}
    assert after == before
    assert pings("n1", "gnab", "192.168.0.11")


@pytest.mark.system
def test_an_engine_unused_for_its_idle_interval_parks_itself():
    """NESTEDNET_ENGINE_IDLE=2 at create: an engine woken by `exec` parks 2-4 s later by
    itself; `create` parked it once the node was built."""
    name = f"eng{os.getpid() % 100000}"
    env = {**os.environ, "NESTEDNET_ENGINE_IDLE": "2"}
    try:
        done = subprocess.run([CLI, "create", "--lab", name, "-n", "1", "-m", "1"],
                              capture_output=True, text=True, timeout=180, env=env)
        assert done.returncode == 0, done.stderr
        assert _wait_engine(name, "n1", "parked", 10)
        assert run_in("n1", "iphy1", "true", lab=name).returncode == 0
        assert _wait_engine(name, "n1", "up", 1)
        assert _wait_engine(name, "n1", "parked", 15)
    finally:
        nn("delete", "--lab", name)
    assert lab_traces(name) == []


@pytest.mark.system
def test_a_bad_oci_runtime_setting_stops_create_before_any_node():
    name = f"oci{os.getpid() % 100000}"
    env = {**os.environ, "NESTEDNET_OCI_RUNTIME": "kata"}
    done = subprocess.run([CLI, "create", "--lab", name, "-n", "1", "-m", "1"],
                          capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 2, done.stderr
    assert "NESTEDNET_OCI_RUNTIME='kata': give crun (the default) or runc" in done.stderr
    assert lab_traces(name) == []


@pytest.mark.system
def test_killing_one_component_leaves_siblings_running(lab):
    from nestednet.adapters import netlink

    started = {c: _inner(lab, "n2", "inspect", "-f", "{{.State.StartedAt}}", c).strip()
               for c in ("gnab", "iphy1")}
    inner_pid = int(_inner(lab, "n2", "inspect", "-f", "{{.State.Pid}}", "iphy2"))
    parent_pid = int(subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", f"{lab}-n2"],
                                    capture_output=True, text=True).stdout)
    host_pid = netlink.host_pids(parent_pid, [inner_pid])[inner_pid]
    os.kill(host_pid, signal.SIGKILL)
    for _ in range(50):
        if _inner(lab, "n2", "inspect", "-f", "{{.State.Running}}", "iphy2").strip() == "false":
            break
        time.sleep(0.1)
    assert _inner(lab, "n2", "inspect", "-f", "{{.State.Running}}", "iphy2").strip() == "false"
    for component, at in started.items():
        assert _inner(lab, "n2", "inspect", "-f", "{{.State.Running}} {{.State.StartedAt}}",
                      component).split() == ["true", at]
    assert pings("n2", "iphy1", "192.168.0.1")
    status = json.loads(nn("status", "--lab", lab, "--json").stdout)
    states = {c["component"]: c["state"] for c in status["nodes"][1]["components"]}
    assert states == {"gnab": "running", "iphy1": "running", "iphy2": "exited"}


@pytest.mark.system
def test_swap_restarts_only_that_component_and_rewires_it(lab, tmp_path):
    code = swap_code(tmp_path / "code")
    sibling_start = _inner(lab, "n2", "inspect", "-f", "{{.State.StartedAt}}", "iphy1").strip()
    assert nn("link", "add", "--lab", lab, "n1:iphy2", "n2:iphy2").returncode == 0
    try:
        done = nn("swap", "--lab", lab, "n2", "iphy2", str(code), "--restart")
        assert done.returncode == 0, done.stderr
        assert run_in("n2", "iphy2", "cat", "/tmp/swapped").stdout == "new code"
        assert run_in("n2", "iphy2", "cat", "/opt/nestednet/user/main.py").returncode == 0
        assert _inner(lab, "n2", "inspect", "-f", "{{.State.StartedAt}}",
                      "iphy1").strip() == sibling_start
        assert pings("n2", "iphy2", "192.168.0.1")
        assert permanent_neighbours("n2", "iphy2") == {"192.168.0.1": "02:4e:00:02:00:01",
                                                       "192.168.0.11": "02:4e:00:02:01:01"}
        assert pings("n1", "iphy2", "192.168.2.4"), "the link must survive the restart"
    finally:
        nn("link", "del", "--lab", lab, "n1:iphy2", "n2:iphy2")


@pytest.mark.system
def test_status_json(lab):
    done = nn("status", "--lab", lab, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["datapath"] in ("system", "netdev")
    assert [n["node"] for n in data["nodes"]] == ["n1", "n2"]
    n1 = data["nodes"][0]
    assert n1["state"] == "running" and n1["memory_mb"] > 1
    assert {c["component"]: c["state"] for c in n1["components"]} == {
        "gnab": "running", "iphy1": "running", "iphy2": "running"}
    assert n1["components"][1]["inter"] == "192.168.2.1/24"
    assert data["ca"]["address"] == "10.99.0.1/16"
    ctl = netns_exec.run(data["ca"]["netns"], ["ping", "-c", "1", "-W", "2", "10.99.0.3"],
                         timeout=30)
    assert ctl.returncode == 0, "the CA side must reach every GNAB on the control net"


@pytest.mark.system
@pytest.mark.parametrize("args", [
    ["--nodes", "0", "--iphys", "2"],
    ["--nodes", "2", "--iphys", "-1"],
    ["--nodes", "999", "--iphys", "33"],  # 32,967 inter-node addresses: more than a /17
    ["--nodes", "2", "--iphys", "2", "--lab", "Bad-Name"],
    ["--nodes", "1", "--iphys", "1", "--lab", LAB],
])
def test_bad_create_input_exits_2_and_leaves_nothing(lab, args):
    name = args[args.index("--lab") + 1] if "--lab" in args else "nn"
    existed = (LABS / name).exists()
    traces = lab_traces(name)
    done = nn("create", *args)
    assert done.returncode == 2, done.stderr
    assert "error:" in done.stderr
    assert (LABS / name).exists() == existed
    assert lab_traces(name) == traces


@pytest.mark.system
def test_missing_image_is_a_clear_error(monkeypatch):
    from nestednet.errors import EnvironmentProblem
    from nestednet.lab import create

    monkeypatch.setattr(images, "COMPONENT_IMAGE", "nestednet/absent:none")
    with pytest.raises(EnvironmentProblem, match="nestednet/absent:none is missing"):
        create.create(create.CreateRequest("t6", 1, 1))
    assert lab_traces("t6") == []


@pytest.fixture
def foreign():
    """A container and an OVS bridge someone else made before the test."""
    name = f"tforeign{uuid.uuid4().hex[:6]}"
    subprocess.run(["docker", "run", "-d", "--name", name, "--network", "none",
                    images.COMPONENT_IMAGE], check=True, capture_output=True)
    subprocess.run(["ovs-vsctl", "add-br", name[:15], "--", "set", "bridge", name[:15],
                    "datapath_type=netdev"], check=True)
    yield name
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    subprocess.run(["ovs-vsctl", "--if-exists", "del-br", name[:15]])


@pytest.mark.system
def test_delete_removes_everything_of_the_lab_and_nothing_else(foreign):
    done = nn("create", "--lab", "t3", "--nodes", "2", "--iphys", "1")
    assert done.returncode == 0, done.stderr
    assert lab_traces("t3")
    assert nn("delete", "--lab", "t3").returncode == 0
    assert lab_traces("t3") == []
    assert nn("delete", "--lab", "t3").returncode == 0  # idempotent
    assert subprocess.run(["docker", "inspect", foreign], capture_output=True).returncode == 0
    assert subprocess.run(["ovs-vsctl", "br-exists", foreign[:15]]).returncode == 0


@pytest.mark.system
def test_failed_create_rolls_back_and_spares_a_foreign_interface():
    from pyroute2 import IPRoute

    squatter = "t4-2x1"  # the name node 2's iPHY 1 needs on the host
    with IPRoute() as ipr:
        ipr.link("add", ifname=squatter, kind="veth", peer={"ifname": "t4squat"})
    try:
        done = nn("create", "--lab", "t4", "--nodes", "2", "--iphys", "1")
        assert done.returncode == 1
        assert "t4-2x1" in done.stderr and "exists already" in done.stderr
        assert [t for t in lab_traces("t4") if not t.startswith(f"link {squatter}")] == []
    finally:
        with IPRoute() as ipr:
            ipr.link("del", ifname=squatter)
    assert lab_traces("t4") == []


@pytest.mark.system
def test_cleanup_removes_a_crashed_create():
    env = dict(os.environ)
    proc = subprocess.Popen([CLI, "create", "--lab", "t5", "--nodes", "3", "--iphys", "2",
                             "--jobs", "1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    resources = LABS / "t5" / "resources.jsonl"
    for _ in range(600):
        if resources.exists() and '"container"' in resources.read_text():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # a crash: no rollback runs
    proc.wait()
    try:
        assert lab_traces("t5"), "the crashed create should have left something"
        dry = nn("cleanup", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        assert any("t5" in item for item in json.loads(dry.stdout)["removed"])
        assert lab_traces("t5"), "--dry-run must not remove anything"
        assert nn("cleanup").returncode == 0
        assert lab_traces("t5") == []
        again = json.loads(nn("cleanup", "--json").stdout)
        assert not any("t5" in item for item in again["removed"])
    finally:
        nn("delete", "--lab", "t5")


@pytest.mark.system
def test_apply_step_swaps_links_in_one_bundle(lab):
    from nestednet.lab.links import LabLinks
    from nestednet.lab.record import LabRecord

    links = LabLinks.of(LabRecord(lab))
    first = (topo_end(1, 1), topo_end(2, 1))
    second = (topo_end(1, 2), topo_end(2, 2))
    links.apply_step(add=[first], remove=[])
    try:
        assert links.links() == [first]
        links.apply_step(add=[second], remove=[first])
        assert links.links() == [second]
        assert pings("n1", "iphy2", "192.168.2.4")
    finally:
        links.apply_step(add=[], remove=[first, second])
    assert links.links() == []


def topo_end(node: int, iphy: int):
    from nestednet.model.topology import Endpoint

    return Endpoint(node, iphy)


@pytest.mark.system
def test_cleanup_finds_orphans_by_label_and_name_only():
    """Resources marked as lab t7's with no t7 record go; look-alikes without marks stay."""
    from pyroute2 import netns

    orphan, lookalike = "t7-n1", f"t7x{uuid.uuid4().hex[:6]}"
    subprocess.run(["docker", "run", "-d", "--name", orphan, "--network", "none",
                    "--label", "org.nestednet.lab=t7", images.COMPONENT_IMAGE],
                   check=True, capture_output=True)
    subprocess.run(["docker", "run", "-d", "--name", lookalike, "--network", "none",
                    images.COMPONENT_IMAGE], check=True, capture_output=True)
    subprocess.run(["ovs-vsctl", "add-br", "t7-main", "--", "set", "bridge", "t7-main",
                    "datapath_type=netdev", "external_ids:org.nestednet.lab=t7"], check=True)
    subprocess.run(["ovs-vsctl", "add-br", "t7-other", "--", "set", "bridge", "t7-other",
                    "datapath_type=netdev"], check=True)
    netns.create("nestednet-t7-ctl")
    try:
        dry = json.loads(nn("cleanup", "--dry-run", "--json").stdout)["removed"]
        assert any("t7-n1" in x for x in dry) and any("t7-main" in x for x in dry)
        assert any("nestednet-t7-ctl" in x for x in dry)
        assert not any(lookalike in x or "t7-other" in x for x in dry)
        assert nn("cleanup").returncode == 0
        assert sorted(lab_traces("t7")) == ["bridge t7-other", "link t7-other"]
        assert subprocess.run(["docker", "inspect", lookalike],
                              capture_output=True).returncode == 0
    finally:
        subprocess.run(["docker", "rm", "-f", orphan, lookalike], capture_output=True)
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", "t7-main"])
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", "t7-other"])
        if "nestednet-t7-ctl" in netns.listnetns():
            netns.remove("nestednet-t7-ctl")
