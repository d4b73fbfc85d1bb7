"""`linkemu apply` end to end on the software testbed: router part and tc part together.

On this host kernel (no sch_netem/sch_hfsc) the testbed's rate-only links are applied
with the HTB shaper; the delay/loss paths run in the full-kernel VM (tests/kernel).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from pyroute2 import IPRoute

from linkemu import router, testbed
from linkemu.cli import main
from nestednet.adapters import netns_exec

pytestmark = pytest.mark.system

PREFIX = "lea"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    where = tmp_path_factory.mktemp("linkemu-apply")
    mp = pytest.MonkeyPatch()
    mp.setenv("LINKEMU_STATE_DIR", str(where))
    up = CliRunner().invoke(main, ["testbed", "up", "--clients", "2", "--prefix", PREFIX,
                                   "--json"])
    try:
        assert up.exit_code == 0, up.output + repr(up.exception)
        layout = testbed.Layout(clients=2, prefix=PREFIX)
        doc = testbed.links_document(layout)
        links_file = where / "links.json"
        links_file.write_text(json.dumps(doc))
        yield {"dir": where, "layout": layout, "doc": doc, "file": links_file}
    finally:
        CliRunner().invoke(main, ["clear"])
        testbed.down(where)
        mp.undo()


def _root_qdiscs(doc: dict) -> dict[str, str]:
    ports = (doc["emulator"]["client_port"], doc["emulator"]["server_port"])
    with IPRoute() as ip:
        out = {}
        for port in ports:
            index = ip.link_lookup(ifname=port)[0]
            roots = [q for q in ip.get_qdiscs(index=index) if q["parent"] == 0xFFFFFFFF]
            out[port] = roots[0].get_attr("TCA_KIND") if roots else "none"
        return out


def test_apply_configures_router_and_shaping(bed: dict) -> None:
    done = CliRunner().invoke(main, ["apply", str(bed["file"]), "--shaper", "htb", "--json"])
    assert done.exit_code == 0, done.output + repr(done.exception)
    assert set(_root_qdiscs(bed["doc"]).values()) == {"htb"}
    configured = router.load_state(bed["dir"]).configured
    assert configured and configured["bridge"] == bed["doc"]["emulator"]["bridge"]
    layout = bed["layout"]
    ping = netns_exec.run(layout.client_ns(1), ["ping", "-c", "3", "-i", "0.2", "-W", "3",
                                                str(layout.SERVER.ip)], timeout=30)
    assert ping.returncode == 0 and re.search(r"ttl=62 ", ping.stdout), ping.stdout
    shown = CliRunner().invoke(main, ["show", "--json"])
    rows = json.loads(shown.output)["links"]
    assert rows and all(r["in_sync"] for r in rows), rows


def test_set_changes_the_kernel_in_place(bed: dict) -> None:
    link = f"{bed['doc']['links'][0]['router']}-{bed['doc']['links'][0]['client']}"
    done = CliRunner().invoke(main, ["set", link, "forward", "--rate", "3Mbit"])
    assert done.exit_code == 0, done.output + repr(done.exception)
    rows = json.loads(CliRunner().invoke(main, ["show", "--json"]).output)["links"]
    changed = [r for r in rows if r["link"] == link and r["direction"] == "forward"]
    assert changed and changed[0]["in_sync"], rows


def test_apply_takes_the_thesis_fig_4_6_shape(bed: dict) -> None:
    """The printed shape (Linksimulation, properties list) on the testbed's addresses.

    Rates from Fig. 4.6's clients 1 and 2; no delays, since this host kernel has no netem.
    """
    layout, links = bed["layout"], bed["doc"]["links"]
    doc = {"emulator": bed["doc"]["emulator"], "Linksimulation": {
        "Routerpairs": [{"Routerid": 1, "Clientcount": 2, "Client_IP1": links[0]["client_ip"],
                         "Client_IP2": links[1]["client_ip"],
                         "Server_IP": str(layout.SERVER.ip)}],
        "Linkproperties": [{"Routerid": 1, "properties": [{
            "throughput_1_forward": "46Mbps", "throughput_1_backward": "8Mbps",
            "throughput_2_forward": "50Mbps", "throughput_2_backward": "8Mbps"}]}]}}
    file = bed["dir"] / "fig-4.6.json"
    file.write_text(json.dumps(doc))
    done = CliRunner().invoke(main, ["apply", str(file), "--shaper", "htb", "--json"])
    assert done.exit_code == 0, done.output + repr(done.exception)
    rows = json.loads(CliRunner().invoke(main, ["show", "--json"]).output)["links"]
    rates = {(r["link"], r["direction"]): r for r in rows}
    assert set(rates) == {(f"R1-C{n}", d) for n in (1, 2) for d in ("forward", "backward")}
    assert all(r["in_sync"] for r in rows), rows
    ping = netns_exec.run(layout.client_ns(2), ["ping", "-c", "3", "-i", "0.2", "-W", "3",
                                                str(layout.SERVER.ip)], timeout=30)
    assert ping.returncode == 0, ping.stdout


COUNTERS = ("sent_packets", "dropped", "backlog_bytes", "backlog_packets")
"""What traffic moves in `show --json` (qdiscs and classes alike), not configuration."""


def _shown_without_counters() -> dict:
    """`show --json` minus packet counters, which any ARP or IPv6 ND packet moves (CI saw
    a class's counter move between the two reads)."""
    shown = json.loads(CliRunner().invoke(main, ["show", "--json"]).output)
    for port in shown.get("ports", {}).values():
        for entry in (*port.get("qdiscs", []), *port.get("classes", [])):
            for counter in COUNTERS:
                entry.pop(counter, None)
    return shown


def test_unknown_link_in_set_is_exit_2_and_changes_nothing(bed: dict) -> None:
    before = _shown_without_counters()
    done = CliRunner().invoke(main, ["set", "R9-C9", "forward", "--rate", "1Mbit"])
    assert done.exit_code == 2, done.output
    assert _shown_without_counters() == before


def test_missing_router_is_exit_2_and_changes_nothing(bed: dict) -> None:
    before = _root_qdiscs(bed["doc"])
    router.stop(bed["dir"])
    done = CliRunner().invoke(main, ["apply", str(bed["file"]), "--shaper", "htb"])
    assert done.exit_code == 2, done.output
    assert "no router is running" in done.output
    assert _root_qdiscs(bed["doc"]) == before
