"""Algorithm 1 (the CA's link table) in every branch, under concurrency and as a property.

The link table is the single place that decides which links exist, so each LINK_FAIL
reason is provoked on purpose, every failure is checked to change nothing, and a
hypothesis test drives random request/visibility sequences against an independent
statement of the invariants (not only the table's own violations()).
"""

from __future__ import annotations

import threading
from pathlib import Path

import agent_sim
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nestednet.model import events as ev
from nestednet.model import visibility as mobility
from nestednet.model.line_of_sight import pair
from nestednet.model.link_table import (
    FailReason,
    InterNodeLinks,
    Link,
    LinkFail,
    LinkOk,
    requests_to_send,
    spare_limit,
)
from nestednet.model.scenario import NodeSpec, Scenario, Step
from nestednet.model.scenario_file import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
EXAMPLE_FILES = ["small-4x2.json", "demo-12x4.json", "nestednet-format-example.json"]


def snapshot(table: InterNodeLinks) -> tuple:
    """Everything a request could change: links and every node's free iPHYs."""
    return (tuple(table.links()), {n: tuple(table.free_iphys(n)) for n in table.nodes})


def independent_invariant_breaches(table: InterNodeLinks) -> list[str]:
    """The three invariants, checked from the public view only."""
    found = []
    links = table.links()
    pairs = [lk.pair for lk in links]
    if len(pairs) != len(set(pairs)):
        found.append("two links for one pair")
    ends = [(lk.src, lk.src_iphy) for lk in links] + [(lk.dst, lk.dst_iphy) for lk in links]
    if len(ends) != len(set(ends)):
        found.append("an iPHY in two links")
    for lk in links:
        if lk.pair not in table.visible:
            found.append(f"link {lk.pair} between nodes that do not see each other")
        if lk.src == lk.dst:
            found.append(f"self link {lk}")
    for node in table.nodes:
        used = {i for lk in links for n, i in ((lk.src, lk.src_iphy), (lk.dst, lk.dst_iphy))
                if n == node}
        free = set(table.free_iphys(node))
        if used & free:
            found.append(f"{node}: iPHYs {sorted(used & free)} both used and free")
    return found


def assert_sound(table: InterNodeLinks) -> None:
    assert table.violations() == []
    assert independent_invariant_breaches(table) == []


def expect_fail(table: InterNodeLinks, src: str, dst: str, iphy: int,
                reason: FailReason) -> LinkFail:
    before = snapshot(table)
    answer = table.request(src, dst, iphy)
    assert isinstance(answer, LinkFail), answer
    assert answer.reason == reason, answer
    assert (answer.src, answer.dst, answer.src_iphy) == (src, dst, iphy)
    assert answer.detail
    assert snapshot(table) == before, "a LINK_FAIL must change nothing"
    assert_sound(table)
    return answer


def expect_ok(table: InterNodeLinks, src: str, dst: str, iphy: int, dst_iphy: int) -> Link:
    answer = table.request(src, dst, iphy)
    assert isinstance(answer, LinkOk), answer
    assert answer.link == Link(src=src, src_iphy=iphy, dst=dst, dst_iphy=dst_iphy)
    assert table.link_between(dst, src) == answer.link
    assert iphy not in table.free_iphys(src)
    assert dst_iphy not in table.free_iphys(dst)
    assert_sound(table)
    return answer.link


def triangle(iphys: int = 2) -> InterNodeLinks:
    inventory = {n: range(1, iphys + 1) for n in ("a", "b", "c")}
    return InterNodeLinks(inventory, [("a", "b"), ("a", "c"), ("b", "c")])


# -- LINK_OK --------------------------------------------------------------------------


@pytest.mark.unit
def test_link_ok_uses_the_destinations_lowest_free_iphy():
    table = InterNodeLinks({"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 2]},
                      [("a", "b"), ("a", "c"), ("b", "c")])
    expect_ok(table, "c", "b", 2, dst_iphy=1)
    expect_ok(table, "a", "b", 3, dst_iphy=2)
    assert table.free_iphys("b") == [3]
    table.remove_link("b", "c")
    assert table.free_iphys("b") == [1, 3]
    expect_ok(table, "c", "a", 1, dst_iphy=1)
    assert table.free_iphys("a") == [2]


@pytest.mark.unit
def test_link_ok_for_iphy_numbers_that_are_not_contiguous():
    table = InterNodeLinks({"a": [7], "b": [5, 3]}, [("b", "a")])
    expect_ok(table, "a", "b", 7, dst_iphy=3)
    assert table.free_iphys("b") == [5]


# -- LINK_FAIL, one test per reason ---------------------------------------------------


@pytest.mark.unit
def test_unknown_node_on_either_side():
    table = triangle()
    expect_fail(table, "zz", "a", 1, FailReason.UNKNOWN_NODE)
    expect_fail(table, "a", "zz", 1, FailReason.UNKNOWN_NODE)
    expect_fail(table, "zz", "zz", 1, FailReason.UNKNOWN_NODE)


@pytest.mark.unit
def test_same_node():
    table = triangle()
    expect_fail(table, "a", "a", 1, FailReason.SAME_NODE)


@pytest.mark.unit
def test_not_visible():
    table = InterNodeLinks({"a": [1], "b": [1], "c": [1]}, [("a", "b")])
    expect_fail(table, "a", "c", 1, FailReason.NOT_VISIBLE)
    expect_fail(table, "c", "b", 1, FailReason.NOT_VISIBLE)
    expect_ok(table, "b", "a", 1, dst_iphy=1)


@pytest.mark.unit
def test_src_iphy_unknown():
    table = triangle(iphys=2)
    for iphy in (0, 3, -1, 99):
        expect_fail(table, "a", "b", iphy, FailReason.SRC_IPHY_UNKNOWN)


@pytest.mark.unit
def test_src_iphy_busy():
    table = triangle(iphys=2)
    expect_ok(table, "a", "b", 1, dst_iphy=1)
    answer = expect_fail(table, "a", "c", 1, FailReason.SRC_IPHY_BUSY)
    assert "b" in answer.detail
    expect_ok(table, "a", "c", 2, dst_iphy=1)


@pytest.mark.unit
def test_link_exists_after_own_earlier_request():
    table = triangle(iphys=2)
    expect_ok(table, "a", "b", 1, dst_iphy=1)
    expect_fail(table, "a", "b", 2, FailReason.LINK_EXISTS)
    expect_fail(table, "a", "b", 1, FailReason.LINK_EXISTS)


@pytest.mark.unit
@pytest.mark.parametrize(("winner", "loser"), [("a", "b"), ("b", "a")])
def test_mutual_request_after_the_other_side_won(winner, loser):
    table = triangle(iphys=2)
    expect_ok(table, winner, loser, 1, dst_iphy=1)
    expect_fail(table, loser, winner, 2, FailReason.MUTUAL_ALREADY_WON)
    # the loser's iPHY 1 is the one in the link: still "the mutual request won"
    expect_fail(table, loser, winner, 1, FailReason.MUTUAL_ALREADY_WON)
    assert len(table.links()) == 1


@pytest.mark.unit
def test_destination_has_no_free_iphy():
    table = InterNodeLinks({"a": [1, 2], "b": [1, 2], "c": [1]},
                      [("a", "b"), ("a", "c"), ("b", "c")])
    expect_ok(table, "b", "c", 1, dst_iphy=1)
    expect_fail(table, "a", "c", 1, FailReason.NO_FREE_IPHY)
    table.remove_link("c", "b")
    expect_ok(table, "a", "c", 1, dst_iphy=1)


@pytest.mark.unit
def test_fail_reasons_are_the_wire_strings():
    assert {r.value for r in FailReason} == {
        "unknown_node", "same_node", "not_visible", "src_iphy_unknown", "src_iphy_busy",
        "link_exists", "mutual_already_won", "no_free_iphy"}
    assert {r.value for r in FailReason} >= agent_sim.PEER_REASONS


# -- concurrency ----------------------------------------------------------------------


@pytest.mark.unit
def test_simultaneous_mutual_requests_make_exactly_one_link():
    """A->B and B->A released together, many rounds: one LINK_OK, one mutual_already_won."""
    table = InterNodeLinks({"a": [1, 2], "b": [1, 2]}, [("a", "b")])
    rounds = 300
    barrier = threading.Barrier(3)  # the two requesters and this thread
    answers: dict[str, list] = {"a": [], "b": []}

    def requester(src: str, dst: str) -> None:
        try:
            for _ in range(rounds):
                barrier.wait()  # go
                answers[src].append(table.request(src, dst, 1))
                barrier.wait()  # answered
                barrier.wait()  # checked and reset
        except threading.BrokenBarrierError:
            pass

    threads = [threading.Thread(target=requester, args=("a", "b")),
               threading.Thread(target=requester, args=("b", "a"))]
    for t in threads:
        t.start()
    winners = {"a": 0, "b": 0}
    try:
        for r in range(rounds):
            barrier.wait()
            barrier.wait()
            both = [answers["a"][r], answers["b"][r]]
            oks = [x for x in both if isinstance(x, LinkOk)]
            fails = [x for x in both if isinstance(x, LinkFail)]
            assert len(oks) == 1 and len(fails) == 1, both
            assert fails[0].reason == FailReason.MUTUAL_ALREADY_WON
            assert table.links() == [oks[0].link]
            assert_sound(table)
            winners[oks[0].link.src] += 1
            table.remove_link("a", "b")
            barrier.wait()
    finally:
        barrier.abort()
        for t in threads:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert winners["a"] + winners["b"] == rounds


@pytest.mark.unit
def test_many_threads_racing_for_the_last_free_iphy():
    sources = [f"s{i}" for i in range(8)]
    inventory = {s: [1] for s in sources} | {"hub": [1]}
    table = InterNodeLinks(inventory, [(s, "hub") for s in sources])
    for _ in range(50):
        barrier = threading.Barrier(len(sources))
        results: list = []
        lock = threading.Lock()

        def go(src: str, barrier=barrier, results=results, lock=lock) -> None:
            barrier.wait()
            answer = table.request(src, "hub", 1)
            with lock:
                results.append(answer)

        threads = [threading.Thread(target=go, args=(s,)) for s in sources]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        oks = [r for r in results if isinstance(r, LinkOk)]
        assert len(results) == len(sources) and len(oks) == 1
        assert {r.reason for r in results if isinstance(r, LinkFail)} == {
            FailReason.NO_FREE_IPHY}
        assert_sound(table)
        table.remove_node_links("hub")


# -- visibility changes and removals --------------------------------------------------


@pytest.mark.unit
def test_set_visibility_returns_exactly_the_lost_links_and_frees_their_iphys():
    table = InterNodeLinks({n: [1, 2] for n in ("a", "b", "c", "d")},
                      [("a", "b"), ("a", "c"), ("b", "c"), ("c", "d")])
    ab = expect_ok(table, "a", "b", 1, dst_iphy=1)
    ca = expect_ok(table, "c", "a", 1, dst_iphy=2)
    bc = expect_ok(table, "b", "c", 2, dst_iphy=2)
    expect_fail(table, "d", "c", 1, FailReason.NO_FREE_IPHY)

    lost = table.set_visibility([("b", "a"), ("d", "c")])  # either order of a pair
    assert lost == sorted([ca, bc], key=lambda lk: lk.pair)
    assert table.links() == [ab]
    assert table.visible == {pair("a", "b"), pair("c", "d")}
    assert table.free_iphys("a") == [2]
    assert table.free_iphys("b") == [2]
    assert table.free_iphys("c") == [1, 2]
    assert_sound(table)

    expect_ok(table, "d", "c", 1, dst_iphy=1)
    expect_fail(table, "a", "c", 2, FailReason.NOT_VISIBLE)
    assert table.set_visibility([("a", "b"), ("c", "d"), ("a", "c")]) == []
    expect_ok(table, "a", "c", 2, dst_iphy=2)
    assert_sound(table)


@pytest.mark.unit
def test_set_visibility_ignores_unknown_nodes_and_self_pairs():
    table = InterNodeLinks({"a": [1], "b": [1]})
    assert table.visible == frozenset()
    table.set_visibility([("a", "x"), ("a", "a"), ("b", "a")])
    assert table.visible == {("a", "b")}
    assert table.visible_peers("a") == ["b"]
    assert table.visible_peers("x") == []


@pytest.mark.unit
def test_set_visibility_to_nothing_drops_every_link():
    table = triangle(iphys=2)
    expect_ok(table, "a", "b", 1, dst_iphy=1)
    expect_ok(table, "a", "c", 2, dst_iphy=1)
    lost = table.set_visibility([])
    assert len(lost) == 2 and table.links() == []
    assert all(table.free_iphys(n) == [1, 2] for n in "abc")
    assert_sound(table)


@pytest.mark.unit
def test_remove_link_and_remove_node_links():
    table = triangle(iphys=2)
    ab = expect_ok(table, "a", "b", 1, dst_iphy=1)
    ac = expect_ok(table, "a", "c", 2, dst_iphy=1)
    bc = expect_ok(table, "b", "c", 2, dst_iphy=2)
    assert table.remove_link("c", "b") == bc
    assert table.remove_link("b", "c") is None
    assert table.remove_link("a", "zz") is None
    assert table.free_iphys("b") == [2] and table.free_iphys("c") == [2]
    assert_sound(table)
    assert table.links_of("a") == [ab, ac]
    assert table.remove_node_links("a") == [ab, ac]
    assert table.links() == [] and table.remove_node_links("a") == []
    assert all(table.free_iphys(n) == [1, 2] for n in "abc")
    assert_sound(table)
    expect_ok(table, "b", "a", 1, dst_iphy=1)


@pytest.mark.unit
def test_violations_reports_a_corrupted_table():
    """The checker itself can fail: corrupt the private bookkeeping on purpose."""
    table = triangle(iphys=2)
    link = expect_ok(table, "a", "b", 1, dst_iphy=1)
    table._visible = frozenset()  # as if visibility changed without set_visibility
    assert any("do not see each other" in v for v in table.violations())
    table._visible = frozenset({pair("a", "b"), pair("a", "c"), pair("b", "c")})
    del table._busy[("b", 1)]
    assert any("not marked busy" in v for v in table.violations())
    table._busy[("b", 1)] = link
    assert table.violations() == []
    rogue = Link(src="c", src_iphy=1, dst="a", dst_iphy=1)
    table._links[rogue.pair] = rogue
    table._busy[("c", 1)] = rogue
    assert any("in two links" in v for v in table.violations())


# -- the property: random operations never break the invariants -----------------------

NODES = ("a", "b", "c", "d", "e")
PAIRS = [pair(x, y) for i, x in enumerate(NODES) for y in NODES[i + 1:]]
node_names = st.sampled_from((*NODES, "ghost"))
operations = st.lists(st.one_of(
    st.tuples(st.just("request"), node_names, node_names, st.integers(0, 4)),
    st.tuples(st.just("visibility"), st.sets(st.sampled_from(PAIRS))),
    st.tuples(st.just("remove_link"), node_names, node_names),
    st.tuples(st.just("remove_node_links"), node_names),
), max_size=60)


def expected_reason(table: InterNodeLinks, src: str, dst: str, iphy: int) -> FailReason | None:
    """Algorithm 1 restated from the thesis, on the public view of the table."""
    if src not in table.nodes or dst not in table.nodes:
        return FailReason.UNKNOWN_NODE
    if src == dst:
        return FailReason.SAME_NODE
    if pair(src, dst) not in table.visible:
        return FailReason.NOT_VISIBLE
    free_src = table.free_iphys(src)
    used_src = {lk.iphy_of(src) for lk in table.links_of(src)}
    if iphy not in set(free_src) | used_src:
        return FailReason.SRC_IPHY_UNKNOWN
    existing = table.link_between(src, dst)
    if existing is not None:
        return (FailReason.MUTUAL_ALREADY_WON if existing.src == dst
                else FailReason.LINK_EXISTS)
    if iphy in used_src:
        return FailReason.SRC_IPHY_BUSY
    if not table.free_iphys(dst):
        return FailReason.NO_FREE_IPHY
    return None


@pytest.mark.unit
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(iphys=st.lists(st.integers(1, 3), min_size=len(NODES), max_size=len(NODES)),
       initial=st.sets(st.sampled_from(PAIRS)), ops=operations)
def test_random_operations_keep_the_invariants(iphys, initial, ops):
    table = InterNodeLinks({n: range(1, k + 1) for n, k in zip(NODES, iphys, strict=True)}, initial)
    assert_sound(table)
    for op in ops:
        kind = op[0]
        if kind == "request":
            _, src, dst, iphy = op
            want = expected_reason(table, src, dst, iphy)
            dst_lowest = table.free_iphys(dst)[:1] if dst in table.nodes else []
            before = snapshot(table)
            answer = table.request(src, dst, iphy)
            if want is None:
                assert isinstance(answer, LinkOk), answer
                assert answer.link == Link(src, iphy, dst, dst_lowest[0])
            else:
                assert isinstance(answer, LinkFail) and answer.reason == want, (answer, want)
                assert snapshot(table) == before
        elif kind == "visibility":
            new = op[1]
            old_links = table.links()
            lost = table.set_visibility(new)
            assert lost == [lk for lk in old_links if lk.pair not in new]
            assert table.links() == [lk for lk in old_links if lk.pair in new]
        elif kind == "remove_link":
            _, a, b = op
            had = table.link_between(a, b)
            assert table.remove_link(a, b) == had
            assert table.link_between(a, b) is None
        else:
            node = op[1]
            had = table.links_of(node)
            assert table.remove_node_links(node) == had
            assert table.links_of(node) == []
        assert_sound(table)


# -- requests_to_send -----------------------------------------------------------------


@pytest.mark.unit
def test_requests_pair_highest_free_iphys_with_peers_in_name_order():
    assert requests_to_send([3, 1, 2], ["n9", "n10", "n2"], []) == [("n10", 3), ("n2", 2)]
    assert requests_to_send([2], ["c", "b", "a"], []) == [("a", 2)]
    assert requests_to_send([1, 2, 3, 4], ["x"], []) == [("x", 4)]


@pytest.mark.unit
def test_requests_keep_one_free_iphy_spare_while_asking():
    peers = ["a", "b", "c", "d", "e"]
    assert requests_to_send([1, 2, 3, 4], peers, []) == [("a", 4), ("b", 3), ("c", 2)]
    # the last free iPHY is asked from only when nothing else is in flight
    assert requests_to_send([1], peers, []) == [("a", 1)]
    assert requests_to_send([1], peers, [], pending_peers=["e"]) == []
    assert requests_to_send([1, 2], peers, [], pending_peers=iter(["e"])) == [("a", 2)]
    assert [spare_limit(n, asking) for n in range(4) for asking in (False, True)] == [
        0, 0, 1, 0, 1, 1, 2, 2]


@pytest.mark.unit
def test_requests_skip_linked_failed_and_pending_peers():
    peers = ["a", "b", "c", "d", "e"]
    assert requests_to_send([1, 2, 3], peers, linked_peers=["a"], failed_peers=["b"],
                            pending_peers=["d"]) == [("c", 3), ("e", 2)]
    assert requests_to_send([1], peers, peers) == []
    assert requests_to_send([], peers, []) == []
    assert requests_to_send([1, 2], [], []) == []
    assert requests_to_send([1, 2, 3], ["a", "a", "b"], []) == [("a", 3), ("b", 2)]


@pytest.mark.unit
def test_destination_iphy_avoids_the_destinations_undecided_requests():
    """dst_claims only picks which free iPHY of dst the link takes, never whether."""
    table = InterNodeLinks({"a": [1, 2, 3], "b": [1, 2], "c": [1]}, [("a", "b"), ("a", "c")])
    # b is asking a from iPHY 2 in the same batch: the link takes that one
    assert table.request("a", "b", 3, {2: "a", 1: "c"}).link.dst_iphy == 2
    table.set_visibility([])
    table.set_visibility([("a", "b"), ("a", "c")])
    # a's request towards c names iPHY 1: b's link to a takes a's next free one
    assert table.request("b", "a", 1, {1: "c"}).link.dst_iphy == 2
    # every free iPHY claimed: the lowest free one, as without claims
    assert table.request("c", "a", 1, {1: "x", 3: "y"}).link.dst_iphy == 1
    assert isinstance(table.request("a", "b", 3, {}), LinkFail)


# -- settling steps with the agent stand-in -------------------------------------------


def example_and_generated_scenarios() -> list[tuple[str, Scenario]]:
    found = [(name, load_scenario(SCENARIOS / name, nestednet_iphys=2)) for name in EXAMPLE_FILES]
    for model in mobility.MODELS:
        for seed in (1, 2):
            s = mobility.generate(nodes=9, duration=30, step=5, range_=60, model=model,
                                  seed=seed, iphys=2)
            found.append((s.name, s))
    return found


@pytest.mark.unit
@pytest.mark.parametrize(("label", "scenario"), example_and_generated_scenarios(),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_settled_steps_leave_no_feasible_pair_unlinked(label, scenario):
    table, events, violations = agent_sim.run(scenario)
    assert violations == [[] for _ in scenario.steps]
    assert table.unlinked_feasible_pairs() == []
    assert_sound(table)
    steps = [e for e in events if e.event == ev.STEP]
    assert len(steps) == len(scenario.steps)
    final = ev.links_before(events, None)
    assert set(final) == {lk.pair for lk in table.links()}


@pytest.mark.unit
def test_unlinked_feasible_pairs_before_and_after_settling():
    """The settled check can fail: before the agents ask, visible pairs are feasible."""
    table = triangle(iphys=1)
    assert table.unlinked_feasible_pairs() == [("a", "b"), ("a", "c"), ("b", "c")]
    expect_ok(table, "a", "b", 1, dst_iphy=1)
    assert table.unlinked_feasible_pairs() == []  # c's peers have no free iPHY


@pytest.mark.unit
def test_small_4x2_does_what_its_description_says():
    scenario = load_scenario(SCENARIOS / "small-4x2.json")
    table = InterNodeLinks(scenario.iphy_inventory())
    per_step = []
    for i, step in enumerate(scenario.steps):
        lost = table.set_visibility(step.visible)
        agent_sim.settle(table, step.time, i, [])
        assert_sound(table)
        assert table.unlinked_feasible_pairs() == []
        per_step.append(({lk.pair for lk in lost}, {lk.pair for lk in table.links()}))
    # step 0: a chain, every pair links
    assert per_step[0][1] == {("n1", "n2"), ("n2", "n3"), ("n3", "n4")}
    # step 1: n2-n3 lost; of n1-n4 and n2-n4 exactly one links (n4 has one free iPHY)
    lost1, links1 = per_step[1]
    assert lost1 == {("n2", "n3")}
    assert {("n1", "n2"), ("n3", "n4")} <= links1
    assert len(links1 & {("n1", "n4"), ("n2", "n4")}) == 1
    # step 2: only n1-n3 and n2-n4 are visible, and both link
    assert per_step[2][1] == {("n1", "n3"), ("n2", "n4")}


@pytest.mark.unit
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_settling_random_timelines(data):
    names = [f"n{i}" for i in range(1, data.draw(st.integers(2, 7)) + 1)]
    all_pairs = [pair(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    nodes = tuple(NodeSpec(n, i + 1, data.draw(st.integers(1, 3), label=f"iphys {n}"))
                  for i, n in enumerate(names))
    visible = data.draw(st.lists(st.frozensets(st.sampled_from(all_pairs)), min_size=1,
                                 max_size=5))
    steps = tuple(Step(time=float(k), visible=v) for k, v in enumerate(visible))
    scenario = Scenario(nodes=nodes, duration=float(len(steps)), steps=steps)
    table, _, violations = agent_sim.run(scenario)
    assert violations == [[] for _ in steps]
    assert independent_invariant_breaches(table) == []


@pytest.mark.unit
def test_a_resumed_run_adopts_the_links_it_finds_and_refuses_an_impossible_set():
    from nestednet.model.link_table import Link

    table = InterNodeLinks({"a": [1, 2], "b": [1], "c": [1]}, [("a", "c")])
    found = [Link("a", 1, "b", 1), Link("c", 1, "a", 2)]
    assert table.adopt(found) == []
    assert [(lk.src, lk.dst) for lk in table.links()] == [("a", "b"), ("c", "a")]
    assert table.free_iphys("a") == [] and table.violations() == []
    assert table.visible == {("a", "b"), ("a", "c")}
    assert [lk.pair for lk in table.set_visibility([("a", "c")])] == [("a", "b")]
    assert table.free_iphys("b") == [1]

    fresh = InterNodeLinks({"a": [1, 2], "b": [1], "c": [1]})
    refused = fresh.adopt([Link("a", 1, "b", 1), Link("a", 1, "c", 1)])
    assert any("iPHY 1 in two links" in r or "not marked busy" in r for r in refused)
    assert fresh.links() == [] and fresh.visible == frozenset()
    assert fresh.adopt([Link("a", 3, "b", 1)]) != []
    assert table.adopt([]) == ["the table already holds links"]
