"""The tc plan (pure): handles, parameters, BDP-sized netem limits, u32 keys, dry-run output."""

from __future__ import annotations

import json
from ipaddress import IPv4Address

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from linkemu import linksfile, router_plan, shaping
from linkemu.cli import main
from linkemu.model import LinkShape
from nestednet.model import tcplan

THESIS = "scenarios/links/thesis-example.json"


@pytest.fixture
def table():
    return linksfile.load(THESIS)


def ops_by(plan, port, command, kind=None):
    return [op for op in plan.for_port(port)
            if op.command == command and (kind is None or op.kind == kind)]


@pytest.mark.unit
@pytest.mark.parametrize("shaper", ["hfsc", "htb"])
def test_tree_shape_per_port(table, shaper):
    plan = table.tc_plan(shaper)
    assert plan.ports == ("le-srv", "le-cli")
    for port in plan.ports:
        ops = plan.for_port(port)
        assert (ops[0].command, ops[0].kind, ops[0].handle) == ("add", shaper, "1:0")
        assert ops[0].params["default"] == 0xFFFF
        classes = [op.handle for op in ops_by(plan, port, "add-class")]
        assert classes == ["1:1", "1:ffff", "1:10", "1:11", "1:12"]
        netems = ops_by(plan, port, "add", "netem")
        assert [(op.handle, op.params["parent"]) for op in netems] == [
            ("10:0", "1:10"), ("11:0", "1:11"), ("12:0", "1:12")]
        filters = ops_by(plan, port, "add-filter", "u32")
        assert [f.params["target"] for f in filters] == ["1:10", "1:11", "1:12"]
        assert all(f.params["protocol"] == 0x0800 for f in filters)
    assert plan.requires == (shaper, "u32", "netem")


@pytest.mark.unit
def test_hfsc_leaf_curves_are_bytes_per_second(table):
    plan = table.tc_plan("hfsc")
    c1 = next(op for op in ops_by(plan, "le-srv", "add-class") if op.handle == "1:10")
    assert c1.params["rsc"] == c1.params["fsc"] == c1.params["usc"] == {"m2": 46_000_000 // 8}
    default = next(op for op in ops_by(plan, "le-srv", "add-class") if op.handle == "1:ffff")
    assert "rsc" not in default.params and default.params["usc"]["m2"] == 10**10 // 8


@pytest.mark.unit
def test_htb_leaf_rate_and_ceil(table):
    plan = table.tc_plan("htb")
    c2back = next(op for op in ops_by(plan, "le-cli", "add-class") if op.handle == "1:11")
    assert c2back.params["rate"] == c2back.params["ceil"] == 10_000_000 // 8
    assert c2back.params["burst"] >= 2 * tcplan.MTU_BYTES


@pytest.mark.unit
def test_u32_keys_forward_and_backward(table):
    plan = table.tc_plan("hfsc")
    fwd = ops_by(plan, "le-srv", "add-filter")[0].params["keys"]
    back = ops_by(plan, "le-cli", "add-filter")[0].params["keys"]
    # 198.18.0.11 = 0xC612000B (client), 198.19.0.10 = 0xC613000A (server)
    assert fwd == ["0xC612000B/0xffffffff+12", "0xC613000A/0xffffffff+16"]
    assert back == ["0xC613000A/0xffffffff+12", "0xC612000B/0xffffffff+16"]


@pytest.mark.unit
def test_u32_key_of_platform_example():
    assert tcplan.u32_key(IPv4Address("198.18.0.1"), 12) == "0xC6120001/0xffffffff+12"


@pytest.mark.unit
def test_netem_params_full_set(table):
    plan = table.tc_plan("hfsc")
    netem = ops_by(plan, "le-cli", "add", "netem")[1]
    assert netem.params == {"parent": "1:11", "delay": 5000, "jitter": 0, "loss": 1.0,
                            "limit": 1000}


@pytest.mark.unit
@pytest.mark.parametrize(("rate", "delay_us", "limit"), [
    (1_000_000, 10_000, 1000),            # tiny BDP: netem's default stays
    (1_000_000_000, 50_000, 8257),        # 1 Gbit x 50 ms = 6.25 MB, x2 / 1514
    (10_000_000_000, 100_000, 165126),
])
def test_netem_limit_from_bdp(rate, delay_us, limit):
    assert tcplan.netem_limit(LinkShape(rate, delay_us)) == limit


@pytest.mark.unit
@given(st.integers(1, 34_000_000_000), st.integers(0, 2_000_000), st.integers(0, 1_000_000))
def test_netem_limit_covers_twice_the_bdp(rate, delay, jitter):
    limit = tcplan.netem_limit(LinkShape(rate, delay, jitter))
    assert limit >= 1000
    assert limit * tcplan.MTU_BYTES >= 2 * rate / 8 * (delay + jitter) / 1e6


@pytest.mark.unit
def test_rate_only_plan_refuses_links_needing_netem(table):
    with pytest.raises(ValueError):
        table.tc_plan("htb", netem=False)


@pytest.mark.unit
def test_change_ops_touch_only_what_changed(table):
    new = table.links[1].forward.with_changes(rate_bps=3_000_000)
    ops = table.change_ops("hfsc", 1, "forward", new)
    assert [(op.port, op.command, op.handle) for op in ops] == [("le-srv", "change-class",
                                                                 "1:11")]
    new = new.with_changes(delay_us=40_000)
    ops = table.change_ops("htb", 1, "forward", new)
    assert [(op.command, op.handle) for op in ops] == [("change-class", "1:11"),
                                                       ("change", "11:0")]
    netem = ops[1].params
    assert set(netem) == {"parent", "delay", "jitter", "loss", "limit"}


@pytest.mark.unit
def test_missing_modules():
    table = linksfile.load(THESIS)
    host = {"netem": False, "hfsc": False, "htb": True, "tbf": True}
    assert shaping.missing_modules("hfsc", table, host) == ["sch_hfsc", "sch_netem"]
    assert shaping.missing_modules("htb", table, host) == ["sch_netem"]


@pytest.mark.unit
def test_rate_only_links_use_htb_without_netem(tmp_path):
    doc = linksfile.to_native(linksfile.load(THESIS))
    for link in doc["links"]:
        for d in ("forward", "backward"):
            link[d] = {"rate": link[d]["rate"]}
    table = linksfile.parse(doc)
    host = {"netem": False, "hfsc": False, "htb": True, "tbf": True}
    plan = shaping.tc_part(table, "htb", host)
    assert "netem" not in plan.requires and not [op for op in plan.ops if op.kind == "netem"]
    from nestednet.errors import EnvironmentProblem

    with pytest.raises(EnvironmentProblem, match="sch_hfsc"):
        shaping.tc_part(table, "hfsc", host)


@pytest.mark.unit
def test_dry_run_prints_the_plan():
    result = CliRunner().invoke(main, ["apply", THESIS, "--dry-run", "--shaper", "hfsc"])
    assert result.exit_code == 0, result.output
    assert "hfsc" in result.output and "0xC612000B/0xffffffff+12" in result.output
    assert "netem" in result.output and "limit=1000" in result.output


@pytest.mark.unit
def test_dry_run_json_is_the_plan(table):
    result = CliRunner().invoke(main, ["apply", THESIS, "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["router"] == router_plan.plan(table).as_dict()
    assert data["router"]["addresses"], "an OVS emulator is routed: the plan has addresses"
    assert data["tc"] == table.tc_plan(shaping.DEFAULT_SHAPER).as_dict()
    assert data["links"] == linksfile.to_native(table)
