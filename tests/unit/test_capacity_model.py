"""The capacity model (nestednet/model/capacity.py) against numbers worked out by hand."""

from __future__ import annotations

import pytest

from nestednet.model import capacity as cap

pytestmark = pytest.mark.unit

# Round costs so every expected value below can be checked on paper.
COSTS = cap.Costs(node_mb=20.0, iphy_mb=1.0, host_node_mb=3.0, host_port_mb=2.0,
                  link_mb=0.5, node_cores=0.01, host_base_mb=1000.0, host_base_cores=1.0)


def test_walker_grid_counts_links_and_nodes():
    # 72 x 22 = 1584 satellites; +Grid: 2 links each = 3168; 100 stations, 1 link each.
    w = cap.walker_grid(72, 22, 100)
    assert (w.nodes, w.links, w.iphys) == (1684, 3268, 5)
    assert cap.walker_grid(6, 11, 0, ground_links=0) == cap.Workload(66, 4, 132)
    assert cap.walker_grid(2, 3, 4, ground_links=2, iphys=8) == cap.Workload(10, 8, 20)


def test_node_usage_sums_inside_host_and_links():
    # 20 + 5*1 + 3 + 5*2 + 2 links * 0.5 = 39 MB; 0.01 cores.
    u = cap.node_usage(COSTS, iphys=5, links_per_node=2)
    assert u.memory_mb == pytest.approx(39.0)
    assert u.cores == pytest.approx(0.01)


def test_memory_bound_host():
    # Host 16 cores / 64000 MB, headroom 0.8: memory room 51200 - 1000 = 50200 MB,
    # CPU room 12.8 - 1 = 11.8 cores. Node with 4 iPHYs and 1 link each:
    # 20 + 4 + 3 + 8 + 0.5 = 35.5 MB -> floor(50200 / 35.5) = 1414 nodes;
    # CPU: floor(11.8 / 0.01) = 1180 nodes -> CPU binds, 1180 per host.
    host = cap.HostSpec(cores=16, memory_mb=64000)
    p = cap.hosts_needed(COSTS, cap.Workload(nodes=2000, iphys=4, links=2000), host)
    assert (p.nodes_per_host, p.bound, p.hosts) == (1180, "cpu", 2)
    # Lab: 2000 * 35.5 = 71000 MB, 20 cores; per host: 1000 + 35500, 1 + 10.
    assert p.total.memory_mb == pytest.approx(71000.0)
    assert p.total.cores == pytest.approx(20.0)
    assert p.per_host.memory_mb == pytest.approx(36500.0)
    assert p.per_host.cores == pytest.approx(11.0)


def test_cpu_cheap_nodes_are_memory_bound():
    costs = cap.Costs(**{**COSTS.as_dict(), "node_cores": 0.001})
    host = cap.HostSpec(cores=16, memory_mb=64000)
    # Memory: 1414 nodes (above); CPU: floor(11.8 / 0.001) = 11800 -> memory binds.
    p = cap.hosts_needed(costs, cap.Workload(nodes=2000, iphys=4, links=2000), host)
    assert (p.nodes_per_host, p.bound, p.hosts) == (1414, "memory", 2)
    p = cap.hosts_needed(costs, cap.Workload(nodes=1414, iphys=4, links=1414), host)
    assert p.hosts == 1
    p = cap.hosts_needed(costs, cap.Workload(nodes=1415, iphys=4, links=1415), host)
    assert p.hosts == 2


def test_plan_uses_several_hosts_costs_once_one_host_is_not_enough():
    one = cap.Costs(**{**COSTS.as_dict(), "node_cores": 0.001})
    multi = cap.Costs(**{**one.as_dict(), "node_mb": 60.0})
    model = cap.CostModel(one_host=one, multi_host=multi)
    host = cap.HostSpec(cores=16, memory_mb=64000)
    # 1000 nodes fit one host at 35.5 MB (1414 a host): one host's costs.
    p = cap.plan(model, cap.Workload(nodes=1000, iphys=4, links=1000), host)
    assert (p.hosts, p.placement, p.costs) == (1, "one host", one)
    # 2000 need two at 35.5 MB, so every node is a multi-host one: 60 + 4 + 3 + 8 + 0.5
    # = 75.5 MB -> floor(50200 / 75.5) = 664 a host -> ceil(2000 / 664) = 4 hosts.
    p = cap.plan(model, cap.Workload(nodes=2000, iphys=4, links=2000), host)
    assert (p.hosts, p.nodes_per_host, p.placement, p.costs) == (4, 664, "several hosts",
                                                                 multi)
    assert p.as_dict()["costs"]["node_mb"] == 60.0


def test_cost_model_from_a_costs_file():
    other = cap.Costs(**{**COSTS.as_dict(), "node_mb": 99.0})
    default = cap.CostModel(one_host=COSTS, multi_host=other)
    mine = cap.Costs(**{**COSTS.as_dict(), "node_mb": 7.0})
    assert cap.CostModel.from_dict({"costs": mine.as_dict()}, default) == cap.CostModel(
        mine, mine)
    assert cap.CostModel.from_dict(mine.as_dict(), default) == cap.CostModel(mine, mine)
    assert cap.CostModel.from_dict({"multihost_costs": mine.as_dict()},
                                   default) == cap.CostModel(COSTS, mine)
    assert cap.CostModel.from_dict({"costs": COSTS.as_dict(),
                                    "multihost_costs": mine.as_dict()},
                                   default) == cap.CostModel(COSTS, mine)
    with pytest.raises(ValueError, match="unknown cost field"):
        cap.CostModel.from_dict({"multihost_costs": {"bogus": 1}}, default)


def test_lab_usage_is_linear():
    # 12 nodes x 4 iPHYs, 24 links: 12 * (20+4+3+8) + 24 * 0.5 = 432 MB; 0.12 cores.
    u = cap.lab_usage(COSTS, 12, 4, 24)
    assert u.memory_mb == pytest.approx(432.0)
    assert u.cores == pytest.approx(0.12)


def test_a_labs_fixed_cores_per_host_count_once_a_host():
    costs = cap.Costs(**{**COSTS.as_dict(), "host_lab_cores": 0.03})
    # 12 nodes x 0.01 + 2 hosts x 0.03 = 0.18 cores; memory as without it.
    u = cap.lab_usage(costs, 12, 4, 24, hosts=2)
    assert u.cores == pytest.approx(0.18) and u.memory_mb == pytest.approx(432.0)
    assert cap.lab_usage(costs, 0, 4, 0, hosts=2).cores == 0.0
    # CPU bound: 16 cores x 0.75 - 1 (base) - 1 (the lab's share) = 10 -> 40 nodes at
    # 0.25 cores a node; 100 nodes -> 3 hosts, each 1 + (100 x 0.25 + 3 x 1) / 3 cores.
    cpu_bound = cap.Costs(**{**COSTS.as_dict(), "node_cores": 0.25, "host_lab_cores": 1.0})
    p = cap.hosts_needed(cpu_bound, cap.Workload(100, 4, 100),
                         cap.HostSpec(cores=16, memory_mb=10_000_000, headroom=0.75))
    assert (p.nodes_per_host, p.bound, p.hosts) == (40, "cpu", 3)
    assert p.per_host.cores == pytest.approx(1 + 28 / 3)


def test_cores_line():
    # Through (6, 0.051) and (12, 0.069): 0.003 a node, 0.051 - 6 x 0.003 = 0.033 a host.
    host, node = cap.cores_line([(6, 0.051), (6, 0.051), (12, 0.069), (12, 0.069)])
    assert (host, node) == (pytest.approx(0.033), pytest.approx(0.003))
    # One node count: through zero, sum(n c) / sum(n^2) = (6 x 0.05 + 6 x 0.07) / 72.
    assert cap.cores_line([(6, 0.05), (6, 0.07)]) == (0.0, pytest.approx(0.01))
    # A line that would give a host a negative share: through zero instead,
    # (1 x 0.01 + 2 x 0.04) / (1 + 4) = 0.018.
    assert cap.cores_line([(1, 0.01), (2, 0.04)]) == (0.0, pytest.approx(0.018))
    with pytest.raises(ValueError):
        cap.cores_line([])


def test_no_room_and_bad_input_raise():
    with pytest.raises(ValueError):
        cap.hosts_needed(COSTS, cap.Workload(1, 4, 0), cap.HostSpec(cores=1, memory_mb=1000))
    with pytest.raises(ValueError):
        cap.hosts_needed(COSTS, cap.Workload(0, 4, 0), cap.HostSpec(16, 64000))
    with pytest.raises(ValueError):
        cap.walker_grid(0, 22, 100)
    with pytest.raises(ValueError, match="unknown cost field"):
        cap.Costs.from_dict({**COSTS.as_dict(), "bogus": 1})


def test_costs_round_trip():
    assert cap.Costs.from_dict(COSTS.as_dict()) == COSTS


def test_cores_split_takes_nodes_own_share_from_their_parents():
    # One size: the host side through zero. Parents 0.06 + 0.04 over 10 nodes = 0.01 a
    # node; the rest 0.02 a host of 5 nodes = 0.004 a node on top; no per-host share.
    host, node = cap.cores_split([(5, 0.06, 0.02), (5, 0.04, 0.02)])
    assert (host, node) == (pytest.approx(0.0), pytest.approx(0.014))
    # Two sizes: the rest is 0.03 + 0.001 a node (0.035 at 5, 0.040 at 10): per host
    # 0.03; parents (0.02 + 0.04) / 15 = 0.004 a node, + 0.001 = 0.005.
    host, node = cap.cores_split([(5, 0.02, 0.035), (10, 0.04, 0.040)])
    assert (host, node) == (pytest.approx(0.03), pytest.approx(0.005))
    with pytest.raises(ValueError):
        cap.cores_split([])


def test_relative_error():
    assert cap.relative_error(110.0, 100.0) == pytest.approx(0.10)
    assert cap.relative_error(80.0, 100.0) == pytest.approx(-0.20)


def test_bench_capacity_cli(tmp_path):
    import json

    from click.testing import CliRunner

    from nestednet.cli import main as nestednet_main

    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"costs": {**COSTS.as_dict(), "node_cores": 0.001}}))
    # 72x22 + 100 stations: 1684 nodes x (1+5), 3268 links. Per node
    # 20 + 5 + 3 + 10 + (3268/1684) * 0.5 = 38.9703 MB. 32 GB host: 32768 * 0.8 - 1000
    # = 25214.4 MB -> 647 nodes; CPU 11.8 / 0.001 = 11800 -> memory binds; 1684/647 -> 3.
    result = CliRunner().invoke(nestednet_main, [
        "bench", "capacity", "--costs", str(costs), "--host-memory-gb", "32", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["hosts"], doc["nodes_per_host"], doc["bound"]) == (3, 647, "memory")
    assert doc["workload"] == {"nodes": 1684, "iphys": 5, "links": 3268}
    text = CliRunner().invoke(nestednet_main, ["bench", "capacity", "--costs", str(costs),
                                               "--host-memory-gb", "32"]).output
    assert "hosts needed: 3" in text and "memory binds" in text
    bad = CliRunner().invoke(nestednet_main, ["bench", "capacity", "--shell", "72"])
    assert bad.exit_code == 2 and "PLANESxSATS" in bad.output
    other = CliRunner().invoke(nestednet_main, ["bench", "scaling", "--stations", "3"])
    assert other.exit_code == 2 and "bench capacity" in other.output
