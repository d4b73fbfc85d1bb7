"""Thin adapter over pyroute2: namespaces, veth pairs, addresses, offloads.

Two platform facts shape it (PLATFORM.md): with the userspace OVS datapath without
TSO, TCP over a veth stalls unless TX checksum offload is off on both ends, and a child container's
network namespace is reached through its *host* pid. Offloads are switched off with
pyroute2's ethtool ioctls while both ends are still in the host namespace (features
survive a move between namespaces), then each end moves to its namespace and is
renamed in the same request.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import TypeVar

from pyroute2 import IPRoute, NetlinkError, netns
from pyroute2.ethtool import Ethtool
from pyroute2.netlink.rtnl import RTMGRP_IPV4_ROUTE
from pyroute2.netlink.rtnl.marshal import MarshalRtnl

from nestednet.errors import EnvironmentProblem

T = TypeVar("T")

TX_CHECKSUM_FEATURES = ("tx-checksum-ip-generic", "tx-checksum-ipv4", "tx-checksum-ipv6",
                        "tx-checksum-sctp", "tx-checksum-fcoe-crc")


PROC = "/proc"
"""Where the pids this process is given are numbered: its own /proc, or (the per-host
helper, nestednet.hostd) the host's /proc bind-mounted into its container, whose pid
namespace is not the host's."""


def set_proc_root(path: str) -> None:
    """Read pids, their namespaces and per-namespace sysctls under ``path`` (the helper)."""
    global PROC
    PROC = path


def netns_path(pid: int) -> str:
    return f"{PROC}/{pid}/ns/net"


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0
MAIN_TABLE = 254


def in_namespace(namespace: str, action: Callable[[], T]) -> T:
    """Run ``action`` in network namespace ``namespace`` (a name or a /proc path).

    setns() moves only the calling thread, so a short-lived thread enters the
    namespace, runs ``action`` and dies; sockets it opens stay in that namespace and
    /proc/sys it writes is that namespace's. pyroute2's netns= forks the whole
    process per socket instead, which cost far more on a busy 2-core host when a lab
    opens dozens of them.
    """
    path = namespace if namespace.startswith("/") else f"/run/netns/{namespace}"
    result: dict = {}

    def enter() -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns {path}: {os.strerror(err)}")
            finally:
                os.close(fd)
        except OSError as exc:
            result["enter_error"] = exc
            return
        try:
            result["value"] = action()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=enter, name="nestednet-setns")
    thread.start()
    thread.join()
    if "enter_error" in result:
        raise EnvironmentProblem(f"cannot enter network namespace {namespace}: "
                                 f"{result['enter_error']}")
    if "error" in result:
        raise result["error"]
    return result["value"]


def _socket_in(namespace: str) -> int:
    """A rtnetlink socket bound in ``namespace``."""
    return in_namespace(namespace, lambda: socket.socket(
        socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_ROUTE).detach())


def write_sysctls(namespace: str | None, settings: dict[str, str]) -> None:
    """Set per-namespace sysctls (keys as under /proc/sys, e.g. net/ipv4/ip_forward) in
    ``namespace``, or in this process's own when None.

    pyroute2 has no sysctl call; /proc/sys seen from inside the namespace is the
    namespace's own, so writing there is the whole job.
    """
    def write() -> None:
        for key, value in settings.items():
            # /proc/sys/net is the namespace of the writing thread, whichever procfs it is
            # reached through (the helper's own /proc/sys is read-only in its container).
            Path(PROC, "sys", key).write_text(value)

    if namespace is None:
        write()
    else:
        in_namespace(namespace, write)


def route_monitor(namespace: str) -> socket.socket:
    """A netlink socket in ``namespace`` subscribed to its IPv4 route changes (read it
    with `route_changes`)."""
    def subscribe() -> socket.socket:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        sock.bind((0, RTMGRP_IPV4_ROUTE))
        return sock

    return in_namespace(namespace, subscribe)


class RouteSource:
    """Node ``node``'s route changes, from a netlink socket in the namespace of host
    process ``pid`` (what `run`'s route watch reads: ``fileno()``, ``read()``)."""

    def __init__(self, node: int, pid: int) -> None:
        self.node = node
        self.sock = route_monitor(netns_path(pid))

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list[tuple[int, dict]]:
        try:
            data = self.sock.recv(65536)
        except OSError:
            return []
        return [(self.node, change) for change in route_changes(data)]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def route_changes(data: bytes) -> list[dict]:
    """Main-table route messages in ``data``: {op: add|del, dst: "a.b.c.d/len", via, proto}."""
    out = []
    for msg in MarshalRtnl().parse(data):
        if msg.get("event") not in ("RTM_NEWROUTE", "RTM_DELROUTE") or \
                (msg.get_attr("RTA_TABLE") or msg["table"]) != MAIN_TABLE:
            continue
        out.append({"op": "add" if msg["event"] == "RTM_NEWROUTE" else "del",
                    "dst": f"{msg.get_attr('RTA_DST') or '0.0.0.0'}/{msg['dst_len']}",
                    "via": msg.get_attr("RTA_GATEWAY"), "proto": msg["proto"]})
    return out


@contextlib.contextmanager
def route(namespace: str | None = None) -> Iterator[IPRoute]:
    """An IPRoute in the host namespace, a named netns, or a /proc/PID/ns/net path."""
    ipr = IPRoute() if namespace is None else IPRoute(fileno=_socket_in(namespace))
    try:
        yield ipr
    finally:
        ipr.close()


def index(ipr: IPRoute, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise EnvironmentProblem(f"interface {ifname} not found")
    return found[0]


def exists(ipr: IPRoute, ifname: str) -> bool:
    return bool(ipr.link_lookup(ifname=ifname))


def tx_checksum_off(ifname: str) -> None:
    """`ethtool -K IF tx off`, through ioctls, in the calling thread's namespace."""
    tool = Ethtool()
    try:
        features = tool.get_features(ifname)
        for name in TX_CHECKSUM_FEATURES:
            feature = features.features.get(name)
            if feature is not None and feature.available:
                feature.enable = False
        tool.set_features(ifname, features)
    finally:
        tool.close()


Where = str | int | None
"""Where a veth end is made: None for the namespace of the IPRoute making it, a host pid
(that process's network namespace), or a named netns or a /proc/PID/ns/net path."""


def add_veth(ipr: IPRoute, a: str, b: str, *, offloads: bool = False,
             netns: str | None = None, a_in: Where = None, b_in: Where = None) -> None:
    """A veth pair a<->b made by ``ipr``, whose namespace is ``netns`` (None: the host
    namespace); each end is made directly in its own namespace (``a_in``, ``b_in``)
    under its final name.

    Made in place rather than moved afterwards: moving an interface to another
    namespace waits for an RCU grace period while holding the kernel's one rtnl lock,
    so every wiring on the machine queues behind every move (measured here on a busy
    machine: 53 ms per pair made in the host namespace and moved twice, 0.8 ms per pair
    made in place).

    TX checksum offload is switched off on both ends unless ``offloads``: a userspace
    OVS without TSO needs that for TCP to pass (nestednet.datapath.Datapath.veth_offloads).
    """
    fds: list[int] = []

    def placed(where: Where) -> dict:
        if where is None:
            return {}
        if isinstance(where, int):
            if PROC == "/proc":
                return {"net_ns_pid": where}
            # The kernel reads a net_ns_pid in the caller's pid namespace, which is not
            # the one these pids are numbered in (set_proc_root): name it by path.
            where = netns_path(where)
        path = where if where.startswith("/") else f"/run/netns/{where}"
        try:
            fds.append(os.open(path, os.O_RDONLY))
        except OSError as exc:
            raise EnvironmentProblem(f"cannot make veth {a}/{b}: network namespace {where} "
                                     f"is not there ({exc.strerror})") from exc
        return {"net_ns_fd": fds[-1]}

    try:
        ipr.link("add", ifname=a, kind="veth", **placed(a_in),
                 peer={"ifname": b, **placed(b_in)})
    except NetlinkError as exc:
        if exc.code == 17:  # EEXIST
            raise EnvironmentProblem(f"cannot create veth {a}/{b}: an interface with that "
                                     "name exists already (not made by this lab)") from exc
        raise
    finally:
        for fd in fds:
            os.close(fd)
    if not offloads:
        for name, where in ((a, a_in), (b, b_in)):
            # the ethtool ioctls act in the calling thread's namespace
            if where is None and netns is None:
                tx_checksum_off(name)
            else:
                space = netns if where is None else where
                in_namespace(netns_path(space) if isinstance(space, int) else space,
                             lambda name=name: tx_checksum_off(name))


def move(ipr: IPRoute, ifname: str, target: str | int, new_name: str | None = None) -> None:
    """Move ``ifname`` into a named netns (str) or a process's netns (host pid, int)."""
    spec: dict = {"index": index(ipr, ifname)}
    if isinstance(target, int):
        spec["net_ns_pid"] = target
    else:
        spec["net_ns_fd"] = target
    if new_name:
        spec["ifname"] = new_name
    ipr.link("set", **spec)


def set_link(ipr: IPRoute, ifname: str, **attrs: object) -> None:
    """One RTM_SETLINK naming ``ifname`` itself, so no lookup of its index comes first: a
    request through pyroute2 costs its caller about 1 ms of CPU, and wiring a node took
    about 120 of them (a third were lookups)."""
    try:
        ipr.link("set", ifname=ifname, **attrs)
    except NetlinkError as exc:
        if exc.code == 19:  # ENODEV
            raise EnvironmentProblem(f"interface {ifname} not found") from exc
        raise


def configure(ipr: IPRoute, ifname: str, address: IPv4Interface | None = None,
              master: str | None = None, mac: str | None = None,
              mtu: int | None = None) -> None:
    """Give ``ifname`` an address, a bridge master, a MAC and/or an MTU, and bring it up.
    The link's settings and its state go in one request: the links configured here
    (veths, VXLAN devices, bridges) take a MAC or MTU change up or down, so the order in
    which the kernel applies them does not matter."""
    if address is not None:
        ipr.addr("add", index=index(ipr, ifname), address=str(address.ip),
                 prefixlen=address.network.prefixlen)
    attrs: dict[str, object] = {"state": "up"}
    if mac is not None:
        attrs["address"] = mac
    if mtu is not None:
        attrs["mtu"] = mtu
    if master is not None:
        attrs["master"] = index(ipr, master)
    set_link(ipr, ifname, **attrs)


NUD_PERMANENT = 0x80


def add_neighbours(ipr: IPRoute, ifname: str,
                   entries: list[tuple[IPv4Address, str]]) -> None:
    """Permanent neighbour (ARP) entries on ``ifname``: (address, MAC) pairs, replacing
    whatever the kernel had for those addresses."""
    idx = index(ipr, ifname)
    for address, mac in entries:
        ipr.neigh("replace", dst=str(address), lladdr=mac, ifindex=idx, state=NUD_PERMANENT)


def up(ipr: IPRoute, ifname: str) -> None:
    set_link(ipr, ifname, state="up")


def port_up(ipr: IPRoute, ifname: str, master: str | None = None, *,
            namespace: str | None = None) -> None:
    """Bring up ``ifname``, an interface that is only a switch port (of an OVS bridge, or
    of the Linux bridge ``master``), with IPv6 off on it; ``namespace`` is where ``ipr``
    works (None: this process's own).

    A port needs no IPv6 of its own. A link-local address would make it speak in the
    emulated network (duplicate address detection, router solicitations, MLD reports)
    and cost address configuration work. Even without addresses, an IPv6 interface that
    is up gets a multicast route (ff00::/8, local table): with a thousand lab ports in
    one namespace, every route change made whoever dumps that namespace's routes read a
    thousand of them, and the host's ovs-vswitchd dumps them on each change it hears of
    (a 250 x 4 create's host switch CPU grew with the nodes already built).
    """
    try:
        write_sysctls(namespace, {f"net/ipv6/conf/{ifname}/disable_ipv6": "1"})
    except FileNotFoundError as exc:
        raise EnvironmentProblem(f"interface {ifname} not found") from exc
    attrs: dict[str, object] = {"state": "up"}
    if master is not None:
        attrs["master"] = index(ipr, master)
    set_link(ipr, ifname, **attrs)


def delete(ipr: IPRoute, ifname: str) -> bool:
    """Delete a link if it exists; True when something was deleted."""
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        return False
    try:
        ipr.link("del", index=found[0])
    except NetlinkError as exc:
        if exc.code != 19:  # ENODEV: gone meanwhile (its peer's namespace died)
            raise
        return False
    return True


def add_bridge(ipr: IPRoute, name: str, address: IPv4Interface | None = None) -> None:
    """A Linux bridge, up, with an address when given (the lab's control bridges: the
    CA's, inside the control namespace, and a bare one on every host of a multi-host lab)."""
    ipr.link("add", ifname=name, kind="bridge")
    configure(ipr, name, address)
    up(ipr, "lo")


def add_vxlan(ipr: IPRoute, name: str, *, vni: int, local: str, remote: str, port: int,
              underlay: str | None = None, mtu: int | None = None) -> None:
    """A unicast VXLAN device (kernel driver) to ``remote``, left down. Its UDP socket is
    opened in the namespace it is made in and stays there if the device is moved."""
    spec: dict = {"ifname": name, "kind": "vxlan", "vxlan_id": vni, "vxlan_group": remote,
                  "vxlan_local": local, "vxlan_port": port}
    if underlay is not None:
        spec["vxlan_link"] = index(ipr, underlay)
    if mtu is not None:
        spec["mtu"] = mtu
    ipr.link("add", **spec)


def source_address(ipr: IPRoute, destination: str) -> str:
    """The address this namespace sends from to reach ``destination`` (`ip route get`)."""
    try:
        routes = ipr.route("get", dst=destination)
    except NetlinkError as exc:
        raise EnvironmentProblem(f"no route to {destination}: {exc}") from exc
    source = routes[0].get_attr("RTA_PREFSRC") if routes else None
    if not source:
        raise EnvironmentProblem(f"no source address toward {destination}")
    return source


def create_netns(name: str) -> None:
    netns.create(name)


def remove_netns(name: str) -> bool:
    if name not in netns.listnetns():
        return False
    netns.remove(name)
    return True


def list_netns() -> list[str]:
    return list(netns.listnetns())


# --- finding a nested child's host pid --------------------------------------------


def _status(pid: str) -> tuple[int, list[int]] | None:
    try:
        text = Path(f"{PROC}/{pid}/status").read_text()
    except OSError:
        return None
    ppid, nspid = 0, []
    for line in text.splitlines():
        if line.startswith("PPid:"):
            ppid = int(line.split()[1])
        elif line.startswith("NSpid:"):
            nspid = [int(x) for x in line.split()[1:]]
    return ppid, nspid


def _below(pid: int) -> list[str]:
    """``pid`` and the processes below it, found through each thread's children file
    (Go daemons fork from any thread), so the cost follows the container's size, not
    the machine's: scanning all of /proc per call made every node's wiring, and `run`
    reading each GNAB, cost a pass over every process of every node (39 against 0.9 ms
    CPU a call with 844 processes, a 48 x 4 lab). Every process a
    container's PID namespace holds is below its init (the namespace's reaper). Without
    those files (a kernel without CONFIG_PROC_CHILDREN) every process is a candidate."""
    if not os.path.exists(f"{PROC}/{pid}/task/{pid}/children"):
        return [e for e in os.listdir(PROC) if e.isdigit()]
    found, todo = [], [str(pid)]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"{PROC}/{current}/task")
        except OSError:
            continue  # exited meanwhile
        for tid in tasks:
            try:
                with open(f"{PROC}/{current}/task/{tid}/children") as f:
                    todo.extend(f.read().split())
            except OSError:
                continue
    return found


def host_pids(parent_host_pid: int, inner_pids: list[int]) -> dict[int, int]:
    """Map pids seen in a container's PID namespace to host pids.

    An inner container's State.Pid is in its parent's PID namespace; the host pid is
    the descendant of the parent whose NSpid line has that value one level down.
    """
    procs: dict[int, tuple[int, list[int]]] = {}
    for entry in _below(parent_host_pid):
        info = _status(entry)
        if info is not None:
            procs[int(entry)] = info
    depth = len(procs.get(parent_host_pid, (0, [0, 0]))[1]) - 1

    def descends(pid: int) -> bool:
        seen = 0
        while pid > 1 and seen < 64:
            if pid == parent_host_pid:
                return True
            pid = procs.get(pid, (0, []))[0]
            seen += 1
        return False

    wanted = set(inner_pids)
    found: dict[int, int] = {}
    for pid, (_ppid, nspid) in procs.items():
        if len(nspid) > depth and nspid[depth] in wanted and descends(pid):
            found[nspid[depth]] = pid
    missing = wanted - found.keys()
    if missing:
        raise EnvironmentProblem(f"processes {sorted(missing)} not found below host pid "
                                 f"{parent_host_pid}")
    return found
