"""Pure parts of the evaluation harness and of flat labs: statistics, parsers, D,
report building, and the flat address/name plan."""

from __future__ import annotations

import json
from ipaddress import IPv4Interface
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from nestednet.bench import links, memory, paper, scaling, startup, stats, stress, suite
from nestednet.cli import main as nestednet_main
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.lab import design, designs, flat
from nestednet.model import link_rules
from nestednet.model import topology as topo
from nestednet.model.addressing import CA_PORT, AddressPlan

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data"


# --- statistics and D -------------------------------------------------------------


def test_degradation_is_the_papers_formula():
    assert stats.degradation(10.0, 2.8) == pytest.approx(0.72)
    assert stats.degradation(10.0, 10.0) == 0.0
    assert stats.degradation(10.0, 0.0) == 1.0
    assert stats.degradation(10.0, 12.0) == pytest.approx(-0.2)  # noise is not hidden
    with pytest.raises(ValueError):
        stats.degradation(0.0, 1.0)


@given(st.floats(0.001, 1e12), st.floats(0, 1e12))
def test_degradation_never_exceeds_one_for_nonnegative_t2(t1, t2):
    assert stats.degradation(t1, t2) <= 1.0


def test_summary_median_and_spread():
    s = stats.summary([5, 1, 3, 2, 4])
    assert (s["n"], s["median"], s["min"], s["max"]) == (5, 3, 1, 5)
    assert s["p25"] == 2 and s["p75"] == 4
    assert stats.summary([])["median"] is None
    assert stats.summary([7])["stdev"] == 0.0


def test_linear_fit_recovers_a_line():
    fit = stats.linear_fit([2, 4, 6], [5, 9, 13])
    assert fit["slope"] == pytest.approx(2.0)
    assert fit["intercept"] == pytest.approx(1.0)
    assert stats.linear_fit([3], [1])["slope"] is None


def test_window_mean_takes_only_whole_intervals_inside():
    series = [(0, 1, 10.0), (1, 2, 10.0), (2, 3, 2.0), (3, 4, 4.0), (4, 5, 10.0)]
    assert stats.window_mean(series, 2.0, 4.0) == pytest.approx(3.0)
    assert stats.window_mean(series, 1.5, 4.5) == pytest.approx(3.0)
    assert stats.window_mean(series, 7, 9) is None


def test_stress_analysis_computes_t1_t2_d():
    base = {"intervals": [(0, 1, 1e9), (1, 2, 10e9), (2, 3, 10e9), (3, 4, 3e9), (4, 5, 2e9),
                          (5, 6, 5e9), (6, 7, 10e9), (7, 8, 10e9)]}
    out = stress.analyse(base, stress_offset=3.0, stress_s=2.0)
    # unstressed: 1-3 before (first second skipped), 6-8 after (one recovery second skipped)
    assert out["t0_gbps"] == pytest.approx(10.0)
    assert out["t1_gbps"] == pytest.approx(10.0)
    assert out["t2_gbps"] == pytest.approx(2.5)
    assert out["t3_gbps"] == pytest.approx(10.0)
    assert out["D"] == pytest.approx(0.75)
    assert out["D_median"] == pytest.approx(0.75)
    assert out["stress_window_s"] == [3.0, 5.0]
    assert len(out["series"]) == 8


def test_stress_analysis_without_a_window_gives_no_d():
    out = stress.analyse({"intervals": [(0, 1, 1e9), (1, 2, 1e9)]}, stress_offset=5.0,
                         stress_s=2.0)
    assert out["D"] is None and out["t2_gbps"] is None


# --- parsers ----------------------------------------------------------------------------


def test_parse_iperf_real_output():
    parsed = stats.parse_iperf((DATA / "iperf3-loopback-2s.json").read_text())
    assert parsed["bps"] > 0
    assert parsed["start"] > 1.6e9
    assert len(parsed["intervals"]) >= 2
    assert all(e > s for s, e, _ in parsed["intervals"])
    assert parsed["retransmits"] == json.loads(
        (DATA / "iperf3-loopback-2s.json").read_text())["end"]["sum_sent"]["retransmits"]


def test_parse_iperf_error_and_garbage():
    with pytest.raises(EnvironmentProblem, match="refused"):
        stats.parse_iperf(json.dumps({"start": {}, "intervals": [], "end": {},
                                      "error": "unable to connect: Connection refused"}))
    with pytest.raises(EnvironmentProblem, match="no JSON"):
        stats.parse_iperf("iperf3: error")


def test_parse_ping_with_and_without_replies():
    ok = stats.parse_ping((DATA / "ping.txt").read_text())
    assert (ok["sent"], ok["received"]) == (3, 3)
    assert ok["avg_ms"] == pytest.approx(0.038)
    lost = stats.parse_ping("--- 192.168.2.9 ping statistics ---\n"
                            "5 packets transmitted, 0 received, 100% packet loss, time 812ms\n")
    assert lost["received"] == 0 and lost["avg_ms"] is None
    with pytest.raises(EnvironmentProblem):
        stats.parse_ping("ping: connect: Network is unreachable")


# --- flat labs: names and address plan ----------------------------------------------------


def test_flat_node_plan_matches_the_nested_address_plan():
    shape = topo.Shape(3, 4)
    plan = AddressPlan.for_shape(shape)
    seen_ports, seen_inter = set(), set()
    for node in shape.node_numbers():
        rows = flat.node_plan(plan, node)
        names = [r["ifname"] for r in rows]
        assert len(names) == len(set(names))
        assert all(len(n) <= topo.IFNAME_MAX for n in names)
        by = {(r["component"], r["net"]): r for r in rows}
        assert by[("gnab", "intra")]["address"] == "192.168.0.1/24"
        assert by[("gnab", "control")]["address"] == str(plan.control_address(node))
        for j in range(1, 5):
            assert by[(f"iphy{j}", "intra")]["address"] == f"192.168.0.{10 + j}/24"
            inter = by[(f"iphy{j}", "inter")]
            assert inter["address"] == str(plan.inter_address(node, j))
            assert inter["ofport"] == plan.port_number(node, j)
            assert inter["table"] == flat.route_table(j)
            seen_ports.add(inter["ofport"])
            seen_inter.add(IPv4Interface(inter["address"]).ip)
    assert len(seen_ports) == len(seen_inter) == 12


def test_flat_names_and_limits():
    assert flat.node_switch("nn", 3) == "nn-s3"
    assert len(flat.node_switch("abcdefgh", 999)) <= topo.IFNAME_MAX
    with pytest.raises(UsageError, match="longer"):
        flat.node_switch("abcdefgh", 123456)
    assert flat.inter_if(99) == "iphy99-inter" and len(flat.inter_if(99)) <= topo.IFNAME_MAX
    assert flat.container_limits(0.5, 64, iphys=4, cores=8) == (int(2.5e9), "320m")
    assert flat.container_limits(1.0, None, iphys=4, cores=2) == (int(2e9), None)
    assert flat.container_limits(None, None, iphys=4, cores=2) == (None, None)


def test_flat_component_env_names_the_component_and_its_addresses():
    plan = AddressPlan.for_shape(topo.Shape(2, 2))
    env = flat.component_env(plan, "bf", 2, 1)
    assert env["NESTEDNET_COMPONENT"] == "iphy1"
    assert env["NESTEDNET_INTRA"] == "192.168.0.11"
    assert env["NESTEDNET_INTER"] == str(plan.inter_address(2, 1).ip)
    assert "NESTEDNET_INTER" not in flat.component_env(plan, "bf", 2, 0)


def test_the_lab_record_picks_the_node_design():
    assert designs.of({"kind": "flat"}).kind == "flat"
    assert designs.of({}).kind == "nested"
    assert designs.of({"kind": "nested"}).phases[-1] == "wiring"
    with pytest.raises(UsageError, match="unknown node design 'remote'"):
        designs.named("remote")


def test_both_designs_give_the_gnab_the_same_configuration():
    plan = AddressPlan.for_shape(topo.Shape(3, 2))
    env = design.component_environment(plan, "bf", 3, 0)
    assert env["NESTEDNET_CA"] == f"{plan.ca_address().ip}:{CA_PORT}"
    assert env["NESTEDNET_IPHYS"] == "iphy1=192.168.0.11,iphy2=192.168.0.12"
    assert design.gnab_environment(plan).items() <= env.items()
    assert "NESTEDNET_CA" not in design.component_environment(plan, "bf", 3, 1)


# --- links mesh ------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes,iphys", [(2, 1), (4, 3), (4, 4), (6, 5)])
def test_mesh_obeys_algorithm_1(nodes, iphys):
    made: list = []
    for a, b in links.mesh(nodes, iphys):
        made.append(link_rules.check_new_link(made, a, b))  # raises on a rule breach
    assert len(made) == nodes * (nodes - 1) // 2


def test_mesh_refuses_too_few_iphys():
    with pytest.raises(ValueError):
        links.mesh(4, 2)


# --- reports ---------------------------------------------------------------------------------


def _summary(v):
    return stats.summary([v, v * 1.1])


def fake_results() -> dict[str, dict]:
    machine = {"cores": 2, "memory_mb": 1000, "kernel": "k", "ovs_datapath": "netdev",
               "ovs": "3.1", "docker": "20.10", "cgroup": "v1", "loadavg_at_start": [1, 1, 1]}
    common = {"machine": machine, "mode": "quick", "duration_s": 1.0, "loadavg_at_end": [1, 1, 1]}
    mem_nodes = [{"node": "n1", "node_total_mb": 60.0, "node_total_anon_mb": 50.0,
                  "components": {"gnab": 9.0, "iphy1": 0.5, "iphy2": 0.7},
                  "inner_daemon_mb": 40.0, "inner_daemon_anon_mb": 30.0,
                  "internal_ovs_mb": 10.0, "internal_ovs_anon_mb": 8.0}]
    mem = {"experiment": "memory", "params": memory.params(True), "paper": paper.PAPER["memory"],
           "notes": [], "main_ovs_mb": 50.0, "main_ovs_anon_mb": 40.0,
           "nested": {"summary": memory.condense(mem_nodes)},
           "flat": {"summary": memory.condense(mem_nodes)}, **common,
           "files": {"json": "memory.json", "png": "memory.png"}}
    lk = {"experiment": "links", "params": links.params(True), "paper": paper.PAPER["links"],
          "notes": [], **common, "files": {"json": "links.json"}}
    for kind, gbps in (("nested", 0.5), ("flat", 20.0)):
        lk[kind] = {f"{s}_{c}": {"summary": links.condense([
            {"gbps": [gbps] * c, "rtt_ms": [0.3] * c, "rtt_min_ms": [0.2] * c}])}
            for s in links.SCOPES for c in links.CONNECTIONS}
    st_ = {"experiment": "stress", "params": stress.params(True), "paper": paper.PAPER["stress"],
           "notes": [], **common, "files": {"json": "stress.json"},
           "quota_lowers_D": {"nested": True, "flat": False},
           "variants": [{"kind": k, "cpus": c, "t1_gbps": 1.0, "t2_gbps": 0.5, "t3_gbps": 1.0,
                         "D": 0.5, "series": [[0, 1, 1.0]], "stress_window_s": [4, 8]}
                        for k, c in stress.VARIANTS]}
    sc = {"experiment": "scaling", "params": scaling.params(True), "paper": paper.PAPER["scaling"],
          "notes": [], **common, "files": {"json": "scaling.json"},
          "points": [{"kind": k, "iphys": m, "summary": _summary(1.0)}
                     for m in scaling.params(True)["iphys"] for k in ("nested", "flat")]}
    su = {"experiment": "startup", "params": startup.params(True), "paper": paper.PAPER["startup"],
          "notes": [], **common, "files": {"json": "startup.json"},
          "growth_s_per_node": {"nested": 2.0, "flat": 0.5},
          "points": [{"kind": k, "nodes": n, "summary": _summary(float(n))}
                     for n in startup.params(True)["nodes"] for k in ("nested", "flat")]}
    return {"memory": mem, "links": lk, "stress": st_, "scaling": sc, "startup": su}


def test_report_has_every_experiment_side_by_side_with_the_paper():
    results = fake_results()
    results["scaling"] = {"experiment": "scaling", "error": "EnvironmentProblem: boom"}
    text = suite.report(results, results["memory"]["machine"], quick=True)
    for heading in ("Memory per node", "Link throughput", "Isolation under stress",
                    "Creation time"):
        assert heading in text
    assert "## scaling: FAILED" in text and "boom" in text
    assert "| nested | none |" in text and "72 %" in text and "98 %" in text
    assert "NestedNet 98 s, Containernet 28 s" in text
    assert "![memory](memory.png)" in text
    assert "| intra | 4 | 0.500 | 20.000 |" in text
    assert "| GNAB (runs the agent) | 9.0 |" in text and "| iPHY (each) | 0.6 |" in text


def test_report_prints_the_papers_numbers_with_their_sources():
    text = suite.report(fake_results(), fake_results()["memory"]["machine"], quick=True)
    assert "n/t" not in text and "paper-nestednet.txt" in text
    assert "| whole node | 60.0 (50.0) | 60.0 (50.0) | 98.4 | 55.0 |" in text
    assert "| inner daemons | 40.0 (30.0) | 40.0 (30.0) | 47.0 | - |" in text
    assert "| intra | 1 | 0.500 | 20.000 | 31.760 / 30.360 |" in text
    assert "0.075 / 0.056 |" in text and "| inter | 4 |" in text
    assert "15.740 / 14.190" in text and "0.073 / 0.074" in text
    assert "2 x 25: NestedNet 93 s, Containernet 9 s" in text
    assert "Table I: 1.79x (98.4 vs 55.0 MB)" in text
    assert "0.03 here, 1.08 in Tables II/III" in text
    assert "Fig. 3: yes (72 % vs 98 %)" in text and "30.0 -> 8.0 Gbit/s nested" in text
    assert "Table IV 12 x 4: 3.5x" in text
    assert "Verdict: spread at 10 iPHYs nested 6.7 %, flat 6.7 % (nested steadier: yes); " \
        "§V.D: NestedNet 4-7 %, Containernet 6-13 %" in text
    assert text.count("Verdict:") == 5  # one per table


def _cited(tree):
    if isinstance(tree, dict) and set(tree) == {"value", "source"}:
        yield tree
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _cited(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _cited(v)


def test_every_paper_number_names_its_table_or_figure():
    values = list(_cited(paper.PAPER))
    assert len(values) == 18 + 24 + 6 + 4 + 4
    for v in values:
        assert v["source"].startswith("paper-nestednet.txt, ")
        assert any(w in v["source"] for w in ("Table I", "Fig. 3", "§V.C", "§V.D")), v
    thesis = list(_cited(paper.THESIS))
    assert [v["value"] for v in thesis] == [95.3, 95.8, 1.67]
    for v in thesis:
        assert v["source"].startswith("thesis-nestednet-linkemu.txt, §4.7")
        assert any(w in v["source"] for w in ("Fig. 4.10", "Table 4.2")), v
    assert paper.PAPER["links"]["cells"]["inter"]["2"]["flat_gbps"]["value"] == 24.11


def test_each_markdown_and_plot_builds(tmp_path):
    for name, result in fake_results().items():
        module = suite.EXPERIMENTS[name]
        assert "|" in module.markdown(result)
        module.plot(result, tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 1000


def test_bench_cli_rejects_unknown_experiment():
    result = CliRunner().invoke(nestednet_main, ["bench", "bogus"])
    assert result.exit_code == 2
    assert "memory" in result.output
    assert suite.names("all") == [n for n in suite.EXPERIMENTS if n not in suite.ON_ITS_OWN]


def test_fidelity_report_without_netem_says_why_and_plots_rate_only(tmp_path):
    from nestednet.bench import fidelity

    result = {"experiment": "fidelity", "params": fidelity.params(True), "lab": "b1x1",
              "netem": False, "notes": ["n"],
              "rate": [{"configured_mbit": 5, "measured_mbit": 4.78, "ratio": 0.956,
                        "ratio_to_payload_ceiling": 0.999}],
              "skipped": "delay and loss not measured: this kernel lacks sch_netem"}
    text = fidelity.markdown(result)
    assert "| 5 | 4.78 | 0.956 | 0.999 |" in text and "lacks sch_netem" in text
    assert "delay configured" not in text
    assert "Verdict: goodput 95.6-95.6 % of the configured rate here, 95.3-95.8 % in the " \
        "thesis (Fig. 4.10); delay not measured, the thesis's testbed adds 1.67 ms" in text
    fidelity.plot(result, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0


def test_fidelity_report_with_netem_has_delay_and_loss_tables():
    from nestednet.bench import fidelity

    result = {"experiment": "fidelity", "params": fidelity.params(True), "lab": "b1x1",
              "netem": True, "notes": [], "rate": [],
              "delay": [{"configured_ms": 10, "measured_ms": 10.4, "error_ms": 0.4}],
              "loss": [{"configured_pct": 5, "measured_pct": 4.6, "pings": 300}]}
    text = fidelity.markdown(result)
    assert "| 10 | 10.400 | 0.400 |" in text and "| 5 | 4.60 | 300 |" in text
    assert "delay error median 0.400 ms over the idle RTT" in text
    assert "Verdict: goodput not measured here, 95.3-95.8 % in the thesis" in text


# --- startup at scale (--nodes, --repeats) ---------------------------------------------------


def test_startup_takes_node_counts_and_repeats_from_the_command_line():
    assert startup.params(False)["nodes"] == [6, 12, 16, 24]
    p = startup.params(False, nodes=(120, 12, 48, 12), repeats=3)
    assert p["nodes"] == [12, 48, 120] and p["repeats"] == 3
    assert startup.params(True, nodes=(5,))["nodes"] == [5]


def test_startup_report_has_idle_cpu_and_memory_per_node_per_count():
    su = fake_results()["startup"]
    su["params"] = startup.params(False, nodes=(12, 120))
    su["points"] = [{"kind": k, "nodes": n, "summary": stats.summary([float(n)]),
                     "idle_cpu_busy_pct": [20.0 if k == "nested" else 5.0],
                     "node_mb": stats.summary([50.0 if k == "nested" else 15.0])}
                    for n in (12, 120) for k in ("nested", "flat")]
    text = startup.markdown(su)
    assert "| 120 | 120.00 | 120.00 | 1.00 | 20.0 | 5.0 | 50.0 | 15.0 |" in text
    assert "nested/flat creation time at 120 x 4" in text


def test_bench_node_counts_are_for_startup_and_routing_only(tmp_path):
    with pytest.raises(UsageError, match="`bench startup` and `bench routing` only"):
        suite.run_suite("memory", tmp_path / "out", quick=True, nodes=(3,))
    with pytest.raises(UsageError, match="`bench routing` only"):
        suite.run_suite("all", tmp_path / "out", quick=True, repeats=2)
    assert not (tmp_path / "out").exists()
    result = CliRunner().invoke(nestednet_main, ["bench", "startup", "--nodes", "12,0"])
    assert result.exit_code == 2 and "every node count must be 1 or more" in result.output


def test_idle_cpu_share_is_a_percentage():
    from nestednet.bench.common import cpu_busy_percent

    assert 0.0 <= cpu_busy_percent(0.05) <= 100.0


def test_machine_speed_is_the_median_of_the_repeats_in_cpu_time(monkeypatch):
    """The CPU clock, not the wall clock, read around each repeat; the middle one kept."""
    from nestednet.bench import common

    readings = iter([10.0, 10.5, 20.0, 20.2, 30.0, 30.9])  # repeats of 0.5, 0.2, 0.9 s
    monkeypatch.setattr(common.time, "process_time", lambda: next(readings))
    monkeypatch.setattr(common.time, "monotonic",
                        lambda: pytest.fail("wall clock read"))
    assert common.machine_speed(repeats=3) == 0.5
