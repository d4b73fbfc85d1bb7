"""A lab over two hosts emulated on this machine (issue #16): Swarm places the node
parents, a VXLAN tunnel joins the hosts' main bridges, a cross-host link is flows on
both hosts. Marked `multihost` (and `system`); run with `scripts/test multihost`, not in
`make test`: it starts two Docker engines and loads a 542 MB image into each."""

from __future__ import annotations

import json
import time

import emulated_hosts
import pytest

from nestednet import images
from nestednet.capabilities.hosts import host_checks
from nestednet.errors import UsageError
from nestednet.lab import multihost as mh
from nestednet.model import placement as pl
from nestednet.model import topology as topo
from nestednet.model.addressing import AddressPlan
from nestednet.model.link_properties import parse_properties
from nestednet.model.shaping_policy import RATE_ONLY, ShapingPolicy
from nestednet.model.tunnels import DataPlane

pytestmark = [pytest.mark.system, pytest.mark.multihost]

LAB = "mhlab"
E = topo.Endpoint


@pytest.fixture(scope="module")
def hosts():
    emulated = emulated_hosts.start(f"nestednet-emu-{images.IMAGE_TAG}")
    try:
        yield emulated
    finally:
        emulated.close()


def ping(inner, address: str, count: int = 3, iphy: str = "iphy1") -> int:
    """Replies received from ``address`` by one iPHY of a node (its inner engine)."""
    result = inner.containers.get(iphy).exec_run(
        ["ping", "-c", str(count), "-W", "1", "-i", "0.3", address])
    for line in result.output.decode().splitlines():
        if "received" in line:
            return int(line.split(",")[1].split()[0])
    return 0


def test_doctor_hosts_passes_on_the_emulated_hosts(hosts):
    for name, host in zip(hosts.names, hosts.hostset.hosts, strict=True):
        handle = hosts.handles[name]
        described = pl.Host(name, host.address, f"unix://{handle.state_here}/docker.sock",
                            f"unix:{handle.state_here}/ovs/db.sock")
        checks = host_checks(described, images.DIND_IMAGE)
        assert [c.name for c in checks if not c.ok] == [], checks
        print(*(f"{c.name}: {c.detail}" for c in checks), sep="\n")


def test_cross_host_link_add_pings_del_stops_and_delete_leaves_nothing(hosts):
    shape = topo.Shape(3, 2)
    placement = pl.place(shape, hosts.hostset, "spread")
    assert placement == {1: hosts.names[0], 2: hosts.names[1], 3: hosts.names[0]}
    plan = AddressPlan.for_shape(shape)
    dp = DataPlane.of(LAB, plan, hosts.hostset, placement)
    timings: dict[str, float] = dict(hosts.timings)
    archive = images.image_archive(hosts.client, images.COMPONENT_IMAGE, kind="emulated")
    inners = {}
    try:
        t0 = time.monotonic()
        mh.make_networks(LAB, dp, hosts.handles)
        for node, host in placement.items():
            mh.parent_service(hosts.manager, LAB, node, hosts.handles[host], images.DIND_IMAGE)
        pids = {node: mh.wait_parent(LAB, node, hosts.handles[host])
                for node, host in placement.items()}
        timings["parents_ready_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        for node, host in placement.items():
            inner = inners[node] = mh.inner_engine(LAB, node, hosts.handles[host])
            with open(archive, "rb") as tar:
                inner.images.load(tar)
            children = mh.start_iphys(inner, LAB, node, shape.iphys, images.COMPONENT_IMAGE)
            machine_pids = mh.netlink.host_pids(pids[node], list(children.values()))
            for iphy, pid in children.items():
                mh.wire_iphy(LAB, dp, hosts.handles[host], node, iphy, machine_pids[pid])
        timings["children_wired_s"] = time.monotonic() - t0

        both = sorted(hosts.names[:2])
        n2_1 = str(plan.inter_address(2, 1).ip)
        n2_2 = str(plan.inter_address(2, 2).ip)
        n3_2 = str(plan.inter_address(3, 2).ip)
        assert ping(inners[1], n2_1, 2) == 0, "no link yet: the secure bridges must drop"

        assert mh.link_add(LAB, dp, hosts.handles, E(1, 1), E(2, 1)) == both
        assert ping(inners[1], n2_1) == 3
        rtt = _rtt(inners[1], n2_1)
        # A second link through the same tunnel, told apart by its tag (n2's slot 2).
        assert mh.link_add(LAB, dp, hosts.handles, E(3, 1), E(2, 2)) == both
        assert ping(inners[3], n2_2) == 3
        assert ping(inners[1], n2_2, 2) == 0, "n1:iphy1 is linked to n2:iphy1 only"
        assert mh.current_links(LAB, dp, hosts.handles.values()) == [
            (E(1, 1), E(2, 1)), (E(2, 2), E(3, 1))]
        with pytest.raises(UsageError):  # Algorithm 1 across hosts: n2:iphy1 is taken
            mh.link_add(LAB, dp, hosts.handles, E(3, 2), E(2, 1))

        assert mh.link_del(LAB, dp, hosts.handles, E(1, 1), E(2, 1)) == both
        assert ping(inners[1], n2_1, 2) == 0
        assert ping(inners[3], n2_2) == 3, "deleting one link leaves the other"
        mh.link_del(LAB, dp, hosts.handles, E(3, 1), E(2, 2))
        assert mh.links(LAB, hosts.handles.values()) == set()

        assert mh.link_add(LAB, dp, hosts.handles, E(1, 2), E(3, 2)) == [hosts.names[0]]
        assert ping(inners[1], n3_2, iphy="iphy2") == 3
        same_rtt = _rtt(inners[1], n3_2, "iphy2")

        # TCP too: through the tunnel (offloads on, userspace TSO) and on one host.
        assert mh.link_add(LAB, dp, hosts.handles, E(1, 1), E(2, 1)) == both
        cross_bps = _iperf(inners[2], inners[1], n2_1, "iphy1")
        same_bps = _iperf(inners[3], inners[1], n3_2, "iphy2")
        assert cross_bps > 0 and same_bps > 0

        # --rate 20Mbit on a cross-host link: shaped on each receiving host's port.
        mh.link_del(LAB, dp, hosts.handles, E(1, 1), E(2, 1))
        rate = parse_properties({"rate": "20Mbit"})
        assert mh.shape_link(LAB, dp, hosts.handles, E(1, 1), E(2, 1), rate,
                             ShapingPolicy.choose(RATE_ONLY, False)) == [
            f"{hosts.names[1]}:{LAB}-2x1", f"{hosts.names[0]}:{LAB}-1x1"]
        mh.link_add(LAB, dp, hosts.handles, E(1, 1), E(2, 1))
        shaped_bps = _iperf(inners[2], inners[1], n2_1, "iphy1")
        assert abs(shaped_bps - 20e6) <= 0.1 * 20e6, shaped_bps
        print("multihost timings", json.dumps({k: round(v, 1) for k, v in timings.items()}),
              f"\ncross-host {rtt}\nsame-host {same_rtt}\niperf3 3 s: cross-host "
              f"{cross_bps / 1e6:.0f} Mbit/s, same-host {same_bps / 1e6:.0f} Mbit/s, "
              f"cross-host at --rate 20Mbit {shaped_bps / 1e6:.2f} Mbit/s")
    finally:
        archive.unlink(missing_ok=True)
        for inner in inners.values():
            inner.close()
        removed = mh.delete_lab(LAB, hosts.manager, hosts.handles.values())
        print("removed", removed)
    assert mh.leftovers(LAB, hosts.manager, hosts.handles.values()) == []


def _rtt(inner, address: str, iphy: str = "iphy1") -> str:
    out = inner.containers.get(iphy).exec_run(["ping", "-c", "10", "-i", "0.2", address])
    return out.output.decode().strip().splitlines()[-1]


def _iperf(server_inner, client_inner, address: str, iphy: str) -> float:
    """Received bits/s of a 3 s iperf3 from ``client_inner``'s iPHY to ``address``."""
    server = server_inner.containers.get(iphy)
    server.exec_run(["iperf3", "-s", "-1", "-B", address], detach=True)
    time.sleep(1)
    out = client_inner.containers.get(iphy).exec_run(
        ["timeout", "20", "iperf3", "-c", address, "-t", "3", "-J", "--connect-timeout", "3000"])
    try:
        return float(json.loads(out.output.decode())["end"]["sum_received"]["bits_per_second"])
    except (ValueError, KeyError):
        return 0.0
