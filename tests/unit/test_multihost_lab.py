"""Multi-host labs through the create seam, the parts that need no host: the request's
checks and write-ahead record entries, flows per host (HostLinks), shaping per network
namespace, and the CLI's refusals."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner

from nestednet.adapters import openflow, tc
from nestednet.cli import main
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.lab import designs, shaping
from nestednet.lab.create import CreateRequest, validate
from nestednet.lab.links import COOKIE_MARK
from nestednet.lab.multihost import HostHandle, HostLinks
from nestednet.lab.record import LabRecord
from nestednet.model import placement as pl
from nestednet.model import topology as topo
from nestednet.model import tunnels
from nestednet.model.addressing import AddressPlan
from nestednet.model.link_properties import parse_properties
from nestednet.model.shaping_policy import RATE_ONLY
from nestednet.model.tunnels import DataPlane

pytestmark = pytest.mark.unit

E = topo.Endpoint
HOSTS = pl.hosts_from_doc({"hosts": [
    {"name": "hostA", "address": "10.0.0.1", "emulated": "emu-a", "capacity": 3},
    {"name": "hostB", "address": "10.0.0.2", "emulated": "emu-b"}], "vni": 7000})


def request(**kw) -> CreateRequest:
    return CreateRequest(**{"lab": "mh", "nodes": 4, "iphys": 2, "design": "swarm",
                            "hosts": HOSTS, **kw})


def test_hosts_doc_round_trips_with_the_emulated_field():
    assert HOSTS.hosts[0].emulated == "emu-a"
    assert pl.hosts_from_doc(pl.hosts_doc(HOSTS)) == HOSTS


@pytest.mark.parametrize(("kw", "words"), [
    ({"hosts": None}, "need --hosts"),
    ({"routing": "babel", "component_caps": ()}, "needs NET_ADMIN in --component-caps"),
    ({"pins": ("n1=hostC",)}, "no host named 'hostC'"),
    ({"nodes": 9, "placement": "packed", "hosts": pl.hosts_from_doc(
        {"hosts": [{"name": "a", "address": "10.0.0.1", "capacity": 4}]})}, "do not fit"),
])
def test_swarm_requests_are_checked_before_anything_is_made(kw, words):
    with pytest.raises(UsageError, match=words):
        validate(request(**kw))


@pytest.mark.parametrize("kw", [
    {"cpus": 0.5, "memory_mb": 96},
    {"routing": "babel"},
    {"routing": "direct"},
    {"images": (("iphy", "example/iphy"), ("gnab", "example/gnab"))},
])
def test_swarm_labs_take_the_nested_labs_options(kw):
    """--cpus, --memory, --routing and --image mean on a swarm lab what they mean on a
    one-host nested lab (the same code paths build them)."""
    shape, _plan = validate(request(**kw))
    assert shape == topo.Shape(4, 2)
    swarm, nested = designs.named("swarm"), designs.named("nested")
    assert (swarm.routings, swarm.user_images) == (nested.routings, nested.user_images)


def test_route_watch_finds_each_gnab_the_labs_designs_way(monkeypatch):
    from nestednet.lab import route_watch
    from nestednet.lab.nodes import Lab

    asked, closed = [], []

    class Design:
        def before_use(self, lab):
            asked.append("woken")

        def gnab_pid(self, lab, number):
            asked.append(number)
            return 100 + number

        def close(self):
            closed.append(True)

    monkeypatch.setattr(designs, "of", lambda meta: Design() if meta["kind"] == "swarm"
                        else pytest.fail("not the lab's design"))
    lab = Lab(LabRecord("mh", Path("/nonexistent")), {"kind": "swarm"}, topo.Shape(3, 1),
              client=None)
    assert route_watch.gnab_pids(lab) == {1: 101, 2: 102, 3: 103}
    # Not woken: a GNAB's pid is read from its node's data root (waking 250 engines at
    # once loaded the machine at a run's first step).
    assert asked == [1, 2, 3] and closed == [True]


def test_hosts_are_refused_by_the_one_host_designs():
    for kind in ("nested", "flat"):
        with pytest.raises(UsageError, match=f"--hosts is not available in {kind} labs"):
            validate(request(design=kind))


def test_placement_goes_into_the_record_before_anything_is_made():
    design = designs.named("swarm")
    shape, _plan = validate(request(pins=("n4=hostA",)))
    meta = design.extra_meta(request(pins=("n4=hostA",)), shape)
    assert meta["placement"] == {"1": "hostB", "2": "hostA", "3": "hostB", "4": "hostA"}
    assert pl.hosts_from_doc(meta["hosts"]) == HOSTS


class RecordingHelper:
    """A host's helper that records the tc calls it is asked for."""

    calls: ClassVar[list[tuple[str, str, list]]] = []

    def __init__(self, host: str) -> None:
        self.host = host

    netem: ClassVar[dict[str, bool]] = {}
    """Per host, whether its kernel has sch_netem (the `qdiscs` answer)."""
    asked: ClassVar[list[str]] = []
    """The hosts asked for their qdiscs."""

    def call(self, op: str, **args):
        if op == "qdiscs":
            RecordingHelper.asked.append(self.host)
            return {"netem": RecordingHelper.netem.get(self.host, True), "htb": True}
        assert op == "tc"
        RecordingHelper.calls.append((self.host, args["function"], args["args"]))
        if args["function"] == "read":
            return {p: {"exists": True, "root": {"kind": "noqueue", "handle": "0:0"},
                        "qdiscs": [], "classes": [], "filters": []} for p in args["args"][1]}
        return {} if args["function"] == "build" else list(args["args"][1])


def _links(tmp_path: Path, hosts: pl.HostSet = HOSTS) -> HostLinks:
    shape = topo.Shape(3, 2)
    plan = AddressPlan.for_shape(shape)
    dp = DataPlane.of("mh", plan, hosts, {1: "hostA", 2: "hostB", 3: "hostA"})
    handles = {h.name: HostHandle(h.name, None, None, h.address, hosts.ssl,
                                  RecordingHelper(h.name), "/x")
               for h in hosts.hosts}
    return HostLinks("mh", topo.main_bridge("mh"), plan, tmp_path, dp=dp, hosts=handles)


def _target(host: str) -> str:
    """Where the lab "mh" reaches ``host``'s main bridge: its address, the lab's port."""
    return f"tcp:{HOSTS.named(host).address}:{tunnels.openflow_port('mh', HOSTS)}"


def test_host_links_send_one_batch_per_host_a_link_touches_over_the_network(
        tmp_path, monkeypatch):
    FakeChannel.opened = []
    monkeypatch.setattr(openflow, "Channel", FakeChannel)
    links = _links(tmp_path)
    links.install(E(1, 1), E(2, 1))
    batches = {c.target: c.batches for c in FakeChannel.opened}
    assert sorted(batches) == [_target("hostA"), _target("hostB")]
    assert {c.target: c.dpid for c in FakeChannel.opened} == {
        _target("hostA"): tunnels.datapath_id("mh", 0),
        _target("hostB"): tunnels.datapath_id("mh", 1)}
    assert all(len(b) == 1 and len(b[0]["rules"]) == 2 for b in batches.values())
    assert all(rule[0] == links.cookie(E(1, 1), E(2, 1))
               for b in batches.values() for rule in b[0]["rules"])
    assert all(c.outcomes == [(1, "commit")] for c in FakeChannel.opened)
    assert all(c.closed for c in FakeChannel.opened), "a CLI call's sessions are closed"
    FakeChannel.opened = []
    links.install(E(1, 2), E(3, 2))  # same host: the usual pair, hostA only
    assert [(c.target, len(c.batches[0]["rules"])) for c in FakeChannel.opened] == [
        (_target("hostA"), 2)]
    FakeChannel.opened = []
    done = links.apply_step(add=[(E(1, 2), E(3, 2))], remove=[(E(1, 1), E(2, 1))])
    assert sorted((c.target, len(c.batches[0]["rules"]), len(c.batches[0]["delete"]))
                  for c in FakeChannel.opened) == [(_target("hostA"), 2, 1),
                                                   (_target("hostB"), 0, 1)]
    assert sorted(done) == ["hostA", "hostB"] and all(t >= 0 for t in done.values())
    assert links.describe((E(1, 1), E(2, 1)))["hosts"] == ["hostA", "hostB"]
    FakeChannel.opened = []
    links.clear()
    assert sorted((c.target, c.batches[0]["masked"]) for c in FakeChannel.opened) == [
        (t, [(COOKIE_MARK, 0xFFFF << 48)]) for t in (_target("hostA"), _target("hostB"))]


def test_host_links_refused_by_a_host_raise_naming_it(tmp_path, monkeypatch):
    from nestednet.errors import EnvironmentProblem

    FakeChannel.opened = []
    monkeypatch.setattr(FakeChannel, "refusing", {_target("hostB")})
    monkeypatch.setattr(openflow, "Channel", FakeChannel)
    with pytest.raises(EnvironmentProblem, match="host hostB refused flow changes"):
        _links(tmp_path).install(E(1, 1), E(2, 1))
    assert {c.target: c.outcomes for c in FakeChannel.opened} == {
        _target("hostA"): [(1, "discard")], _target("hostB"): [(1, "discard")]}, \
        "one host refusing: no host commits its part"


def test_host_links_are_read_from_every_hosts_flow_table(tmp_path, monkeypatch):
    links = _links(tmp_path)
    cross, local = links.cookie(E(2, 2), E(3, 1)), links.cookie(E(1, 2), E(3, 2))
    monkeypatch.setattr(FakeChannel, "tables", {_target("hostA"): {cross, local, 0x1234},
                                                _target("hostB"): {cross}})
    monkeypatch.setattr(openflow, "Channel", FakeChannel)
    assert links.links() == [(E(1, 2), E(3, 2)), (E(2, 2), E(3, 1))]
    # A host whose listener refuses the connection has no main bridge of the lab.
    monkeypatch.setattr(FakeChannel, "tables", {_target("hostA"): {local}})
    assert links.links() == [(E(1, 2), E(3, 2))]


def test_ssl_in_the_hosts_file_makes_every_session_ssl(tmp_path, monkeypatch):
    hosts = pl.hosts_from_doc({**pl.hosts_doc(HOSTS), "openflow_port": 7001,
                               "ssl": {"private_key": "k.pem", "certificate": "c.pem",
                                       "ca_cert": "ca.pem"}})
    assert pl.hosts_from_doc(pl.hosts_doc(hosts)) == hosts
    FakeChannel.opened = []
    monkeypatch.setattr(openflow, "Channel", FakeChannel)
    _links(tmp_path, hosts).install(E(1, 1), E(2, 1))
    assert sorted(c.target for c in FakeChannel.opened) == ["ssl:10.0.0.1:7001",
                                                            "ssl:10.0.0.2:7001"]
    assert all(c.tls == pl.Tls("k.pem", "c.pem", "ca.pem") for c in FakeChannel.opened)


def test_a_cross_host_link_is_shaped_on_each_receiving_host_with_offloads_kept(
        tmp_path, monkeypatch):
    """Each direction's tree is built and removed by the receiving port's host's helper
    (tc in that host's namespace), never on this machine; the offloads stay on."""
    for name in ("build", "apply", "disable_offloads", "remove_trees", "check_ports"):
        monkeypatch.setattr(tc, name, lambda *a, name=name: pytest.fail(f"local tc.{name}"))
    monkeypatch.setattr(openflow, "Channel", FakeChannel)
    RecordingHelper.calls = []
    links = _links(tmp_path)
    monkeypatch.setattr(HostLinks, "link_cookies", lambda self: set())
    record = LabRecord("mh", tmp_path)
    record.claim()
    shaper = shaping.lab_shaper(record, RATE_ONLY, links=links)
    shaping.add_link(links, shaper, E(1, 1), E(2, 1), parse_properties({"rate": "20Mbit"}))
    built = sorted((h, args[2]) for h, f, args in RecordingHelper.calls if f == "build")
    assert built == [("hostA", ["mh-1x1"]), ("hostB", ["mh-2x1"])]
    assert all(args[1] is None and args[0] and all(op["port"] == args[2][0] for op in args[0])
               for _h, f, args in RecordingHelper.calls if f == "build")
    assert {f for _h, f, _a in RecordingHelper.calls} == {"build"}, "offloads kept"
    assert {(r.name, r.where) for r in record.resources() if r.kind == "tc-root"} == {
        ("mh-1x1", "hostA"), ("mh-2x1", "hostB")}
    assert {shaper.netns(p) for p in ("mh-1x1", "mh-2x1")} == {"hostd:hostA", "hostd:hostB"}
    monkeypatch.setattr(HostLinks, "link_cookies",
                        lambda self: {self.cookie(E(1, 1), E(2, 1))})
    RecordingHelper.calls = []
    shaping.delete_link(links, shaper, E(1, 1), E(2, 1))
    assert sorted((h, f, args) for h, f, args in RecordingHelper.calls) == [
        ("hostA", "remove_trees", [None, ["mh-1x1"]]),
        ("hostB", "remove_trees", [None, ["mh-2x1"]])]


def test_link_list_reads_each_unshaped_port_on_its_own_host(tmp_path, monkeypatch):
    """An unshaped cross-host link: each port's qdiscs are read by its host's helper,
    never in this machine's namespace (where the port is not)."""
    monkeypatch.setattr(tc, "read", lambda *a: pytest.fail("read on this machine"))
    RecordingHelper.calls = []
    links = _links(tmp_path)
    monkeypatch.setattr(HostLinks, "link_cookies",
                        lambda self: {self.cookie(E(1, 1), E(2, 1))})
    record = LabRecord("mh", tmp_path)
    record.claim()
    rows = shaping.list_links(links, shaping.lab_shaper(record, RATE_ONLY, links=links))
    assert sorted((h, f, args) for h, f, args in RecordingHelper.calls) == [
        ("hostA", "read", [None, ["mh-1x1"]]), ("hostB", "read", [None, ["mh-2x1"]])]
    assert [d["kernel"] for d in rows[0]["directions"]] == [None, None]


@pytest.mark.parametrize(("args", "words"), [
    (["--place", "n1=hostA"], "--place and --pack need --hosts"),
    (["--pack"], "--place and --pack need --hosts"),
    (["--flat", "--hosts", "HOSTS"], "--flat and --hosts cannot be combined"),
    (["--hosts", "HOSTS", "--place", "n9=hostA"], "--place 'n9=hostA'"),
    (["--hosts", "HOSTS", "--cpus", "0"], "--cpus must be above 0"),
])
def test_create_cli_refuses_bad_multihost_options_with_exit_2(tmp_path, args, words):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(pl.json.dumps(pl.hosts_doc(HOSTS)))
    args = [str(hosts) if a == "HOSTS" else a for a in args]
    result = CliRunner().invoke(main, ["create", "-n", "2", "-m", "1", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output


def test_run_takes_a_multihost_lab_of_the_scenarios_shape(tmp_path):
    from nestednet.ca.session import check_fits
    from nestednet.lab.nodes import Lab
    from nestednet.model.scenario_file import load_scenario

    scenario = load_scenario("scenarios/small-4x2.json")
    assert designs.named("swarm").plays_scenarios
    check_fits(scenario, Lab(LabRecord("mh", tmp_path), {"kind": "swarm"}, topo.Shape(4, 2),
                             client=None))
    small = Lab(LabRecord("mh", tmp_path), {"kind": "swarm"}, topo.Shape(3, 2), client=None)
    with pytest.raises(UsageError, match="scenario needs 4 nodes x 2 iPHYs but lab mh has 3"):
        check_fits(scenario, small)


class FakeChannel:
    """An OpenFlow session that answers each batch once read (a socket pair makes it
    readable, so the installer's select sees it), refusing what ``refuse`` names, over
    the network to ``listener`` (a target absent from ``tables`` refuses the connection,
    as a host without the lab's bridge does)."""

    opened: ClassVar[list[FakeChannel]] = []
    refusing: ClassVar[set[str]] = set()
    tables: ClassVar[dict[str, set[int]] | None] = None

    def __init__(self, bridge: str, rundir: str = "", timeout: float = 10.0, *,
                 listener: openflow.Listener | None = None, dpid: int | None = None) -> None:
        import socket

        from nestednet.errors import EnvironmentProblem

        assert listener is not None, "a lab over several hosts reaches them over the network"
        self.target, self.dpid, self.tls = str(listener), dpid, listener.tls
        if FakeChannel.tables is not None and self.target not in FakeChannel.tables:
            raise EnvironmentProblem("refused") from ConnectionRefusedError()
        self.mine, self.theirs = socket.socketpair()
        self.batches: list[dict] = []
        self.outcomes: list[tuple[int, str]] = []
        self.pending: list = []
        self.refuse = self.target in FakeChannel.refusing
        self.closed = False
        FakeChannel.opened.append(self)

    def fileno(self) -> int:
        return self.mine.fileno()

    def cookies(self) -> set[int]:
        assert FakeChannel.tables is not None
        return FakeChannel.tables[self.target]

    def submit(self, done, *, add=(), delete=(), rules=(), delete_masked=()) -> None:
        self.batches.append({"delete": list(delete), "rules": list(rules),
                             "masked": list(delete_masked)})
        self.pending.append(done)
        self.theirs.send(b"x")

    def stage(self, done, **batch) -> int:
        self.submit(lambda errors: done(["type 1 code 2"] if self.refuse else []), **batch)
        return len(self.batches)

    def finish(self, bundle: int, done, *, commit: bool) -> None:
        self.outcomes.append((bundle, "commit" if commit else "discard"))
        self.pending.append(done)
        self.theirs.send(b"x")

    def read(self) -> None:
        self.mine.recv(64)
        self.pending.pop(0)([])

    def close(self) -> None:
        self.closed = True
        self.mine.close()
        self.theirs.close()


def test_hosts_installer_sends_each_batch_to_every_host_it_touches_and_times_each(
        tmp_path, monkeypatch):
    from nestednet.ca.assistant import LinkEnds
    from nestednet.ca.flows import HostsInstaller
    from nestednet.errors import EnvironmentProblem

    FakeChannel.opened = []
    monkeypatch.setattr(openflow, "Channel", FakeChannel)
    links = _links(tmp_path)
    heard: list[tuple[str, int, dict[str, float]]] = []
    names = {"a": 1, "b": 2, "c": 3}
    installer = HostsInstaller(links, lambda node, iphy: E(names[node], int(iphy[-1])),
                               lambda op, n, per_host: heard.append((op, n, per_host)))
    installer.open()
    channels = {c.target: c for c in FakeChannel.opened}
    host_a, host_b = channels[_target("hostA")], channels[_target("hostB")]
    cross, local = LinkEnds("a", "iphy1", "b", "iphy1"), LinkEnds("a", "iphy2", "c", "iphy2")
    installer.install([cross, local])
    cookie = links.cookie(E(1, 1), E(2, 1))
    tags = {(r[3], r[4]) for r in host_a.batches[0]["rules"] if r[0] == cookie}
    assert len(host_a.batches[0]["rules"]) == 4 and len(host_b.batches[0]["rules"]) == 2
    assert tags == {(None, links.dp.slots[E(2, 1)]), (links.dp.slots[E(1, 1)], None)}
    assert [(op, n, sorted(hosts)) for op, n, hosts in heard] == [
        ("add", 2, ["hostA", "hostB"])]
    installer.remove([local])
    assert host_a.batches[-1] == {"delete": [links.cookie(E(1, 2), E(3, 2))], "rules": [],
                                  "masked": []}
    assert len(host_b.batches) == 1, "a same-host link touches one host only"
    assert heard[-1][:2] == ("remove", 1) and list(heard[-1][2]) == ["hostA"]
    installer.install([])
    assert len(heard) == 2, "an empty batch touches no host and says nothing"
    host_b.refuse = True
    with pytest.raises(EnvironmentProblem, match="host hostB refused flow changes"):
        installer.install([cross])
    installer.close()
    assert host_a.closed and host_b.closed


def test_host_flows_events_say_each_hosts_time_and_the_spread():
    from nestednet.model.events import (
        HOST_FLOWS,
        Event,
        host_flows_fields,
        host_flows_summary,
        parse_event,
    )

    fields = host_flows_fields("add", 3, {"hostB": 0.0254, "hostA": 0.0211})
    assert fields == {"op": "add", "links": 3, "hosts_ms": {"hostA": 21.1, "hostB": 25.4},
                      "spread_ms": 4.3}
    assert host_flows_fields("remove", 1, {"hostA": 0.01})["spread_ms"] == 0.0
    line = Event(HOST_FLOWS, 1.0, extra=fields).to_dict()
    assert parse_event(line, "events.jsonl line 1").extra["hosts_ms"] == fields["hosts_ms"]
    events = [Event(HOST_FLOWS, 0.0, extra=host_flows_fields("add", 1, times))
              for times in ({"a": 0.010, "b": 0.012}, {"a": 0.020, "b": 0.030}, {"a": 0.005})]
    summary = host_flows_summary(events)
    cross = summary["add"]["several_hosts"]
    assert cross["batches"] == 2 and summary["add"]["one_host"]["batches"] == 1
    assert (cross["all_ms"]["p50"], cross["all_ms"]["max"]) == (12.0, 30.0)
    assert (cross["spread_ms"]["p50"], cross["spread_ms"]["p90"]) == (2.0, 10.0)


@pytest.mark.parametrize(("change", "words"), [
    ({"ssl": {"private_key": "k", "certificate": "c", "ca_cert": "a"},
      "ovsdb": "tcp:10.0.0.1:6640"}, "plain TCP while the file gives `ssl`"),
    ({"ovsdb": "ssl:10.0.0.1:6641"}, "needs the file's `ssl`"),
    ({"ssl": {"private_key": "k", "certificate": "c"}}, "ca_cert"),
    ({"openflow_port": 80}, "1024 to 65535"),
])
def test_hosts_file_control_path_mistakes_are_located(change, words):
    doc = pl.hosts_doc(HOSTS)
    if "ovsdb" in change:
        doc["hosts"][0]["ovsdb"] = change.pop("ovsdb")
    with pytest.raises(UsageError) as raised:
        pl.hosts_from_doc({**doc, **change})
    assert words in str(raised.value) + str(raised.value.hint or "")


def test_a_labs_openflow_port_and_datapath_ids():
    ports = {tunnels.openflow_port(f"lab{i}", HOSTS) for i in range(50)}
    assert all(tunnels.OPENFLOW_PORT_FIRST <= p
               < tunnels.OPENFLOW_PORT_FIRST + tunnels.OPENFLOW_PORTS for p in ports)
    assert len(ports) > 40, "labs sharing hosts mostly get ports of their own"
    pinned = pl.hosts_from_doc({**pl.hosts_doc(HOSTS), "openflow_port": 7001})
    assert tunnels.openflow_port("any", pinned) == 7001
    dp = DataPlane.of("mh", AddressPlan.for_shape(topo.Shape(2, 1)), HOSTS,
                      {1: "hostA", 2: "hostB"})
    assert dp.dpid("hostA") != dp.dpid("hostB")
    assert dp.dpid("hostA") >> 48 == tunnels.DPID_MARK
    assert dp.dpid("hostA") != tunnels.datapath_id("other", 0)
    assert openflow.Listener("10.0.0.1", 7001).passive() == "ptcp:7001:10.0.0.1"
    tls = pl.Tls("k", "c", "a")
    assert openflow.Listener("10.0.0.1", 7001, tls).passive() == "pssl:7001:10.0.0.1"
    assert str(openflow.Listener("10.0.0.1", 7001, tls)) == "ssl:10.0.0.1:7001"


class FakeOvs:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def add_bridge(self, name, **kw) -> None:
        self.calls.append(("add_bridge", name, kw))

    def set_controller(self, bridge, *targets, inactivity_probe=None) -> None:
        self.calls.append(("set_controller", bridge, targets, inactivity_probe))

    def add_port(self, bridge, port, **kw) -> None:
        self.calls.append(("add_port", bridge, port))


def test_a_main_bridge_listens_on_its_hosts_address_and_is_checked_at_once(
        tmp_path, monkeypatch):
    from nestednet.lab import multihost as mh

    links = _links(tmp_path)
    host = links.hosts["hostA"]
    ovs = FakeOvs()
    object.__setattr__(host, "ovs", ovs)
    FakeChannel.opened = []
    monkeypatch.setattr(openflow, "Channel", FakeChannel)
    mh._make_main_bridge("mh", links.dp, host, "netdev")
    (_, name, kw), controller = ovs.calls
    assert name == "mh-main" and kw["fail_mode"] == "secure"
    assert kw["other_config"] == {"datapath-id": f"{links.dp.dpid('hostA'):016x}",
                                  "disable-in-band": "true"}
    assert controller == ("set_controller", "mh-main",
                          (f"ptcp:{links.dp.openflow_port}:10.0.0.1",), 0)
    assert [(c.target, c.dpid, c.closed) for c in FakeChannel.opened] == [
        (_target("hostA"), links.dp.dpid("hostA"), True)]


def test_connect_takes_the_hosts_engine_ovsdb_remote_ssl_and_helper(monkeypatch):
    """Every host, real or emulated, the same way: its engine URL, its OVSDB remote, the
    helper at its address (the port by mode); a file without `engine` or `ovsdb` is a
    located error, and so is a helper of another protocol version."""
    from types import SimpleNamespace

    from nestednet.hostd import client as hostd
    from nestednet.hostd import protocol
    from nestednet.lab import multihost as mh

    opened = []

    class FakeHelper:
        version = protocol.VERSION

        def __init__(self, host, address, port, tls, insecure=False, connect_timeout=10.0):
            opened.append((host, address, port, tls))
            self.closed = False

        def call(self, op, **args):
            assert op == "hello"
            return {"version": self.version, "state_dir": "/srv/nn"}

        def close(self):
            self.closed = True

    monkeypatch.setattr(hostd, "HelperClient", FakeHelper)
    monkeypatch.setattr(mh.docker, "DockerClient", lambda **kw: SimpleNamespace(**kw))
    tls = pl.Tls("k", "c", "a")
    remote = pl.Host("hostA", "10.0.0.1", engine="ssh://root@10.0.0.1",
                     ovsdb="ssl:10.0.0.1:6641")
    handle = mh.connect(remote, pl.HostSet((remote,), ssl=tls))
    assert (handle.ovs.remote, handle.ovs.tls) == ("ssl:10.0.0.1:6641", tls)
    assert handle.engine.base_url == "ssh://root@10.0.0.1"
    assert str(handle.listener(7001)) == "ssl:10.0.0.1:7001"
    assert handle.state_there == "/srv/nn" and handle.netns == "hostd:hostA"
    plain = pl.Host("hostB", "10.0.0.2", engine="tcp://10.0.0.2:2375", ovsdb="tcp:10.0.0.2:6640")
    mh.connect(plain, pl.HostSet((plain,), hostd_port=7100))
    assert opened == [("hostA", "10.0.0.1", 6650, tls), ("hostB", "10.0.0.2", 7100, None)]
    with pytest.raises(UsageError, match="hostC: the hosts file gives no `engine`"):
        bare = pl.Host("hostC", "10.0.0.3", ovsdb="tcp:10.0.0.3:6640")
        mh.connect(bare, pl.HostSet((bare,)))
    FakeHelper.version = protocol.VERSION + 1
    with pytest.raises(EnvironmentProblem, match="helper speaks protocol"):
        mh.connect(plain, pl.HostSet((plain,)))


def test_netem_is_asked_of_every_host_of_a_lab_not_of_this_machine(tmp_path, monkeypatch):
    """A lab over several hosts may ask for delay, jitter and loss only when every host's
    kernel has sch_netem, as each host's helper finds it; a one-host lab asks this
    machine's kernel."""
    from nestednet.capabilities import shaping as probe
    from nestednet.lab import links as one_host

    monkeypatch.setattr(RecordingHelper, "asked", [])
    monkeypatch.setattr(RecordingHelper, "netem", {"hostA": True, "hostB": True})
    assert _links(tmp_path).netem_available()
    assert sorted(RecordingHelper.asked) == ["hostA", "hostB"]
    monkeypatch.setattr(RecordingHelper, "netem", {"hostA": True, "hostB": False})
    assert not _links(tmp_path).netem_available()
    monkeypatch.setattr(probe, "available_qdiscs", lambda: {"netem": False})
    assert not one_host.LabLinks("nn", "nn-main", AddressPlan.for_shape(topo.Shape(2, 1)),
                                 tmp_path).netem_available()
    monkeypatch.setattr(probe, "available_qdiscs", lambda: {"netem": True})
    assert one_host.LabLinks("nn", "nn-main", AddressPlan.for_shape(topo.Shape(2, 1)),
                             tmp_path).netem_available()
