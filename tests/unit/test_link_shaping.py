"""The pure half of shaping a lab's links: filterless port trees, in-place changes and the
full/rate-only policy (what a kernel without sch_netem may do)."""

from __future__ import annotations

import dataclasses

import pytest

from nestednet.errors import UsageError
from nestednet.model import tcplan
from nestednet.model.link_properties import LinkProperties
from nestednet.model.shaping_policy import FULL, RATE_ONLY, ShapingPolicy
from nestednet.model.tcplan import LinkShape

pytestmark = pytest.mark.unit


def test_port_tree_has_no_filters_and_defaults_to_the_leaf():
    ops = tcplan.port_tree_ops("p", "a->b", LinkShape(20_000_000, 5000, 1000, 0.5))
    assert [op.kind for op in ops] == ["htb", "htb", "htb", "netem"]
    assert not [op for op in ops if op.command == "add-filter"]
    root, _ceiling, leaf, netem = ops
    assert root.params["default"] == tcplan.FIRST_LEAF
    assert leaf.handle == tcplan.leaf_class(0) and leaf.params["rate"] == 20_000_000 // 8
    assert netem.params == {"parent": leaf.handle, "delay": 5000, "jitter": 1000, "loss": 0.5,
                            "limit": 1000}


def test_port_tree_rate_only_has_no_netem_and_refuses_delay():
    ops = tcplan.port_tree_ops("p", "a->b", LinkShape(5_000_000), netem=False)
    assert [op.kind for op in ops] == ["htb"] * 3
    with pytest.raises(ValueError, match="netem"):
        tcplan.port_tree_ops("p", "a->b", LinkShape(5_000_000, 1000), netem=False)


def test_netem_limit_follows_the_bandwidth_delay_product():
    shape = LinkShape(1_000_000_000, 50_000)
    netem = tcplan.port_tree_ops("p", "x", shape)[-1]
    assert netem.params["limit"] == tcplan.netem_limit(shape) > 1000


def test_leaf_change_touches_only_what_changed():
    old = LinkShape(20_000_000, 5000)
    assert tcplan.leaf_change_ops("p", "htb", 0, "x", old, old) == []
    rate = tcplan.leaf_change_ops("p", "htb", 0, "x", old, old.with_changes(rate_bps=5_000_000))
    assert [(op.command, op.handle) for op in rate] == [("change-class", "1:10")]
    delay = tcplan.leaf_change_ops("p", "htb", 0, "x", old, old.with_changes(delay_us=9000))
    assert [(op.command, op.kind, op.handle) for op in delay] == [("change", "netem", "10:0")]
    assert delay[0].params["limit"] == 1000  # the full set: pyroute2's change resets the rest


def test_full_policy_without_netem_names_the_missing_module():
    policy = ShapingPolicy.choose(FULL, netem_available=False)
    policy.check(LinkProperties(rate_bps=1_000_000), "x")  # rate alone: HTB does it
    with pytest.raises(UsageError, match="delay, loss need sch_netem") as caught:
        policy.check(LinkProperties(delay_us=1000, loss_pct=1.0), "steps[2] a->b")
    assert "steps[2] a->b" in str(caught.value) and "rate-only" in caught.value.hint
    assert caught.value.exit_code == 2


def test_rate_only_policy_drops_netem_properties_and_says_so():
    policy = ShapingPolicy.choose(RATE_ONLY, netem_available=True)
    props = LinkProperties(rate_bps=2_000_000, delay_us=3000, loss_pct=1.0)
    policy.check(props, "x")
    assert policy.shape(props) == LinkShape(2_000_000)
    assert policy.dropped(props) == ("delay", "loss")


def test_full_policy_keeps_everything_and_unlimited_rate_is_the_line_rate():
    policy = ShapingPolicy.choose(FULL, netem_available=True)
    props = LinkProperties(delay_us=3000, jitter_us=100)
    assert policy.shape(props) == LinkShape(tcplan.LINE_RATE_BPS, 3000, 100, 0.0)
    assert policy.dropped(props) == ()


def test_unknown_mode_is_a_usage_error():
    with pytest.raises(UsageError):
        ShapingPolicy.choose("fast", True)


def _run_shaping(tmp_path, doc: dict, netem: bool, mode: str = FULL):
    from nestednet.ca.link_shaping import RunShaping
    from nestednet.lab.record import LabRecord
    from nestednet.lab.shaping import LabShaper
    from nestednet.model import topology as topo
    from nestednet.model.link_resolver import LinkResolver
    from nestednet.model.scenario_file import parse_scenario

    record = LabRecord("u", tmp_path)
    record.claim()
    shaper = LabShaper(record, ShapingPolicy.choose(mode, netem))
    return RunShaping(LinkResolver(parse_scenario(doc, "inline")), shaper,
                      lambda node, iphy: topo.Endpoint(int(node[1:]), 1), "u")


SCENARIO = {"format": "nestednet-scenario/1", "duration": 4, "iphys": 1,
            "nodes": [{"name": "n1"}, {"name": "n2"}, {"name": "n3"}],
            "steps": [{"time": 0, "visible": [["n1", "n2"]],
                       "links": [{"between": ["n1", "n2"], "rate": "5Mbit"}]},
                      {"time": 2, "visible": [["n1", "n2"], ["n2", "n3"]],
                       "links": [{"from": "n2", "to": "n3", "delay": "4ms"}]}]}


def test_run_check_names_the_step_and_direction_needing_netem(tmp_path):
    shaping = _run_shaping(tmp_path, SCENARIO, netem=False)
    with pytest.raises(UsageError, match=r"steps\[1\] n2->n3: delay needs sch_netem"):
        shaping.check()


def test_run_check_in_rate_only_mode_reports_what_it_leaves_out(tmp_path):
    shaping = _run_shaping(tmp_path, SCENARIO, netem=False, mode=RATE_ONLY)
    assert shaping.check() == {"mode": RATE_ONLY, "netem": False, "shaper": "htb",
                               "keep_order": False, "dropped": ["delay"]}


def test_pairs_a_model_cannot_link_are_not_linkable(tmp_path):
    doc = {"format": "nestednet-scenario/1", "duration": 1, "iphys": 1, "length_unit": "km",
           "link_model": {"model": "laser", "params": {"rate": "1Gbit", "range_m": 5e6}},
           "nodes": [{"name": "n1"}, {"name": "n2"}, {"name": "n3"}],
           "steps": [{"time": 0, "positions": {"n1": [0, 0], "n2": [3000, 0], "n3": [0, 9000]},
                      "visible": [["n1", "n2"], ["n1", "n3"]]}]}
    shaping = _run_shaping(tmp_path, doc, netem=True)
    assert shaping.linkable(0, [("n1", "n2"), ("n1", "n3")]) == [("n1", "n2")]


def test_keep_order_paces_netem_at_the_link_rate():
    policy = ShapingPolicy.choose(FULL, True, keep_order=True)
    netem = tcplan.port_tree_ops("p", "x", policy.shape(LinkProperties(20_000_000, 10_000,
                                                                       5_000)))[-1]
    assert netem.params["rate"] == 20_000_000 // 8 and netem.params["jitter"] == 5_000
    plain = tcplan.netem_params(LinkShape(20_000_000, 10_000, 5_000))
    assert "rate" not in plain


def test_batched_change_requests_decode_back_to_the_plan():
    """change_batch's own encoding (one netlink write for a step): what pyroute2 reads
    back from the bytes is the class rate and the netem set of the plan."""
    from pyroute2.netlink.rtnl import RTM_NEWQDISC, RTM_NEWTCLASS
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    from nestednet.adapters import tc

    old, new = LinkShape(20_000_000, 5000), LinkShape(5_000_000, 9000, 1000, 2.0, True)
    ops = tcplan.leaf_change_ops("p", "htb", 0, "x", old, new)
    decoded = []
    for seq, op in enumerate(ops, 1):
        msg = tcmsg(tc._encoded(op, 7, seq))
        msg.decode()
        decoded.append(msg)
    cls, netem = decoded
    assert cls["header"]["type"] == RTM_NEWTCLASS and cls["index"] == 7
    assert cls["handle"] == 0x10010 and cls["parent"] == 0x10001
    parms = cls.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")
    assert parms["rate"] == 5_000_000 // 8
    assert netem["header"]["type"] == RTM_NEWQDISC and netem["handle"] == 0x100000
    assert netem.get_attr("TCA_KIND") == "netem"


@pytest.mark.parametrize("rate_bps", [8_000, 20_000_000, 10_000_000_000, 40_000_000_000])
def test_packed_htb_class_change_matches_pyroute2_without_rate_tables(rate_bps):
    """The packed HTB class change carries pyroute2's parameters (rate, ceil, burst
    times, quantum; RATE64/CEIL64 above 2^32 bytes/s) but no RTAB/CTAB: its rate specs
    say Ethernet, so the kernel computes transmit times itself."""
    from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
    from pyroute2.netlink.rtnl.tcmsg import plugins, tcmsg

    from nestednet.adapters import tc

    (op,) = tcplan.leaf_change_ops("p", "htb", 0, "x", LinkShape(1_000), LinkShape(rate_bps),
                                   netem=False)
    packed = tcmsg(tc._encoded(op, 7, 3))
    packed.decode()
    params = {**op.params, "parent": tc.handle_int(op.params["parent"])}
    reference = tcmsg()
    reference["attrs"] = [["TCA_KIND", "htb"],
                          ["TCA_OPTIONS", plugins["htb"].get_class_parameters(params)]]
    reference.encode()
    reference = tcmsg(reference.data)
    reference.decode()
    assert packed["header"]["flags"] == NLM_F_REQUEST | NLM_F_ACK
    assert packed["header"]["sequence_number"] == 3 and packed["index"] == 7
    assert (packed["handle"], packed["parent"]) == (0x10010, 0x10001)
    ours, theirs = (m.get_attr("TCA_OPTIONS") for m in (packed, reference))
    assert [a[0] for a in ours["attrs"]] == [a[0] for a in theirs["attrs"]
                                             if a[0] not in ("TCA_HTB_RTAB", "TCA_HTB_CTAB")]
    for name in ("TCA_HTB_RATE64", "TCA_HTB_CEIL64"):
        assert ours.get_attr(name) == theirs.get_attr(name)
    table_fields = {f"{spec}_{field}" for spec in ("rate", "ceil")
                    for field in ("cell_log", "cell_align", "__reserved")}
    ours, theirs = (o.get_attr("TCA_HTB_PARMS") for o in (ours, theirs))
    assert {k: ours[k] for k, _ in ours.fields if k not in table_fields} == \
        {k: theirs[k] for k, _ in theirs.fields if k not in table_fields}
    assert ours["rate___reserved"] == ours["ceil___reserved"] == tc.TC_LINKLAYER_ETHERNET
    assert ours["rate"] == min(rate_bps // 8, 2**32 - 1)


class RecordingKernel:
    """Stands in for the tc adapter: records what the shaper asks of the kernel."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def disable_offloads(self, _space, ports):
        self.calls.append(("offloads", list(ports)))

    def build(self, ops, _space, ports, _recorded, _owner):
        self.calls.append(("build", sorted(ports)))
        return {port: n for n, port in enumerate(ports, 1)}

    def port_indexes(self, _space, ports):
        return {port: n for n, port in enumerate(ports, 1)}

    def change_batch(self, ops, _space, _index):
        self.calls.append(("change", sorted({op.port for op in ops})))


@pytest.mark.unit
@pytest.mark.parametrize(("mode", "moved", "written"), [
    (RATE_ONLY, {"loss_pct": 2e-9}, False),   # the soak's case: loss moves, rate-only drops it
    (RATE_ONLY, {"delay_us": 900}, False),
    (RATE_ONLY, {"rate_bps": 4_000_000}, True),
    (FULL, {"loss_pct": 0.5}, True),
    (FULL, {"delay_us": 900}, True),
])
def test_change_writes_only_when_the_shape_the_kernel_holds_differs(tmp_path, mode, moved,
                                                                     written):
    """A soak at 48 x 4 (rate-only) rewrote every link's tree and wrote a link_update for
    it at each step, because the link model's loss moved by 1e-9 %, which rate-only never
    installs."""
    from nestednet.lab.record import LabRecord
    from nestednet.lab.shaping import Direction, LabShaper

    record = LabRecord("u", tmp_path)
    record.claim()
    kernel = RecordingKernel()
    shaper = LabShaper(record, ShapingPolicy.choose(mode, netem_available=True),
                       tc_for=lambda _netns: kernel)
    before = LinkProperties(rate_bps=5_000_000, delay_us=400, loss_pct=1e-9)
    shaper.up([Direction("n1:iphy1->n2:iphy1", "u-2x1", before)])
    kernel.calls.clear()
    after = dataclasses.replace(before, **moved)
    changed = shaper.change([Direction("n1:iphy1->n2:iphy1", "u-2x1", after)])
    assert (changed != []) == written
    assert kernel.calls == ([("change", ["u-2x1"])] if written else [])
