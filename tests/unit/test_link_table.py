from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nestednet.model.link_table import FailReason, LinkFail, LinkOk, LinkTable, requests_to_send

NODES = ["a", "b", "c", "d"]


def table(iphys: int = 2, visible=(("a", "b"), ("a", "c"), ("b", "c"), ("c", "d"))):
    return LinkTable({n: range(1, iphys + 1) for n in NODES}, visible)


@pytest.mark.unit
def test_ok_then_link_exists_and_mutual():
    t = table()
    ok = t.request("a", "b", 1)
    assert isinstance(ok, LinkOk) and ok.link.dst_iphy == 1
    again = t.request("a", "b", 2)
    assert isinstance(again, LinkFail) and again.reason is FailReason.LINK_EXISTS
    mutual = t.request("b", "a", 2)
    assert isinstance(mutual, LinkFail) and mutual.reason is FailReason.MUTUAL_ALREADY_WON
    assert len(t.links()) == 1 and not t.violations()


@pytest.mark.unit
@pytest.mark.parametrize("first", [("a", "b"), ("b", "a")])
def test_simultaneous_mutual_requests_make_one_link(first):
    t = table()
    src, dst = first
    assert isinstance(t.request(src, dst, 1), LinkOk)
    assert t.request(dst, src, 1).reason is FailReason.MUTUAL_ALREADY_WON
    assert [lk.pair for lk in t.links()] == [("a", "b")]


@pytest.mark.unit
def test_fail_branches():
    t = table(iphys=1)
    assert t.request("a", "zz", 1).reason is FailReason.UNKNOWN_NODE
    assert t.request("a", "a", 1).reason is FailReason.SAME_NODE
    assert t.request("a", "d", 1).reason is FailReason.NOT_VISIBLE
    assert t.request("a", "b", 9).reason is FailReason.SRC_IPHY_UNKNOWN
    assert isinstance(t.request("a", "b", 1), LinkOk)
    assert t.request("a", "c", 1).reason is FailReason.SRC_IPHY_BUSY
    assert t.request("c", "b", 1).reason is FailReason.NO_FREE_IPHY
    assert not t.violations()


@pytest.mark.unit
def test_visibility_loss_removes_links_and_frees_iphys():
    t = table()
    t.request("a", "b", 1)
    t.request("c", "d", 1)
    lost = t.set_visibility([("c", "d")])
    assert [lk.pair for lk in lost] == [("a", "b")]
    assert t.free_iphys("a") == [1, 2] and t.free_iphys("b") == [1, 2]
    assert [lk.pair for lk in t.links()] == [("c", "d")] and not t.violations()


@pytest.mark.unit
def test_requests_to_send_skips_linked_failed_pending():
    assert requests_to_send([2, 1], ["d", "c", "b", "e"], ["b"], ["c"], ["e"]) == [("d", 1)]
    assert requests_to_send([], ["b"], []) == []


ops = st.lists(st.one_of(
    st.tuples(st.just("req"), st.sampled_from([*NODES, "x"]), st.sampled_from(NODES),
              st.integers(0, 3)),
    st.tuples(st.just("vis"), st.sets(st.tuples(st.sampled_from(NODES), st.sampled_from(NODES)),
                                      max_size=6))), max_size=40)


@pytest.mark.unit
@settings(max_examples=150, deadline=None)
@given(ops)
def test_random_sequences_keep_invariants(sequence):
    t = table()
    for op in sequence:
        if op[0] == "req":
            t.request(op[1], op[2], op[3])
        else:
            t.set_visibility(op[1])
        assert t.violations() == []
