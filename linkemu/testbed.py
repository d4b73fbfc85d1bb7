"""The software testbed (thesis §4.8): the whole emulator on one machine.

    C1..Cn (netns <p>-c<i>) --- edge router (netns <p>-edge) ==trunk== <p>-cli
        [OVS bridge <p>-br, made a router by rest_router]  <p>-srv --- server (netns <p>-server)

Client i is 198.18.i.2/24 behind the edge router (198.18.i.1); the trunk is
198.18.0.0/24 (edge .2, router .1); the server side 198.19.0.0/24 (router .1,
server .2) - the benchmarking range, so nothing here can stand for a real host.
Every resource is recorded in ``<state dir>/testbed.json`` the moment it exists, so
`down` removes exactly what `up` made (also after a failed `up`), and nothing else.
Namespaces, veths and addresses through the netlink adapter; the bridge through OVSDB.
"""

from __future__ import annotations

import contextlib
import json
import time
import zlib
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

from linkemu import router, router_plan
from linkemu.model import EmulatedLinks, Emulator, Link, LinkShape, RouterSide
from nestednet.adapters import netlink
from nestednet.adapters.files import private_dir, write_private
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.nodes import is_root, ovs_datapath
from nestednet.errors import EnvironmentProblem, NestedNetError, UsageError

STATE_FILE = "testbed.json"
LINKS_FILE = "testbed-links.json"
MAX_CLIENTS = 200
OWNER_KEY = "org.nestednet.linkemu"
"""external_ids key on the bridge and ports the testbed makes: down deletes a bridge
only when it carries this mark."""
ROUTER_ID = "R1"
DEFAULT_RATE = "100Mbit"


@dataclass(frozen=True)
class Layout:
    """Names and addresses of one testbed; ``prefix`` starts every name it creates."""

    clients: int = 2
    prefix: str = "le"

    def __post_init__(self) -> None:
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise UsageError(f"--clients must be between 1 and {MAX_CLIENTS}, not {self.clients}")
        if not self.prefix or len(self.prefix) > 5 or not self.prefix.replace("-", "").isalnum():
            raise UsageError(f"prefix {self.prefix!r} must be 1-5 letters/digits (interface "
                             "names are limited to 15 characters)")

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    @property
    def client_port(self) -> str:
        return f"{self.prefix}-cli"

    @property
    def server_port(self) -> str:
        return f"{self.prefix}-srv"

    @property
    def edge_ns(self) -> str:
        return f"{self.prefix}-edge"

    @property
    def server_ns(self) -> str:
        return f"{self.prefix}-server"

    def client_ns(self, i: int) -> str:
        return f"{self.prefix}-c{i}"

    def namespaces(self) -> list[str]:
        return [self.edge_ns, self.server_ns,
                *(self.client_ns(i) for i in range(1, self.clients + 1))]

    @staticmethod
    def client_ip(i: int) -> IPv4Interface:
        return IPv4Interface(f"198.18.{i}.2/24")

    @staticmethod
    def edge_client_ip(i: int) -> IPv4Interface:
        return IPv4Interface(f"198.18.{i}.1/24")

    EDGE_TRUNK = IPv4Interface("198.18.0.2/24")
    ROUTER_CLIENT_SIDE = IPv4Interface("198.18.0.1/24")
    ROUTER_SERVER_SIDE = IPv4Interface("198.19.0.1/24")
    SERVER = IPv4Interface("198.19.0.2/24")

    def emulator(self) -> Emulator:
        return Emulator(bridge=self.bridge, client_port=self.client_port,
                        server_port=self.server_port,
                        client_side=RouterSide(self.ROUTER_CLIENT_SIDE, self.EDGE_TRUNK.ip),
                        server_side=RouterSide(self.ROUTER_SERVER_SIDE))

    def link_table(self, shape: LinkShape | None = None) -> EmulatedLinks:
        shape = shape or LinkShape(rate_bps=100_000_000)
        return EmulatedLinks(tuple(
            Link(ROUTER_ID, f"C{i}", self.client_ip(i).ip, self.SERVER.ip, shape, shape)
            for i in range(1, self.clients + 1)), self.emulator())

    def datapath_id(self) -> str:
        """Fixed, so it does not follow the ports' MACs while ports are being added."""
        return f"{zlib.crc32(self.bridge.encode()) | 0x1e << 32:016x}"


def links_document(layout: Layout) -> dict:
    """The testbed as a native links file (what `linkemu apply` reads)."""
    emulator = layout.emulator()
    assert emulator.client_side is not None and emulator.server_side is not None
    direction = {"rate": DEFAULT_RATE, "delay": "0ms", "jitter": "0ms", "loss": "0%"}
    return {
        "emulator": {
            "bridge": emulator.bridge, "client_port": emulator.client_port,
            "server_port": emulator.server_port,
            "client_side": router_plan.side_to_native(emulator.client_side),
            "server_side": router_plan.side_to_native(emulator.server_side),
        },
        "links": [{"router": ROUTER_ID, "client": f"C{i}",
                   "client_ip": str(layout.client_ip(i).ip), "server_ip": str(layout.SERVER.ip),
                   "forward": dict(direction), "backward": dict(direction)}
                  for i in range(1, layout.clients + 1)],
    }


# --- the record of what exists ----------------------------------------------------


class _Record:
    """testbed.json: the layout and every resource, appended as soon as it exists."""

    def __init__(self, directory: Path, layout: Layout | None = None) -> None:
        self.path = directory / STATE_FILE
        self.directory = directory
        if layout is not None:
            self.data: dict = {"prefix": layout.prefix, "clients": layout.clients,
                               "resources": []}
        else:
            self.data = json.loads(self.path.read_text())

    def add(self, kind: str, name: str) -> None:
        self.data["resources"].append({"kind": kind, "name": name})
        self.save()

    def save(self) -> None:
        private_dir(self.directory)
        write_private(self.path, json.dumps(self.data, indent=2))


# --- up ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Testbed:
    layout: Layout
    datapath: str
    links_file: Path
    router: router.RouterState
    plan: router_plan.RouterPlan
    timings: dict[str, float]

    def as_dict(self) -> dict:
        lay = self.layout
        return {
            "prefix": lay.prefix, "bridge": lay.bridge, "datapath": self.datapath,
            "client_port": lay.client_port, "server_port": lay.server_port,
            "edge_namespace": lay.edge_ns, "server_namespace": lay.server_ns,
            "server": str(lay.SERVER.ip),
            "clients": [{"name": f"C{i}", "namespace": lay.client_ns(i),
                         "address": str(lay.client_ip(i).ip)}
                        for i in range(1, lay.clients + 1)],
            "router": {"pid": self.router.pid, "dpid": self.router.dpid,
                       "rest": f"unix:{self.router.rest_socket}",
                       "openflow": self.router.controller, "plan": self.plan.as_dict()},
            "links_file": str(self.links_file), "timings_s": self.timings,
        }


def up(layout: Layout, *, directory: str | Path | None = None,
       start_timeout: float | None = None) -> Testbed:
    """Build the testbed; on any failure remove what was built and re-raise."""
    where = router.state_dir(directory)
    if not is_root():
        raise EnvironmentProblem("`linkemu testbed up` needs root (network namespaces, veths, "
                                 "Open vSwitch)", hint="run it with sudo")
    if (where / STATE_FILE).exists():
        raise EnvironmentProblem(f"a testbed is already recorded in {where / STATE_FILE}",
                                 hint="`linkemu testbed down` first")
    _preflight(layout)
    plan = router_plan.plan(layout.link_table())
    record = _Record(where, layout)
    record.save()
    timings: dict[str, float] = {}
    began = time.monotonic()
    try:
        for name in layout.namespaces():
            netlink.create_netns(name)
            record.add("netns", name)
        _build_links(layout, record)
        _configure_namespaces(layout)
        timings["namespaces"] = round(time.monotonic() - began, 3)
        datapath = ovs_datapath()
        step = time.monotonic()
        with Ovsdb() as db:
            marks = {OWNER_KEY: "testbed"}
            db.add_bridge(layout.bridge, datapath_type=datapath, external_ids=marks,
                          other_config={"datapath-id": layout.datapath_id()})
            record.add("bridge", layout.bridge)
            for port in (layout.client_port, layout.server_port):
                db.add_port(layout.bridge, port, external_ids=marks)
        timings["bridge"] = round(time.monotonic() - step, 3)
        step = time.monotonic()
        # Recorded once started: a failed start cleans up after itself, and a router
        # someone started earlier in this state dir must not be stopped by our rollback.
        state = router.start(layout.bridge, directory=where, timeout=start_timeout)
        record.add("router", "router")
        timings["router_start"] = round(time.monotonic() - step, 3)
        configured = router.configure(plan, where)
        timings["router_configure"] = configured["seconds"]
        if configured["routes_pending"]:
            raise EnvironmentProblem("the edge router did not answer the router's ARP for "
                                     + ", ".join(configured["routes_pending"]))
        links_file = where / LINKS_FILE
        record.add("file", str(links_file))
        links_file.write_text(json.dumps(links_document(layout), indent=2) + "\n")
    except BaseException as exc:
        with contextlib.suppress(NestedNetError, OSError):
            down(where)
        if isinstance(exc, NestedNetError) or not isinstance(exc, Exception):
            raise
        raise EnvironmentProblem(f"building the testbed failed ({type(exc).__name__}: {exc}); "
                                 "everything built so far was removed again") from exc
    timings["total"] = round(time.monotonic() - began, 3)
    return Testbed(layout, datapath, links_file, state, plan, timings)


def _preflight(layout: Layout) -> None:
    existing = netlink.list_netns()
    clashes = [f"network namespace {n}" for n in layout.namespaces() if n in existing]
    with netlink.route() as ipr:
        for name in host_link_names(layout):
            if netlink.exists(ipr, name):
                clashes.append(f"interface {name}")
    with Ovsdb() as db:
        if db.bridge_exists(layout.bridge):
            clashes.append(f"OVS bridge {layout.bridge}")
    if clashes:
        raise EnvironmentProblem("cannot build the testbed, these already exist: "
                                 + ", ".join(clashes),
                                 hint="`linkemu testbed down` removes a testbed recorded in "
                                      "the state dir; otherwise choose another --prefix")


def host_link_names(layout: Layout) -> list[str]:
    p = layout.prefix
    names = [layout.client_port, f"{p}-clip", layout.server_port, f"{p}-srvp"]
    for i in range(1, layout.clients + 1):
        names += [f"{p}-c{i}e", f"{p}-c{i}h"]
    return names


def _build_links(layout: Layout, record: _Record) -> None:
    """Create each veth pair on the host (TX checksum offload off on both ends, without
    which TCP stalls on the userspace datapath), then move its ends into namespaces."""
    p = layout.prefix
    pairs = [(layout.client_port, f"{p}-clip", None, layout.edge_ns, "trunk"),
             (layout.server_port, f"{p}-srvp", None, layout.server_ns, "eth0")]
    for i in range(1, layout.clients + 1):
        pairs.append((f"{p}-c{i}e", f"{p}-c{i}h", (layout.edge_ns, f"c{i}"),
                      layout.client_ns(i), "eth0"))
    with netlink.route() as ipr:
        for a, b, a_dest, b_ns, b_name in pairs:
            netlink.add_veth(ipr, a, b)
            record.add("link", a)
            netlink.move(ipr, b, b_ns, b_name)
            if a_dest is None:
                netlink.up(ipr, a)
            else:
                netlink.move(ipr, a, *a_dest)


def _configure_namespaces(layout: Layout) -> None:
    def setup(ns_name: str, addresses: dict[str, IPv4Interface],
              gateway: IPv4Address | None) -> None:
        with netlink.route(ns_name) as ns:
            netlink.up(ns, "lo")
            for ifname, address in addresses.items():
                netlink.configure(ns, ifname, address)
            if gateway is not None:
                ns.route("add", dst="0.0.0.0/0", gateway=str(gateway))

    edge = {"trunk": layout.EDGE_TRUNK}
    for i in range(1, layout.clients + 1):
        edge[f"c{i}"] = layout.edge_client_ip(i)
        setup(layout.client_ns(i), {"eth0": layout.client_ip(i)}, layout.edge_client_ip(i).ip)
    setup(layout.edge_ns, edge, layout.ROUTER_CLIENT_SIDE.ip)
    setup(layout.server_ns, {"eth0": layout.SERVER}, layout.ROUTER_SERVER_SIDE.ip)
    for name in layout.namespaces():
        settings = {"net/ipv6/conf/all/disable_ipv6": "1",
                    "net/ipv6/conf/default/disable_ipv6": "1"}
        if name == layout.edge_ns:
            settings["net/ipv4/ip_forward"] = "1"
        netlink.write_sysctls(name, settings)


# --- down -------------------------------------------------------------------------


def down(directory: str | Path | None = None) -> list[str]:
    """Remove everything the recorded testbed made, newest first; idempotent."""
    where = router.state_dir(directory)
    if not (where / STATE_FILE).exists():
        return []
    record = _Record(where)
    removed: list[str] = []
    for item in reversed(record.data["resources"]):
        kind, name = item["kind"], item["name"]
        if kind == "file":
            with contextlib.suppress(FileNotFoundError):
                Path(name).unlink()
                removed.append(f"file {name}")
        elif kind == "router":
            result = router.stop(where)
            if result["stopped"]:
                removed.append("router process")
        elif kind == "bridge":
            with Ovsdb() as db:
                if db.bridges().get(name, {}).get(OWNER_KEY) == "testbed":
                    db.del_bridge(name)
                    removed.append(f"bridge {name}")
        elif kind == "link":
            with netlink.route() as ipr:
                if netlink.delete(ipr, name):
                    removed.append(f"interface {name}")
        elif kind == "netns" and netlink.remove_netns(name):
            removed.append(f"namespace {name}")
    record.path.unlink()
    return removed


def recorded(directory: str | Path | None = None) -> dict | None:
    """The record of the testbed in ``directory``, if one is up."""
    path = router.state_dir(directory) / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else None
