"""The Python API against a real lab: three nodes in a babel line, linked, shaped, probed
with commands and a long-running process, then a scenario played through `Lab.run`."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from labs import forget

import nestednet as nn

pytestmark = pytest.mark.system

LAB = "apisys"


@pytest.fixture(scope="module")
def lab() -> Iterator[nn.Lab]:
    forget(LAB)
    phases: list[tuple[str, int]] = []
    with nn.Lab.create(LAB, nodes=3, iphys=2, routing="babel",
                       progress=lambda phase, node: phases.append((phase, node))) as made:
        plan = nn.Lab.check(LAB + "x", nodes=3, iphys=2, routing="babel")
        assert {p for p, _ in phases} == set(plan.phases)
        assert sorted({n for _, n in phases}) == [1, 2, 3]
        yield made
    assert not nn.Lab.exists(LAB), "leaving the with block deletes the lab"


def test_nodes_and_components_carry_the_status_addresses(lab: nn.Lab) -> None:
    status = lab.status()
    assert [n.name for n in lab.nodes] == [n["node"] for n in status["nodes"]]
    for node, entry in zip(lab.nodes, status["nodes"], strict=True):
        assert node.address == entry["node_address"]
        assert node.status()["state"] == "running"
        for comp, row in zip(node.components, entry["components"], strict=True):
            assert comp.name == row["component"]
            assert comp.intra_address == row["intra"].split("/")[0]
            if not comp.is_gnab:
                assert comp.address == row["inter"].split("/")[0]
            assert comp.status()["state"] == "running"
    assert lab.node("n3").component("iphy2").endpoint == "n3:iphy2"
    with pytest.raises(nn.InputError):
        lab.node("n4")
    with pytest.raises(nn.InputError):
        lab.node("n1").component("iphy3")


def test_exec_gives_exit_code_and_both_streams(lab: nn.Lab) -> None:
    iphy = lab.component("n2:iphy1")
    result = iphy.exec("ip -4 -o addr show; echo to-err >&2; exit 4")
    assert result.exit_code == 4 and result.stderr == "to-err\n"
    assert iphy.address in result.stdout
    assert lab.node("n1").exec(["ip", "-4", "-o", "addr", "show", "lo"]).check().stdout \
        .count(lab.node("n1").address) == 1


def test_links_shape_change_and_go(lab: nn.Lab) -> None:
    a, b = lab.node("n1").iphy(1), lab.node("n2").iphy(1)
    link = lab.link(a, b, rate="20Mbit")
    assert (link.a, link.b, link.b_address) == ("n1:iphy1", "n2:iphy1", b.address)
    assert a.exec(f"ping -c1 -W2 {b.address}").ok
    with pytest.raises(nn.InputError, match="busy"):
        lab.link("n1:iphy1", "n3:iphy1")
    [listed] = lab.links()
    assert listed == link and listed.broken is None
    assert [d.kernel["rate_bps"] for d in listed.directions] == [20_000_000, 20_000_000]
    changed = link.set(rate="5Mbit", direction="a-to-b")
    assert [(c.name, c.properties.rate_bps) for c in changed] == [
        ("n1:iphy1->n2:iphy1", 5_000_000)]
    again = lab.get_link("n2:iphy1", "n1:iphy1")
    assert [d.kernel["rate_bps"] for d in again.directions] == [5_000_000, 20_000_000]
    link.remove()
    assert lab.links() == []
    assert not a.exec(f"ping -c1 -W1 {b.address}").ok


def test_babel_routes_a_ping_across_a_line(lab: nn.Lab) -> None:
    n1, n2, n3 = lab.nodes
    lab.link(n1.iphy(1), n2.iphy(1))
    lab.link(n2.iphy(2), n3.iphy(1))
    try:
        deadline = time.monotonic() + 60
        while not (result := n1.exec(f"ping -c1 -W1 {n3.address}")).ok:
            assert time.monotonic() < deadline, result.stdout
            time.sleep(1)
    finally:
        for link in lab.links():
            link.remove()


def test_popen_runs_on_until_terminated(lab: nn.Lab) -> None:
    proc = lab.node("n3").iphy(2).popen("echo up; exec sleep 60")
    deadline = time.monotonic() + 20
    while "up" not in proc.stdout:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert proc.running()
    result = proc.terminate()
    assert result.exit_code == 143 and not proc.running()


def test_a_run_on_the_lab_gives_typed_events_and_a_summary(lab: nn.Lab) -> None:
    scenario = nn.Scenario.build(nodes={"a": 1, "b": 1, "c": 1}, duration=6, steps=[
        (0, [("a", "b")]), (2, [("a", "b"), ("b", "c")]), (4, [("b", "c")])])
    seen: list[tuple[str, float, tuple[str, ...]]] = []
    with lab.run(scenario, speed=3) as run:
        for event in run.events({"link_up", "link_down"}):
            assert isinstance(event, nn.Event)
            seen.append((event.event, event.scenario_time, tuple(sorted(event.nodes))))
    summary = run.summary()
    # b has one iPHY: b-c waits until a-b goes down at t=4.
    assert seen == [("link_up", 0.0, ("a", "b")), ("link_down", 4.0, ("a", "b")),
                    ("link_up", 4.0, ("b", "c"))]
    assert (summary.links_up, summary.links_down, summary.steps_played) == (2, 1, 3)
    assert run.events_path.exists() and lab.links() == [], "the CA withdrew its links"


def test_a_run_can_be_stopped(lab: nn.Lab) -> None:
    too_big = nn.Scenario.build(nodes=["a", "b"], duration=600, steps=[(0, [("a", "b")])])
    with pytest.raises(nn.InputError, match="needs 2 nodes x 4 iPHYs"):
        lab.run(too_big)
    scenario = nn.Scenario.build(nodes=["a", "b"], duration=600, iphys=1,
                                 steps=[(0, [("a", "b")])])
    started = time.monotonic()
    with lab.run(scenario) as run:
        for _event in run.events({"link_up"}):
            run.stop()
    assert run.summary().interrupted
    assert time.monotonic() - started < 60 and lab.links() == []


def test_the_lab_record_is_read_once_per_handle(lab: nn.Lab, monkeypatch) -> None:
    """A run and a link listing each read lab.json once, when their handle is made (the
    issue saw four reads in a run and two in `link list`)."""
    from nestednet.lab.record import LabRecord

    reads: list[str] = []
    original = LabRecord.meta

    def counted(self: LabRecord) -> dict:
        reads.append(self.lab)
        return original(self)

    monkeypatch.setattr(LabRecord, "meta", counted)
    lab.link("n1:iphy1", "n2:iphy1", rate="10Mbit")
    listed = nn.Lab.open(LAB).links()
    assert len(listed) == 1 and reads == [LAB], reads
    listed[0].remove()
    reads.clear()
    scenario = nn.Scenario.build(nodes={"a": 1, "b": 1}, duration=2, steps=[(0, [("a", "b")])])
    with nn.Run.start(nn.RunRequest(scenario=scenario, lab=LAB, speed=4)) as run:
        run.wait()
    assert run.summary().links_up == 1
    assert reads == [LAB], f"a run read lab.json {len(reads)} times"
    reads.clear()
    with lab.run(scenario, speed=4) as run:
        run.wait()
    assert reads == [], "a run on an API handle reuses its reading"
