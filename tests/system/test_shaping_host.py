"""On a kernel without sch_netem / sch_hfsc (this development host): refuse cleanly.

`linkemu apply` must name the missing modules, exit non-zero and leave the ports'
qdiscs exactly as they were; the HTB path still shapes rate-only links.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from linkemu import linksfile, shaping
from linkemu.cli import main
from nestednet.adapters import netlink, tc
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.model import tcplan
from nestednet.model.tcplan import LinkShape


@dataclass(frozen=True)
class Ports:
    """Two emulator ports in a namespace of the test's own (a veth pair; tc needs no
    traffic to show what it holds)."""

    emu: str
    client_port: str = "les-cli"
    server_port: str = "les-srv"


@pytest.fixture
def veth_ns():
    ports = Ports(emu=f"les-{uuid.uuid4().hex[:6]}")
    netlink.create_netns(ports.emu)
    try:
        with netlink.route(ports.emu) as ipr:
            ipr.link("add", ifname=ports.client_port, kind="veth",
                     peer={"ifname": ports.server_port})
            for name in (ports.client_port, ports.server_port):
                netlink.up(ipr, name)
        yield ports
    finally:
        netlink.remove_netns(ports.emu)


@pytest.fixture
def topo(veth_ns, tmp_path, monkeypatch):
    if available_qdiscs()["netem"]:
        pytest.skip("this kernel has sch_netem: the refusal path cannot be shown here")
    monkeypatch.setenv(shaping.STATE_DIR_ENV, str(tmp_path / "state"))
    yield veth_ns
    shaping.clear()


def write_links(tmp_path, topo, *, rate_only: bool) -> Path:
    table = linksfile.load("scenarios/links/thesis-example.json")
    doc = linksfile.to_native(table)
    doc["emulator"] = {"bridge": "les-br", "client_port": topo.client_port,
                       "server_port": topo.server_port, "netns": topo.emu}
    if rate_only:
        for link in doc["links"]:
            for d in ("forward", "backward"):
                link[d] = {"rate": link[d]["rate"]}
    path = tmp_path / "links.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.system
@pytest.mark.parametrize(("shaper", "missing"), [("hfsc", "sch_hfsc, sch_netem"),
                                                 ("htb", "sch_netem")])
def test_apply_names_missing_modules_and_changes_nothing(tmp_path, topo, shaper, missing):
    ports = [topo.client_port, topo.server_port]
    before = tc.read(topo.emu, ports)
    result = CliRunner().invoke(main, ["apply", str(write_links(tmp_path, topo, rate_only=False)),
                                       "--shaper", shaper])
    assert result.exit_code == 1, result.output
    assert f"this kernel lacks {missing}" in result.output
    assert "nothing was applied" in result.output
    assert tc.read(topo.emu, ports) == before
    assert shaping.load_state() is None


@pytest.mark.system
def test_htb_shapes_rate_only_links_here(tmp_path, topo):
    ports = [topo.client_port, topo.server_port]
    before = tc.snapshot(topo.emu, ports)
    result = CliRunner().invoke(main, ["apply", str(write_links(tmp_path, topo, rate_only=True)),
                                       "--shaper", "htb"])
    assert result.exit_code == 0, result.output
    shown = CliRunner().invoke(main, ["show", "--json"])
    rows = json.loads(shown.output)["links"]
    assert len(rows) == 6 and all(r["in_sync"] for r in rows)
    assert tc.offloads(topo.emu, topo.server_port)["tx-tcp-segmentation"] is False
    result = CliRunner().invoke(main, ["set", "R1-C1", "forward", "--delay", "5ms"])
    assert result.exit_code == 1 and "only --rate can change" in result.output
    assert CliRunner().invoke(main, ["clear"]).exit_code == 0
    assert tc.snapshot(topo.emu, ports) == before


def _leaf_parms(ipr, port: str) -> dict:
    """The leaf class's tc_htb_opt as the kernel dumps it (plus RATE64/CEIL64)."""
    for msg in ipr.get_classes(tc.port_index(ipr, port)):
        if msg["handle"] == tc.handle_int(tcplan.leaf_class(0)):
            opts = msg.get_attr("TCA_OPTIONS")
            parms = opts.get_attr("TCA_HTB_PARMS")
            return {**{name: parms[name] for name, _ in parms.fields},
                    "rate64": opts.get_attr("TCA_HTB_RATE64"),
                    "ceil64": opts.get_attr("TCA_HTB_CEIL64")}
    raise AssertionError(f"no leaf class on {port}")


@pytest.mark.system
@pytest.mark.parametrize("rate_bps", [5_000_000, 40_000_000_000])
def test_htb_change_without_rate_tables_holds_what_pyroute2s_change_holds(veth_ns, rate_bps):
    """change_batch sends HTB class changes without RTAB/CTAB (link layer Ethernet); the
    kernel must accept them and hold exactly what pyroute2's request with its rate
    tables gives: same rate (RATE64 above 2^32 bytes/s), burst times, quantum."""
    ns, a, b = veth_ns.emu, veth_ns.client_port, veth_ns.server_port
    old, new = LinkShape(20_000_000), LinkShape(rate_bps)
    tc.apply([op for port in (a, b) for op in tcplan.port_tree_ops(port, port, old, "htb",
                                                                   netem=False)], ns, [a, b])
    tc.change_batch(tcplan.leaf_change_ops(a, "htb", 0, a, old, new, netem=False), ns,
                    tc.port_indexes(ns, [a]))
    with tc.rtnl(ns) as ipr:
        for op in tcplan.leaf_change_ops(b, "htb", 0, b, old, new, netem=False):
            params = {**op.params, "parent": tc.handle_int(op.params["parent"])}
            ipr.tc(op.command, op.kind, index=tc.port_index(ipr, b),
                   handle=tc.handle_int(op.handle), **params)
        held = {port: _leaf_parms(ipr, port) for port in (a, b)}
    assert held[a] == held[b]
    assert held[a]["rate___reserved"] == tc.TC_LINKLAYER_ETHERNET
    read = tc.read(ns, [a])[a]["classes"]
    leaf = next(c for c in read if c["classid"] == tcplan.leaf_class(0))
    assert leaf["rate_bps"] == leaf["ceil_bps"] == rate_bps


@pytest.mark.system
def test_change_batch_gets_every_ack_of_a_large_step():
    """Packed requests are small, so one write could hold hundreds; the kernel queues
    every ACK before we read one, and past the receive buffer it drops them (ENOBUFS).
    A 48 x 4 lab's step can change 192 classes (384 requests with netem)."""
    ns = f"les-{uuid.uuid4().hex[:6]}"
    ports = [f"lb{i}" for i in range(300)]
    netlink.create_netns(ns)
    try:
        with netlink.route(ns) as ipr:
            for i in range(0, len(ports), 2):
                ipr.link("add", ifname=ports[i], kind="veth", peer={"ifname": ports[i + 1]})
        old, new = LinkShape(20_000_000), LinkShape(7_000_000)
        tc.apply([op for port in ports for op in tcplan.port_tree_ops(
            port, port, old, "htb", netem=False)], ns, ports)
        tc.change_batch([op for port in ports for op in tcplan.leaf_change_ops(
            port, "htb", 0, port, old, new, netem=False)], ns, tc.port_indexes(ns, ports))
        sample = [ports[0], ports[len(ports) // 2], ports[-1]]
        held = tc.read(ns, sample)
        assert {c["rate_bps"] for port in sample for c in held[port]["classes"]
                if c["classid"] == tcplan.leaf_class(0)} == {7_000_000}
    finally:
        netlink.remove_netns(ns)
