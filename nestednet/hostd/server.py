"""The per-host helper: runs NestedNet's own adapters in its host's namespaces.

It runs in a container of the Swarm global service `nestednet hosts prepare` starts
(nestednet.hostd.service): the host's network namespace (so the "host side" of wiring
and tc is its own namespace), the host's /proc at ``proc`` (pids it is given are the
host's, as the host's engine reports them), the host's cgroup tree at ``cgroup`` and the
host's state directory (the parents' bind-mounted directories) at the same path as on
the host. It holds no Docker socket and starts nothing: it only does what a request
names, after nestednet.hostd.protocol checked it.

Coarse operations reuse the code the CLI machine runs for one-host labs: a node is
wired by nestednet.lab.wiring.wire_node here, with the OVSDB calls handed back to the
client (which reaches both switches over the network), and write-ahead kept by the
client recording every interface name before it asks (`Prerecorded`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import ssl
import threading
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


class Helper:
    """What the helper does for one request (no sockets: `serve` carries them)."""

    def __init__(self, state_dir: Path, proc: str = "/proc",
                 cgroup: str = "/sys/fs/cgroup") -> None:
        self.state_dir, self.proc, self.cgroup = state_dir, proc, cgroup
        netlink.set_proc_root(proc)

    def run(self, op: str, args: dict[str, Any]) -> Any:
        return getattr(self, "op_" + op.replace(".", "_"))(**args)

    # --- interfaces in the host's namespace ------------------------------------------

    def op_hello(self) -> dict:
        return {"version": p.VERSION, "hostname": socket.gethostname(),
                "state_dir": str(self.state_dir), "pid": os.getpid()}

    def op_link_exists(self, names: list[str]) -> dict[str, bool]:
        with netlink.route() as ipr:
            return {n: netlink.exists(ipr, n) for n in names}

    def op_link_vxlan(self, lab: str, name: str, vni: int, local: str, remote: str, port: int,
                      underlay: str | None, mtu: int | None, master: str | None) -> None:
        with netlink.route() as ipr:
            netlink.add_vxlan(ipr, name, vni=vni, local=local, remote=remote, port=port,
                              underlay=underlay, mtu=mtu)
            if master is None:
                netlink.up(ipr, name)
            else:
                netlink.configure(ipr, name, master=master)

    def op_link_bridge(self, lab: str, name: str) -> None:
        with netlink.route() as ipr:
            netlink.add_bridge(ipr, name)

    def op_link_list(self, lab: str) -> list[str]:
        with netlink.route() as ipr:
            names = [link.get_attr("IFLA_IFNAME") for link in ipr.get_links()]
        return sorted(n for n in names if n and n.startswith(f"{lab}-"))

    def op_link_delete(self, lab: str, names: list[str]) -> list[str]:
        with netlink.route() as ipr:
            return [n for n in names if netlink.delete(ipr, n)]

    # --- parents' state directories ---------------------------------------------------

    def op_state_mkdir(self, lab: str, name: str) -> None:
        (self.state_dir / name).mkdir(parents=False, exist_ok=False)

    def op_state_parent(self, lab: str, name: str) -> dict:
        state = self.state_dir / name
        failed = state / "failed"
        return {"ready": (state / "ready").exists(),
                "failed": failed.read_text().strip() if failed.exists() else None}

    def op_state_list(self, lab: str) -> list[str]:
        return sorted(d.name for d in self.state_dir.glob(f"{lab}-n*")
                      if d.is_dir() and p.PARENT_DIR.match(d.name))

    def op_state_remove(self, lab: str, names: list[str]) -> list[str]:
        removed = []
        for name in names:
            if (self.state_dir / name).exists():
                shutil.rmtree(self.state_dir / name, ignore_errors=True)
                removed.append(name)
        return removed

    # --- processes ----------------------------------------------------------------------

    def op_pids(self, parent: int, inner: list[int]) -> dict[str, int]:
        return {str(k): v for k, v in netlink.host_pids(parent, inner).items()}

    def op_memory(self, pid: int) -> dict | None:
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

    def op_tc(self, function: str, args: list) -> Any:
        """A nestednet.adapters.tc function in the host's namespace: the client's
        namespace argument is replaced by this one's (None)."""
        args = list(args)
        if function in ("apply", "build", "change_batch", "change"):
            if not args or not isinstance(args[0], list):
                raise p.ProtocolError(f"tc {function}: first argument must be a list of ops")
            args[0] = [TcOp(**op) for op in args[0]]
            namespace_at = 1
        else:
            namespace_at = 0
        if len(args) <= namespace_at:
            raise p.ProtocolError(f"tc {function}: too few arguments")
        args[namespace_at] = None
        return getattr(tc, function)(*args)


# --- connections ------------------------------------------------------------------------


def error_of(exc: BaseException) -> dict:
    if isinstance(exc, p.ProtocolError):
        return p.failure("protocol", str(exc))
    if isinstance(exc, UsageError):
        return p.failure("usage", str(exc))
    if isinstance(exc, EnvironmentProblem):
        return p.failure("environment", str(exc))
    if isinstance(exc, NetlinkError):
        return p.failure("netlink", f"netlink error {exc.code}: {exc}")
    if isinstance(exc, OSError):
        return p.failure("environment", str(exc))
    return p.failure("internal", f"{type(exc).__name__}: {exc}")


class Server:
    """Accepts clients on ``address``:``port`` (TLS with client certificates when
    ``context`` is given) and answers each connection's requests in order."""

    def __init__(self, helper: Helper, address: str, port: int,
                 context: ssl.SSLContext | None) -> None:
        self.helper, self.context = helper, context
        self.listener = socket.create_server((address, port), reuse_port=False, backlog=64)
        self.stopping = threading.Event()

    def serve_forever(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, peer = self.listener.accept()
            except OSError:
                if self.stopping.is_set():
                    return
                raise
            threading.Thread(target=self._connection, args=(conn, peer), daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        with contextlib.suppress(OSError):
            self.listener.close()

    def _connection(self, conn: socket.socket, peer: tuple) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.context is not None:
            conn.settimeout(10)
            try:
                conn = self.context.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                log.warning("refused %s: %s", peer[0], exc)
                with contextlib.suppress(OSError):
                    conn.close()
                return
            conn.settimeout(None)
        try:
            self._requests(conn)
        except (p.ProtocolError, OSError) as exc:
            log.warning("%s: %s", peer[0], exc)
            with contextlib.suppress(OSError):
                conn.sendall(p.encode(error_of(exc)))
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def _requests(self, conn: socket.socket) -> None:
        while True:
            message = p.read_frame(lambda n: recv_exact(conn, n))
            if message is None:
                return
            try:
                op, args = p.check_request(message)
            except p.ProtocolError as exc:
                conn.sendall(p.encode(error_of(exc)))
                continue
            if op == "forward":
                self._forward(conn, args["parent"], args["socket"])
                return
            if op == "routes":
                self._routes(conn, args["pids"])
                return
            conn.sendall(p.encode(self._answer(op, args)))

    def _answer(self, op: str, args: dict) -> dict:
        if op == "batch":
            results = []
            for i, inner in enumerate(args["requests"]):
                answered = self._answer(*p.check_request(inner, nested=True))
                if not answered["ok"]:
                    error = answered["error"]
                    return p.failure(error["kind"], f"batch request #{i} ({inner['op']}): "
                                                    f"{error['message']}")
                results.append(answered["result"])
            return p.answer(results)
        try:
            return p.answer(self.helper.run(op, args))
        except Exception as exc:  # every failure goes back to the client, located
            if not isinstance(exc, (p.ProtocolError, UsageError, EnvironmentProblem,
                                    NetlinkError, OSError)):
                log.exception("%s failed", op)
            return error_of(exc)

    def _forward(self, conn: socket.socket, parent: str, name: str) -> None:
        """The connection becomes a byte stream to one of a parent's unix sockets."""
        path = self.helper.state_dir / parent / name
        target = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            target.connect(str(path))
        except OSError as exc:
            target.close()
            conn.sendall(p.encode(p.failure("environment",
                                            f"cannot reach {parent}'s {path.name}: {exc}")))
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
                        conn.sendall(p.encode({"node": monitors[sock], "changes": changes}))
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
