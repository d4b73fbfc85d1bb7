"""The per-host helper: runs NestedNet's own adapters in its host's namespaces.

It runs in a container of the Swarm global service `nestednet hosts prepare` starts
(nestednet.hostd.service): the host's network namespace (so the "host side" of wiring
and tc is its own namespace), the host's /proc at ``proc`` (pids it is given are the
host's, as the host's engine reports them), the host's cgroup tree at ``cgroup`` and the
host's state directory (the parents' bind-mounted directories) at the same path as on
the host. It holds no Docker socket and starts nothing: it only does what a request
names, after nestednet.hostd.protocol checked its shape and `Helper.authorise` checked
what only the helper can know (docs/multihost.md section 5b):

- a lab belongs to the client that first made something of it here (its TLS
  certificate's subject; every client is one "insecure" client on a plain helper),
  recorded in ``<state_dir>/hostd/labs-<port>.json`` (0600) with the interface names made or
  recorded for it, until nothing of it is left here;
- a pid is a process of the named lab's node: a parent is the init of a pid namespace
  whose /nestednet is that node's state directory here (same device and inode), any
  other pid descends from such a parent;
- tc ports and a tunnel's master are the lab's recorded names, a tunnel's underlay the
  host's device holding the tunnel's local address.

Connections are bounded (`Limits`): how many, how many per peer still in their TLS
handshake, idle time, frame and batch sizes; a batch stops when its client goes.

Coarse operations reuse the code the CLI machine runs for one-host labs: a node is
wired by nestednet.lab.wiring.wire_node here, with the OVSDB calls handed back to the
client (which reaches both switches over the network), and write-ahead kept by the
client recording every interface name before it asks (`Prerecorded`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import socket
import ssl
import stat
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroute2 import NetlinkError

from nestednet.adapters import netlink, tc
from nestednet.adapters.cgroups import cgroup_memory
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.datapath import VethOffloads
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.hostd import protocol as p
from nestednet.hostd.streams import CHUNK, pump, readable, recv_exact
from nestednet.lab import wiring
from nestednet.lab.record import VETH
from nestednet.model import topology as topo
from nestednet.model.addressing import plan_from_dict
from nestednet.model.tcplan import TcOp

log = logging.getLogger("nestednet.hostd")


class Refused(Exception):
    """A request the client may not make: another client's lab, a pid or port that is
    not the lab's."""


INSECURE = "insecure"
"""The one identity every client has on a plain-TCP helper (`--insecure`)."""


def client_identity(conn: socket.socket) -> str:
    """Who is asking: the subject of the client's certificate (TLS), else INSECURE."""
    if not isinstance(conn, ssl.SSLSocket):
        return INSECURE
    cert = conn.getpeercert() or {}
    return ",".join(f"{k}={v}" for rdn in cert.get("subject", ()) for k, v in rdn) or "?"


class Labs:
    """Which client each lab here belongs to and the interface names made or recorded
    for it, kept in ``path`` (0600 in a 0700 directory) across helper restarts. A lab's
    entry goes once nothing of it is left here (no names, no state directory)."""

    def __init__(self, path: Path | None, state_dir: Path) -> None:
        self.path, self.state_dir = path, state_dir
        self.lock = threading.RLock()
        self.labs: dict[str, dict] = {}
        if path is not None:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(path.parent, 0o700)
            with contextlib.suppress(FileNotFoundError):
                self.labs = json.loads(path.read_text())

    def _save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.labs, f)
        os.replace(tmp, self.path)

    def claim(self, lab: str, client: str) -> None:
        """Refused unless ``lab`` is ``client``'s or no one's (then it becomes theirs)."""
        with self.lock:
            entry = self.labs.get(lab)
            if entry is None:
                self.labs[lab] = {"owner": client, "names": []}
                self._save()
            elif entry["owner"] != client:
                raise Refused(f"lab {lab} on this host belongs to another client")

    def check(self, lab: str, client: str) -> None:
        """Refused if ``lab`` is another client's (nothing claimed)."""
        with self.lock:
            entry = self.labs.get(lab)
            if entry is not None and entry["owner"] != client:
                raise Refused(f"lab {lab} on this host belongs to another client")

    def names(self, lab: str) -> set[str]:
        with self.lock:
            return set(self.labs.get(lab, {}).get("names", []))

    def add(self, lab: str, names: list[str]) -> None:
        with self.lock:
            entry = self.labs[lab]
            entry["names"] = sorted(set(entry["names"]) | set(names))
            self._save()

    def discard(self, lab: str, names: list[str]) -> None:
        with self.lock:
            entry = self.labs.get(lab)
            if entry is not None:
                entry["names"] = sorted(set(entry["names"]) - set(names))
                self._save()

    def settle(self, lab: str) -> None:
        """Forget ``lab`` when nothing of it is left here (another client may then use
        the name)."""
        with self.lock:
            entry = self.labs.get(lab)
            if entry is None or entry["names"] or any(
                    p.PARENT_DIR.fullmatch(d.name) for d in self.state_dir.glob(f"{lab}-n*")):
                return
            del self.labs[lab]
            self._save()


CLAIMING = ("link.vxlan", "link.bridge", "link.delete", "state.mkdir", "state.parent",
            "state.remove", "pids", "memory", "wire.node", "wire.component", "tc", "forward",
            "routes")
"""Operations that act on a lab: the lab must be the client's, or no one's (then it
becomes theirs until nothing of it is left). `link.list` and `state.list` only read
names, and are refused for another client's lab."""


def _nspid(proc: str, pid: int) -> tuple[int, list[int]]:
    """(PPid, NSpid) of ``pid`` under ``proc``."""
    ppid, nspid = 0, []
    with open(f"{proc}/{pid}/status") as f:
        for line in f:
            if line.startswith("PPid:"):
                ppid = int(line.split()[1])
            elif line.startswith("NSpid:"):
                nspid = [int(x) for x in line.split()[1:]]
    return ppid, nspid


class Prerecorded:
    """Wiring's lab record, here: every name it would record must already be in the
    CLI's record (sent with the request), so nothing is made that `delete` cannot find."""

    def __init__(self, names: list[str]) -> None:
        self.names = set(names)

    def add(self, kind: str, name: str, where: str = "host") -> None:
        if kind != VETH or name not in self.names:
            raise EnvironmentProblem(f"wiring would make {kind} {name}, which the client "
                                     "did not record first")


class Deferred:
    """A switch whose calls are collected and handed back: the client applies them over
    its own OVSDB sessions (the node's, forwarded; the host's, over the network)."""

    def __init__(self, target: str, calls: list) -> None:
        self.target, self.calls = target, calls

    def __getattr__(self, method: str):
        if method not in p.SWITCH_CALLS[self.target]:
            raise AttributeError(method)
        return lambda *args, **kwargs: self.calls.append([self.target, method, list(args),
                                                          kwargs])

    def add_ports(self, bridge: str, ports: list[tuple[str, dict]]) -> None:
        """One `add_port` call each, as the protocol has them; the client makes a run
        of them one transaction again (nestednet.lab.multihost.apply_switch_calls)."""
        for port, kwargs in ports:
            self.calls.append([self.target, "add_port", [bridge, port], dict(kwargs)])


TC_PORT_LISTS = {"disable_offloads": 1, "check_ports": 1, "apply": 2, "build": 2,
                 "port_indexes": 1, "remove_trees": 1, "read": 1, "snapshot": 1}
"""Where each tc function takes its list of ports (after the namespace is replaced)."""
TC_WITH_OPS = ("apply", "build", "change_batch", "change")
TC_OURS = {"check_ports": 1, "build": 2}
"""Where a tc function takes the ports whose trees the caller recorded as its own (after
the ops, if any): the lab's on every host; the helper keeps those that are this
host's."""


class Helper:
    """What the helper does for one request (no sockets: `Server` carries them)."""

    def __init__(self, state_dir: Path, proc: str = "/proc",
                 cgroup: str = "/sys/fs/cgroup", labs_file: Path | None = None) -> None:
        self.state_dir, self.proc, self.cgroup = state_dir, proc, cgroup
        self.labs = Labs(labs_file, state_dir)
        self.indexes: dict[str, int] = {}
        netlink.set_proc_root(proc)

    def run(self, op: str, args: dict[str, Any], client: str = INSECURE) -> Any:
        self.authorise(op, args, client)
        try:
            return getattr(self, "op_" + op.replace(".", "_"))(**args)
        finally:
            if op in CLAIMING:
                self.labs.settle(args["lab"])

    # --- authorisation -------------------------------------------------------------------

    def authorise(self, op: str, args: dict[str, Any], client: str) -> None:
        """Refused unless the request stays within a lab of ``client``'s."""
        lab = args.get("lab")
        if lab is None:
            return
        if op in CLAIMING:
            self.labs.claim(lab, client)
        else:
            self.labs.check(lab, client)
        if op in ("pids", "memory", "wire.node", "wire.component"):
            pid = args.get("parent", args.get("pid", args.get("parent_pid")))
            self.check_parent(lab, args["node"], pid)
        elif op == "routes":
            for node, pid in args["pids"].items():
                self.check_descendant(lab, int(node), pid)
        elif op == "link.vxlan":
            if args["master"] is not None and args["master"] not in self.labs.names(lab):
                raise Refused(f"link.vxlan: master {args['master']} is not one of lab "
                              f"{lab}'s interfaces here")
            if args["underlay"] is not None:
                self.check_underlay(args["underlay"], args["local"])
        elif op == "tc":
            self.check_tc(lab, args["function"], args["args"])

    def check_parent(self, lab: str, node: int, pid: int) -> None:
        """``pid`` is node ``node``'s parent of ``lab`` here: the init of its pid
        namespace, whose /nestednet is the node's state directory."""
        if not self._is_parent(lab, node, pid):
            raise Refused(f"pid {pid} is not the parent of lab {lab}'s node {node} on this "
                          "host")

    def _is_parent(self, lab: str, node: int, pid: int) -> bool:
        try:
            want = os.stat(self.state_dir / topo.parent_container(lab, node),
                           follow_symlinks=False)
            _ppid, nspid = _nspid(self.proc, pid)
            got = os.stat(f"{self.proc}/{pid}/root/nestednet")
        except (OSError, ValueError):
            return False
        return (bool(nspid) and nspid[-1] == 1 and stat.S_ISDIR(want.st_mode)
                and (got.st_dev, got.st_ino) == (want.st_dev, want.st_ino))

    def check_descendant(self, lab: str, node: int, pid: int) -> None:
        """``pid`` is node ``node``'s parent of ``lab`` or one of its descendants."""
        current = pid
        for _ in range(64):
            if current <= 1:
                break
            if self._is_parent(lab, node, current):
                return
            try:
                current = _nspid(self.proc, current)[0]
            except (OSError, ValueError):
                break
        raise Refused(f"pid {pid} is not a process of lab {lab}'s node {node} on this host")

    def check_underlay(self, underlay: str, local: str) -> None:
        """A tunnel's underlay is the host's device holding its local address."""
        with netlink.route() as ipr:
            found = ipr.link_lookup(ifname=underlay)
            addresses = ({a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(index=found[0])}
                         if found else set())
        if local not in addresses:
            raise Refused(f"link.vxlan: underlay {underlay} does not hold the tunnel's "
                          f"local address {local}")

    def check_tc(self, lab: str, function: str, args: list) -> None:
        """Every port a tc call names (its port list, its ops' ports, its indexes) is a
        recorded name of ``lab``; an index is the one this helper found for the port."""
        ours = self.labs.names(lab)
        ports: list[Any] = []
        at = TC_PORT_LISTS.get(function)
        if at is not None:
            if len(args) <= at or not isinstance(args[at], list):
                raise p.ProtocolError(f"tc {function}: argument {at} must be a list of ports")
            ports += args[at]
        if function in TC_WITH_OPS:
            if not args or not isinstance(args[0], list) or len(args[0]) > p.MAX_LIST or \
                    not all(isinstance(op, dict) for op in args[0]):
                raise p.ProtocolError(f"tc {function}: first argument must be a list of ops")
            ports += [op.get("port") for op in args[0]]
        if function == "change_batch":
            if len(args) < 3 or not isinstance(args[2], dict):
                raise p.ProtocolError("tc change_batch: third argument must be the ports' "
                                      "indexes")
            ports += list(args[2])
        foreign = sorted({str(port) for port in ports if port not in ours})
        if foreign:
            raise Refused(f"tc {function}: {', '.join(foreign[:5])} not among lab {lab}'s "
                          "interfaces here")
        if function == "change_batch":
            unknown = [port for port, index in args[2].items()
                       if self.indexes.get(port) != index]
            if unknown:
                found = tc.port_indexes(None, unknown)
                self.indexes.update(found)
                if any(found[port] != args[2][port] for port in unknown):
                    raise Refused("tc change_batch: an index is not its port's")

    # --- interfaces in the host's namespace ------------------------------------------

    def op_hello(self) -> dict:
        return {"version": p.VERSION, "hostname": socket.gethostname(),
                "state_dir": str(self.state_dir)}

    def op_link_exists(self, names: list[str]) -> dict[str, bool]:
        with netlink.route() as ipr:
            return {n: netlink.exists(ipr, n) for n in names}

    def op_link_vxlan(self, lab: str, name: str, vni: int, local: str, remote: str, port: int,
                      underlay: str | None, mtu: int | None, master: str | None) -> None:
        self.labs.add(lab, [name])
        with netlink.route() as ipr:
            netlink.add_vxlan(ipr, name, vni=vni, local=local, remote=remote, port=port,
                              underlay=underlay, mtu=mtu)
            if master is None:
                netlink.up(ipr, name)
            else:
                netlink.configure(ipr, name, master=master)

    def op_link_bridge(self, lab: str, name: str) -> None:
        self.labs.add(lab, [name])
        with netlink.route() as ipr:
            netlink.add_bridge(ipr, name)

    def op_link_list(self, lab: str) -> list[str]:
        with netlink.route() as ipr:
            names = [link.get_attr("IFLA_IFNAME") for link in ipr.get_links()]
        return sorted(n for n in names if n and n.startswith(f"{lab}-"))

    def op_link_delete(self, lab: str, names: list[str]) -> list[str]:
        with netlink.route() as ipr:
            deleted = [n for n in names if netlink.delete(ipr, n)]
        self.labs.discard(lab, names)
        return deleted

    # --- parents' state directories ---------------------------------------------------

    def op_state_mkdir(self, lab: str, name: str) -> None:
        (self.state_dir / name).mkdir(mode=0o700, parents=False, exist_ok=False)

    def op_state_parent(self, lab: str, name: str) -> dict:
        """A parent writes its directory: nothing there is followed (O_NOFOLLOW, opened
        relative to the directory, itself opened without following)."""
        try:
            fd = os.open(self.state_dir / name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return {"ready": False, "failed": None}
        try:
            ready = _lexists(fd, "ready")
            failed = None
            with contextlib.suppress(FileNotFoundError):
                f = os.open("failed", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
                try:
                    failed = os.read(f, 4096).decode(errors="replace").strip()
                finally:
                    os.close(f)
        finally:
            os.close(fd)
        return {"ready": ready, "failed": failed}

    def op_state_list(self, lab: str) -> list[str]:
        return sorted(d.name for d in self.state_dir.glob(f"{lab}-n*")
                      if d.is_dir() and not d.is_symlink() and p.PARENT_DIR.fullmatch(d.name))

    def op_state_remove(self, lab: str, names: list[str]) -> list[str]:
        removed = []
        for name in names:
            if os.path.lexists(self.state_dir / name):
                shutil.rmtree(self.state_dir / name, ignore_errors=True)
                removed.append(name)
        return removed

    # --- processes ----------------------------------------------------------------------

    def op_pids(self, lab: str, node: int, parent: int, inner: list[int]) -> dict[str, int]:
        return {str(k): v for k, v in netlink.host_pids(parent, inner).items()}

    def op_memory(self, lab: str, node: int, pid: int) -> dict | None:
        return cgroup_memory(pid, self.proc, self.cgroup)

    def op_qdiscs(self) -> dict[str, bool]:
        """The qdisc kinds this host's kernel has: netem decides whether its ports can
        take delay, jitter and loss (probed once per helper, as once per CLI process)."""
        return available_qdiscs()

    # --- wiring -------------------------------------------------------------------------

    def _handles(self, lab: str, node: int, parent_pid: int, shape: list[int], plan: dict,
                 offloads: dict, where: str, inter_mtu: int | None, control_mtu: int | None,
                 recorded: list[str], calls: list) -> wiring.NodeHandles:
        if len(shape) != 2:
            raise p.ProtocolError("shape must be [nodes, iphys]")
        addresses = plan_from_dict(topo.Shape(*shape), plan)
        self.labs.add(lab, recorded)
        return wiring.NodeHandles(
            lab, node, parent_pid, Deferred("node", calls), Deferred("host", calls), addresses,
            Prerecorded(recorded), VethOffloads(main=bool(offloads.get("main")),
                                                nodes=bool(offloads.get("nodes"))),
            host_netns=None, where=where, control_on_host=True, inter_mtu=inter_mtu,
            control_mtu=control_mtu)

    def op_wire_node(self, lab: str, node: int, parent_pid: int, children: dict[str, int],
                     shape: list[int], plan: dict, datapath: str, offloads: dict, where: str,
                     inter_mtu: int | None, control_mtu: int | None,
                     recorded: list[str]) -> dict:
        """A node wired as nestednet.lab.wiring.wire_node wires one; the OVSDB calls it
        made, for the client to apply in order."""
        calls: list = []
        h = self._handles(lab, node, parent_pid, shape, plan, offloads, where, inter_mtu,
                          control_mtu, recorded, calls)
        wiring.wire_node(h, datapath, {int(k): v for k, v in children.items()})
        return {"ovs": calls}

    def op_wire_component(self, lab: str, node: int, parent_pid: int, component: int,
                          inner_pid: int, shape: list[int], plan: dict, offloads: dict,
                          where: str, inter_mtu: int | None, control_mtu: int | None,
                          recorded: list[str]) -> dict:
        """A restarted component unwired and wired again (`swap --restart`)."""
        calls: list = []
        h = self._handles(lab, node, parent_pid, shape, plan, offloads, where, inter_mtu,
                          control_mtu, recorded, calls)
        wiring.unwire_component(h, component)
        pid = netlink.host_pids(parent_pid, [inner_pid])[inner_pid]
        wiring.wire_component(h, component, pid)
        return {"ovs": calls}

    # --- shaping --------------------------------------------------------------------------

    def op_tc(self, lab: str, function: str, args: list) -> Any:
        """A nestednet.adapters.tc function in the host's namespace: the client's
        namespace argument is replaced by this one's (None)."""
        args = list(args)
        if function in TC_WITH_OPS:
            args[0] = [TcOp(**op) for op in args[0]]
            namespace_at = 1
        else:
            namespace_at = 0
        if len(args) <= namespace_at:
            raise p.ProtocolError(f"tc {function}: too few arguments")
        args[namespace_at] = None
        ours_at = TC_OURS.get(function)
        if ours_at is not None:
            ours_at += namespace_at + 1
            if len(args) > ours_at and isinstance(args[ours_at], list):
                mine = self.labs.names(lab)
                args[ours_at] = [port for port in args[ours_at] if port in mine]
        result = getattr(tc, function)(*args)
        if function in ("apply", "build", "port_indexes") and isinstance(result, dict):
            self.indexes.update(result)
        return result

    # --- unix sockets of a parent ----------------------------------------------------------

    def connect_socket(self, parent: str, name: str) -> socket.socket:
        """A connection to ``name`` (protocol.SOCKETS) in ``parent``'s directory, which
        the parent writes: the path is walked without following links, and the socket
        reached through a hard link of its inode in the helper's own directory (a unix
        socket cannot be connected relative to a directory)."""
        fd = os.open(self.state_dir / parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            *dirs, leaf = name.split("/")
            for part in dirs:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = inner
            if not stat.S_ISSOCK(os.stat(leaf, dir_fd=fd, follow_symlinks=False).st_mode):
                raise EnvironmentProblem(f"{parent}'s {name} is not a unix socket")
            private = self.private_dir()
            link = private / f"s{threading.get_ident()}-{time.monotonic_ns()}"
            os.link(leaf, link, src_dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)
        target = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            target.connect(str(link))
        except OSError:
            target.close()
            raise
        finally:
            link.unlink(missing_ok=True)
        return target

    def private_dir(self) -> Path:
        path = self.state_dir / "hostd" / "sockets"
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path


def _lexists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


# --- connections ------------------------------------------------------------------------


def error_of(exc: BaseException) -> dict:
    if isinstance(exc, p.ProtocolError):
        return p.failure("protocol", str(exc))
    if isinstance(exc, Refused):
        return p.failure("refused", str(exc))
    if isinstance(exc, UsageError):
        return p.failure("usage", str(exc))
    if isinstance(exc, EnvironmentProblem):
        return p.failure("environment", str(exc))
    if isinstance(exc, NetlinkError):
        return p.failure("netlink", f"netlink error {exc.code}: {exc}")
    if isinstance(exc, OSError):
        return p.failure("environment", str(exc))
    return p.failure("internal", f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class Limits:
    """What one helper gives its clients at most."""

    connections: int = 1024
    """Open connections in all (each a thread; a forward holds two sockets)."""
    per_peer: int = 256
    """Open connections from one address."""
    handshakes_per_peer: int = 16
    """Connections from one address still in their TLS handshake (unauthenticated)."""
    handshake_timeout: float = 10.0
    idle_timeout: float = 300.0
    """Seconds a connection may wait between requests (streams excepted: a forward or
    a route watch is idle as long as what it carries)."""
    linger_seconds: float = 2.0
    linger_bytes: int = 4 * 1024 * 1024
    """After refusing a frame it did not read (too long), the helper reads and drops what
    the client still sends, for at most this long and this much, before closing
    (`linger`)."""


def linger(conn: socket.socket, seconds: float, limit: int) -> None:
    """Close the sending side, then read and drop what the peer still sends (at most
    ``limit`` bytes, for at most ``seconds``) until it closes. Closing a socket with
    unread data resets the connection under a client still sending, and its answer,
    sent just before, can be lost with it (the likely cause of a refusal of a 16 MiB
    frame lost once in CI). A TLS socket's shutdown leaves the raw socket, whose bytes
    are only dropped."""
    deadline = time.monotonic() + seconds
    got = 0
    with contextlib.suppress(OSError, ValueError):
        conn.shutdown(socket.SHUT_WR)
        while got < limit and (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            data = conn.recv(CHUNK)
            if not data:
                return
            got += len(data)


TCP_ESTABLISHED = 1


def client_gone(conn: socket.socket) -> bool:
    """Whether the peer closed or reset the connection (its TCP state left
    ESTABLISHED): a batch stops then (TLS would hide the end behind a close_notify)."""
    try:
        info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)
    except OSError:
        return True
    return struct.unpack("B", info)[0] != TCP_ESTABLISHED


class Server:
    """Accepts clients on ``address``:``port`` (TLS with client certificates when
    ``context`` is given) and answers each connection's requests in order."""

    def __init__(self, helper: Helper, address: str, port: int,
                 context: ssl.SSLContext | None, limits: Limits | None = None) -> None:
        self.helper, self.context = helper, context
        self.limits = limits or Limits()
        self.listener = socket.create_server((address, port), reuse_port=False, backlog=128)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.open: dict[str, int] = {}
        self.handshaking: dict[str, int] = {}

    def serve_forever(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, peer = self.listener.accept()
            except OSError as exc:
                if self.stopping.is_set():
                    return
                log.warning("accept: %s", exc)
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.1)
                continue
            except Exception:  # the helper outlives any one connection
                log.exception("accept")
                continue
            self._admit(conn, peer[0])

    def _admit(self, conn: socket.socket, peer: str) -> None:
        limits = self.limits
        with self.lock:
            total = sum(self.open.values())
            full = (total >= limits.connections or self.open.get(peer, 0) >= limits.per_peer
                    or (self.context is not None
                        and self.handshaking.get(peer, 0) >= limits.handshakes_per_peer))
            if not full:
                self.open[peer] = self.open.get(peer, 0) + 1
                if self.context is not None:
                    self.handshaking[peer] = self.handshaking.get(peer, 0) + 1
        if full:
            with contextlib.suppress(OSError):
                conn.close()
            return
        try:
            threading.Thread(target=self._connection, args=(conn, peer), daemon=True).start()
        except Exception as exc:
            log.warning("%s: no thread for the connection: %s", peer, exc)
            self._handshake_done(peer)
            self._closed(peer)
            with contextlib.suppress(OSError):
                conn.close()

    def _handshake_done(self, peer: str) -> None:
        with self.lock:
            if self.context is not None and self.handshaking.get(peer, 0) > 0:
                self.handshaking[peer] -= 1
                if not self.handshaking[peer]:
                    del self.handshaking[peer]

    def _closed(self, peer: str) -> None:
        with self.lock:
            self.open[peer] -= 1
            if not self.open[peer]:
                del self.open[peer]

    def connections(self) -> int:
        with self.lock:
            return sum(self.open.values())

    def close(self) -> None:
        self.stopping.set()
        with contextlib.suppress(OSError):
            self.listener.close()

    def _connection(self, conn: socket.socket, peer: str) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.context is not None:
                conn.settimeout(self.limits.handshake_timeout)
                try:
                    conn = self.context.wrap_socket(conn, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    log.warning("refused %s: %s", peer, exc)
                    with contextlib.suppress(OSError):
                        conn.close()
                    return
                finally:
                    self._handshake_done(peer)
            conn.settimeout(self.limits.idle_timeout)
            self._requests(conn, client_identity(conn))
        except (p.ProtocolError, OSError) as exc:
            log.warning("%s: %s", peer, exc)
            with contextlib.suppress(OSError, p.ProtocolError):
                conn.sendall(p.encode(error_of(exc)))
                if isinstance(exc, p.ProtocolError):
                    linger(conn, self.limits.linger_seconds, self.limits.linger_bytes)
        except Exception:
            log.exception("%s: connection failed", peer)
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            self._closed(peer)

    def _requests(self, conn: socket.socket, client: str) -> None:
        while True:
            message = p.read_frame(lambda n: recv_exact(conn, n))
            if message is None:
                return
            try:
                op, args = p.check_request(message)
            except p.ProtocolError as exc:
                conn.sendall(p.encode(error_of(exc)))
                continue
            if op in p.STREAMS:
                try:
                    self.helper.authorise(op, args, client)
                except Refused as exc:
                    conn.sendall(p.encode(error_of(exc)))
                    continue
                finally:
                    self.helper.labs.settle(args["lab"])
                if op == "forward":
                    self._forward(conn, args["parent"], args["socket"])
                else:
                    self._routes(conn, args["pids"])
                return
            conn.sendall(p.encode(self._answer(op, args, client, conn), p.MAX_ANSWER))

    def _answer(self, op: str, args: dict, client: str, conn: socket.socket) -> dict:
        if op == "batch":
            results = []
            for i, inner in enumerate(args["requests"]):
                if client_gone(conn):
                    return p.failure("environment", f"batch stopped at request #{i}: the "
                                                    "client went")
                answered = self._answer(*p.check_request(inner, nested=True), client, conn)
                if not answered["ok"]:
                    error = answered["error"]
                    return p.failure(error["kind"], f"batch request #{i} ({inner['op']}): "
                                                    f"{error['message']}")
                results.append(answered["result"])
            return p.answer(results)
        try:
            return p.answer(self.helper.run(op, args, client))
        except Exception as exc:  # every failure goes back to the client, located
            if not isinstance(exc, (p.ProtocolError, Refused, UsageError, EnvironmentProblem,
                                    NetlinkError, OSError)):
                log.exception("%s failed", op)
            return error_of(exc)

    def _forward(self, conn: socket.socket, parent: str, name: str) -> None:
        """The connection becomes a byte stream to one of a parent's unix sockets."""
        try:
            target = self.helper.connect_socket(parent, name)
        except (OSError, EnvironmentProblem) as exc:
            conn.sendall(p.encode(p.failure("environment",
                                            f"cannot reach {parent}'s {name}: {exc}")))
            return
        conn.sendall(p.encode(p.answer(None)))
        pump(conn, target)

    def _routes(self, conn: socket.socket, pids: dict[str, int]) -> None:
        """Route changes in each node's GNAB namespace, a frame per read, until the
        client closes the connection."""
        monitors: dict[socket.socket, int] = {}
        try:
            try:
                for node, pid in pids.items():
                    monitors[netlink.route_monitor(netlink.netns_path(pid))] = int(node)
            except (EnvironmentProblem, OSError) as exc:
                conn.sendall(p.encode(error_of(exc)))
                return
            conn.sendall(p.encode(p.answer(None)))
            while True:
                ready = readable([conn, *monitors], 1.0)
                for sock in ready:
                    if sock is conn:
                        if not conn.recv(CHUNK):
                            return
                        continue
                    changes = netlink.route_changes(sock.recv(CHUNK))
                    if changes:
                        conn.sendall(p.encode({"node": monitors[sock], "changes": changes},
                                              p.MAX_ANSWER))
        except OSError:
            return
        finally:
            for sock in monitors:
                with contextlib.suppress(OSError):
                    sock.close()


def server_context(private_key: str, certificate: str, ca_cert: str) -> ssl.SSLContext:
    """TLS as the hosts' pssl: listeners do it: this host's key and certificate, and only
    clients whose certificate ``ca_cert`` signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certificate, private_key)
    context.load_verify_locations(ca_cert)
    context.verify_mode = ssl.CERT_REQUIRED
    return context
