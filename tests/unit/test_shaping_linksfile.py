"""Links files: both formats, valid and invalid, through the parser and the CLI (exit 2)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from linkemu import linksfile
from linkemu.cli import main
from nestednet.errors import UsageError
from nestednet.model import tcplan

THESIS = Path("scenarios/links/thesis-example.json")
NATIVE = Path("scenarios/links/native-example.json")
FIG_4_6 = Path("scenarios/links/thesis-fig-4.6.json")
FIG_4_6_TESTBED = Path("scenarios/links/thesis-fig-4.6-testbed.json")


def thesis() -> dict:
    return json.loads(THESIS.read_text())


def native() -> dict:
    return json.loads(NATIVE.read_text())


def printed() -> dict:
    return json.loads(FIG_4_6.read_text())


@pytest.mark.unit
def test_thesis_example_reads_as_three_links():
    table = linksfile.load(THESIS)
    assert [link.name for link in table.links] == ["R1-C1", "R1-C2", "R1-C3"]
    c1, c2, c3 = table.links
    assert c1.forward.rate_bps == 46_000_000 and c1.forward.delay_us == 11_000
    assert c2.backward.loss_pct == 1.0 and c2.backward.rate_bps == 10_000_000
    assert c3.forward.loss_pct == 0.5 and str(c3.client_ip) == "198.18.0.13"
    assert {str(link.server_ip) for link in table.links} == {"198.19.0.10"}


@pytest.mark.unit
def test_thesis_fig_4_6_as_printed():
    """Fig. 4.6: Linksimulation wrapper, a properties list, no packetloss_3_forward."""
    table = linksfile.load(FIG_4_6)
    assert [link.name for link in table.links] == ["R1-C1", "R1-C2", "R1-C3"]
    assert [str(link.client_ip) for link in table.links] == [
        "10.1.1.123", "20.1.1.12", "18.2.1.23"]
    assert {str(link.server_ip) for link in table.links} == {"11.3.2.111"}
    c1, c2, c3 = table.links
    assert (c1.forward.rate_bps, c1.forward.delay_us, c1.forward.loss_pct) == (
        46_000_000, 11_000, 0)
    assert (c1.backward.rate_bps, c1.backward.delay_us) == (8_000_000, 8_000)
    assert (c2.forward.rate_bps, c2.forward.delay_us) == (50_000_000, 5_000)
    assert (c3.forward.rate_bps, c3.forward.delay_us, c3.forward.loss_pct) == (
        30_000_000, 3_000, 0)
    assert all(link.forward.jitter_us == 0 == link.backward.jitter_us for link in table.links)


@pytest.mark.unit
def test_integral_floats_where_the_schema_says_integer_read_as_integers():
    """JSON Schema's "integer" admits 3.0; Clientcount 3.0 used to crash range() (exit 1,
    found by the hostile-input fuzz), and Routerid 1.0 named a router "1.0"."""
    doc = printed()
    pair = doc["Linksimulation"]["Routerpairs"][0]
    pair["Clientcount"], pair["Routerid"] = 3.0, 1.0
    doc["Linksimulation"]["Linkproperties"][0]["Routerid"] = 1.0
    assert linksfile.parse(doc) == linksfile.parse(printed())


@pytest.mark.unit
def test_printed_and_flattened_shapes_give_the_same_table():
    doc = printed()
    body = doc["Linksimulation"]
    flat = {"Routerpairs": body["Routerpairs"],
            "Linkproperties": [{"Routerid": 1, **body["Linkproperties"][0]["properties"][0]}]}
    assert linksfile.parse(flat) == linksfile.parse(doc)
    split = printed()
    props = split["Linksimulation"]["Linkproperties"][0]["properties"]
    first = {k: v for k, v in props[0].items() if "_1_" in k}
    props[:] = [first, {k: v for k, v in props[0].items() if k not in first}]
    assert linksfile.parse(split) == linksfile.parse(doc)


@pytest.mark.unit
def test_fig_4_6_on_testbed_addresses_applies_dry_run():
    table = linksfile.load(FIG_4_6_TESTBED)
    assert [str(link.client_ip) for link in table.links] == [
        "198.18.0.11", "198.18.0.12", "198.18.0.13"]
    for path in (FIG_4_6, FIG_4_6_TESTBED):
        result = CliRunner().invoke(main, ["apply", str(path), "--dry-run"])
        assert result.exit_code == 0, result.output
        assert "R1-C3" in result.output


def _printed_with(change):
    doc = printed()
    change(doc["Linksimulation"])
    return doc


_PROPS = "Linksimulation.Linkproperties[0].properties[0]"
PRINTED_BAD = [
    (_printed_with(lambda b: b["Linkproperties"][0]["properties"][0].update(
        delay_2_forward="5mx")), f"{_PROPS}.delay_2_forward", "unknown unit 'mx'"),
    (_printed_with(lambda b: b["Linkproperties"][0]["properties"][0].pop(
        "throughput_3_backward")), f"{_PROPS}.throughput_3_backward", "missing"),
    (_printed_with(lambda b: b["Linkproperties"][0]["properties"][0].update(
        throughput_4_forward="1Mbps")), f"{_PROPS}.throughput_4_forward",
     "client 4 does not exist"),
    (_printed_with(lambda b: b["Linkproperties"][0]["properties"][0].update(
        **{"throughput 1 forward": "1Mbps"})), f"{_PROPS}.throughput 1 forward", "unknown key"),
    (_printed_with(lambda b: b["Linkproperties"][0].pop("properties")),
     "Linksimulation.Linkproperties[0].properties", "missing"),
    (_printed_with(lambda b: b["Routerpairs"][0].update(Client_IP2="20.1.1.300")),
     "Linksimulation.Routerpairs[0].Client_IP2", "not an IPv4"),
    (_printed_with(lambda b: b["Routerpairs"][0].pop("Server_IP")),
     "Linksimulation.Routerpairs[0].Server_IP", "missing"),
    (_printed_with(lambda b: b["Routerpairs"][0].update(Clientcount="3")),
     "Linksimulation.Routerpairs[0].Clientcount", "not of type 'integer'"),
    (_printed_with(lambda b: b.update(Extra=1)), "Linksimulation.Extra", "unknown key"),
    (_printed_with(lambda b: b["Linkproperties"][0].update(Routerid=2)),
     "Linksimulation.Linkproperties[0].Routerid", "not in Routerpairs"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("doc", "path", "reason"), PRINTED_BAD)
def test_bad_printed_files_name_the_place(tmp_path, doc, path, reason):
    with pytest.raises(UsageError) as info:
        linksfile.parse(doc)
    assert str(info.value).startswith(f"{path}:"), str(info.value)
    assert reason in str(info.value)
    file = tmp_path / "fig.json"
    file.write_text(json.dumps(doc))
    result = CliRunner().invoke(main, ["apply", str(file), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert f"{file}: {path}:" in result.output


@pytest.mark.unit
def test_thesis_schema_file_is_the_package_schema():
    assert (json.loads(Path("scenarios/links/links-thesis.schema.json").read_text())
            == linksfile.thesis_schema())


@pytest.mark.unit
def test_thesis_properties_by_position_and_single_object():
    doc = thesis()
    del doc["Linkproperties"][0]["Routerid"]
    by_position = linksfile.parse(doc)
    doc["Linkproperties"] = doc["Linkproperties"][0]
    single = linksfile.parse(doc)
    assert by_position == single == linksfile.load(THESIS)


@pytest.mark.unit
def test_thesis_two_routers_matched_by_routerid_out_of_order():
    doc = thesis()
    second = copy.deepcopy(doc["Routerpairs"][0])
    second.update(Routerid=2, Clientcount=1, Server_IP="198.19.0.20")
    for key in ("Client_IP2", "Client_IP3"):
        del second[key]
    doc["Routerpairs"].append(second)
    doc["Linkproperties"].insert(0, {"Routerid": 2, "throughput_1_forward": "1Mbps",
                                     "throughput_1_backward": "2Mbps"})
    table = linksfile.parse(doc)
    assert [link.name for link in table.links][-1] == "R2-C1"
    assert table.links[-1].forward.rate_bps == 1_000_000


@pytest.mark.unit
def test_native_example_and_round_trip():
    table = linksfile.load(NATIVE)
    assert table.links[1].forward.rate_bps == 1_500_000
    assert table.links[1].forward.jitter_us == 2000
    assert linksfile.parse(linksfile.to_native(table)) == table


@pytest.mark.unit
def test_schema_file_is_the_package_schema():
    assert json.loads(Path("scenarios/links/links.schema.json").read_text()) == linksfile.schema()


def _thesis_with(**changes):
    doc = thesis()
    for key, value in changes.items():
        if value is None:
            doc["Linkproperties"][0].pop(key, None)
        else:
            doc["Linkproperties"][0][key] = value
    return doc


BAD = [
    (_thesis_with(delay_2_forward="11mx"), "Linkproperties[0].delay_2_forward",
     "unknown unit 'mx'"),
    (_thesis_with(throughput_1_forward="-5Mbps"), "Linkproperties[0].throughput_1_forward",
     "negative"),
    (_thesis_with(packetloss_3_backward="101"), "Linkproperties[0].packetloss_3_backward",
     "above 100"),
    (_thesis_with(throughput_2_backward=None), "Linkproperties[0].throughput_2_backward",
     "missing"),
    (_thesis_with(delay_4_forward="1ms"), "Linkproperties[0].delay_4_forward",
     "client 4 does not exist"),
    (_thesis_with(delay_1_foward="1ms"), "Linkproperties[0].delay_1_foward", "unknown key"),
    (_thesis_with(throughput_1_forward="40Gbit"), "Linkproperties[0].throughput_1_forward",
     "HFSC"),
    (_thesis_with(Routerid=7), "Linkproperties[0].Routerid", "not in Routerpairs"),
]


def _pair(change):
    doc = thesis()
    change(doc["Routerpairs"][0])
    return doc


BAD += [
    (_pair(lambda p: p.pop("Routerid")), "Routerpairs[0].Routerid", "missing"),
    (_pair(lambda p: p.update(Client_IP2="198.18.0.11")), "Routerpairs[0].Client_IP2",
     "duplicate client"),
    (_pair(lambda p: p.update(Client_IP1="198.19.0.10")), "Routerpairs[0].Client_IP1",
     "both 198.19.0.10"),
    (_pair(lambda p: p.update(Client_IP3="198.18.0.300")), "Routerpairs[0].Client_IP3",
     "not an IPv4"),
    (_pair(lambda p: p.update(Clientcount=4)), "Routerpairs[0].Client_IP4", "missing"),
    (_pair(lambda p: p.pop("Server_IP")), "Routerpairs[0].Server_IP", "missing"),
]


def _native_with(change):
    doc = native()
    change(doc)
    return doc


BAD += [
    (_native_with(lambda d: d["links"][1]["forward"].update(rate="1.5Mbix")),
     "links[1].forward.rate", "unknown unit 'Mbix'"),
    (_native_with(lambda d: d["links"][0]["backward"].update(loss="150%")),
     "links[0].backward.loss", "above 100"),
    (_native_with(lambda d: d["links"][0]["forward"].update(delay="-3ms")),
     "links[0].forward.delay", "negative"),
    (_native_with(lambda d: d["links"][0]["forward"].update(jitter="9ms")),
     "links[0].forward.jitter", "jitter larger than the delay"),
    (_native_with(lambda d: d["links"][1].update(client="C1")), "links[1]",
     "duplicate client"),
    (_native_with(lambda d: d["links"][0].pop("router")), "links[0].router", "missing"),
    (_native_with(lambda d: d["links"][0].update(client_ip="nope")), "links[0].client_ip",
     "not a 'ipv4'"),
    (_native_with(lambda d: d["links"][0]["forward"].pop("rate")), "links[0].forward.rate",
     "missing"),
    (_native_with(lambda d: d["emulator"].update(server_port="le-cli")), "emulator",
     "must differ"),
    (_native_with(lambda d: d.update(links=[])), "links", "should be non-empty"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("doc", "path", "reason"), BAD)
def test_bad_files_name_the_place(doc, path, reason):
    with pytest.raises(UsageError) as info:
        linksfile.parse(doc)
    assert str(info.value).startswith(f"{path}:"), str(info.value)
    assert reason in str(info.value)


@pytest.mark.unit
@pytest.mark.parametrize(("doc", "path", "reason"), BAD[:3] + BAD[-4:])
def test_bad_files_exit_2_from_the_cli(tmp_path, doc, path, reason):
    file = tmp_path / "links.json"
    file.write_text(json.dumps(doc))
    result = CliRunner().invoke(main, ["apply", str(file), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert f"{path}:" in result.output and reason in result.output


@pytest.mark.unit
@pytest.mark.parametrize(("text", "reason"), [
    ("{not json", "not valid JSON"), ("[]", "top level must be a JSON object"),
    ('{"foo": 1}', "neither a thesis file"),
])
def test_unusable_documents(tmp_path, text, reason):
    file = tmp_path / "links.json"
    file.write_text(text)
    result = CliRunner().invoke(main, ["apply", str(file), "--dry-run"])
    assert result.exit_code == 2 and reason in result.output


@pytest.mark.unit
def test_missing_file_is_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["apply", str(tmp_path / "none.json"), "--dry-run"])
    assert result.exit_code == 2 and "cannot read" in result.output


@pytest.mark.unit
def test_dry_run_names_each_filters_addresses_beside_its_u32_keys():
    """Client 3 of Fig. 4.6 (198.18.0.13) and the server (198.19.0.10), read back from the
    keys: 198.18.0.13 is 0xC612000D (198=0xC6, 18=0x12, 0, 13=0x0D)."""
    result = CliRunner().invoke(main, ["apply", str(FIG_4_6_TESTBED), "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "# R1-C3" in line and "u32" in line]
    assert len(lines) == 2
    forward, backward = sorted(lines, key=lambda line: "backward" in line)
    assert "'0xC612000D/0xffffffff+12'" in forward
    assert "(src 198.18.0.13, dst 198.19.0.10)" in forward
    assert "(src 198.19.0.10, dst 198.18.0.13)" in backward
    assert tcplan.describe_u32_key("0x0A000001/0xffffff00+12") == "0x0A000001/0xffffff00+12"
    assert tcplan.describe_u32_key("0x0A000001/0xffffffff+20") == "0x0A000001/0xffffffff+20"
