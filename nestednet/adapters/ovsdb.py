"""Thin adapter over OVSDB (python-ovs through ovsdbapp): bridges and ports.

The host's main bridge and each node's internal bridge (whose ovsdb socket the node
parent publishes) are driven through the same class, and so are the main bridges of a
lab's other hosts, over `tcp:` or `ssl:` remotes (python-ovs streams). Every bridge and
port we make carries our labels in external_ids, which is how cleanup finds exactly ours.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestednet.errors import EnvironmentProblem

if TYPE_CHECKING:  # the per-host helper imports this module without jsonschema
    from nestednet.model.placement import Tls

HOST_RUNDIR = "/var/run/openvswitch"
HOST_DB = f"unix:{HOST_RUNDIR}/db.sock"
HOST_VSWITCHD_PIDFILE = Path(HOST_RUNDIR) / "ovs-vswitchd.pid"
"""The host's ovs-vswitchd (scripts/setup starts it with ovs-ctl's default paths)."""

_CONNECT_LOCK = threading.Lock()


def _keep_python_signal_handling() -> None:
    """Stop python-ovs from taking over SIGINT/SIGTERM/SIGHUP/SIGALRM.

    On first use python-ovs (ovs.fatal_signal) installs handlers that re-raise the
    signal with default handling: Ctrl-C would kill us outright, skipping the
    rollback of a half-made lab and the CA's removal of its flows. Its hooks only
    unlink files of unix sockets a server binds; we only connect. So: mark it
    initialised. (Separately, the first thread other than the main one to open a
    python-ovs stream never finishes after returning; callers keep OVSDB work on
    the main thread or on threads that need not be joined.)
    """
    from ovs import fatal_signal

    fatal_signal._inited = True


def _import_poller_without_eventlet() -> None:
    """Import python-ovs's poller without eventlet, unless eventlet is loaded already.

    The poller imports eventlet, when it is installed (os-ken needs it for linkemu's
    router), only to ask whether `select` is monkey-patched; here it never is, and
    that import costs 0.2-0.25 CPU-s in every command that touches OVS (a quarter of
    a 6-node `create`'s own CPU time before it). A process that has loaded eventlet
    first (and may have patched `select`) gets the poller's own check unchanged."""
    import sys

    if "eventlet" in sys.modules or "ovs.poller" in sys.modules:
        return
    sys.modules["eventlet"] = None  # makes `from eventlet import ...` fail at once
    try:
        import ovs.poller  # noqa: F401
    finally:
        del sys.modules["eventlet"]


_import_poller_without_eventlet()
_keep_python_signal_handling()


TABLES = ("Open_vSwitch", "Bridge", "Port", "Interface", "Controller", "Mirror", "QoS",
          "Queue")
VOLATILE_COLUMNS = frozenset((
    "statistics", "status", "link_state", "link_resets", "link_speed", "duplex", "mtu",
    "admin_state", "ifindex", "mac_in_use", "lacp_current", "bfd_status", "cfm_fault",
    "cfm_fault_status", "cfm_flap_count", "cfm_health", "cfm_remote_mpids",
    "cfm_remote_opstate", "rstp_statistics", "rstp_status", "stp_status", "is_connected",
    "role"))
"""Columns ovs-vswitchd rewrites all the time (counters, link state). Not monitored: the
pure-Python JSON parser of python-ovs spent most of a lab create's own CPU time on them
on a host where many bridges and ports exist."""


def use_tls(tls: Tls) -> None:
    """Make ``tls`` the key, certificate and CA certificate of this process's `ssl:`
    OVSDB sessions. python-ovs keeps one SSL configuration per process (class-level in
    ovs.stream.SSLStream), which suits us: one hosts file per command."""
    for path in (tls.private_key, tls.certificate, tls.ca_cert):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise EnvironmentProblem(f"SSL file {path}: {exc.strerror}",
                                     hint="the hosts file's `ssl` names PEM files on this "
                                          "machine") from exc
    from ovs.stream import Stream

    Stream.ssl_set_private_key_file(tls.private_key)
    Stream.ssl_set_certificate_file(tls.certificate)
    Stream.ssl_set_ca_cert_file(tls.ca_cert)


def _schema_helper(remote: str, schema: dict | None):
    from ovs.db import idl as ovs_idl
    from ovsdbapp.backend.ovs_idl import idlutils

    helper: ovs_idl.SchemaHelper = (
        idlutils.get_schema_helper(remote, "Open_vSwitch") if schema is None
        else ovs_idl.SchemaHelper(schema_json=schema))
    for table in TABLES:
        columns = helper.schema_json["tables"][table]["columns"]
        helper.register_columns(table, [c for c in columns if c not in VOLATILE_COLUMNS])
    return helper


def json_parser() -> str:
    """Which JSON lexer python-ovs reads OVSDB messages with: "C" (its ovs._json
    extension, which scripts/setup links in from Debian's python3-openvswitch) or
    "PYTHON" (PyPI's wheel has no compiled parts). A create reads every node's switch
    through it: 26.5 against 33.9 CPU-s in the create process at 120 x 4
    (docs/benchmarks.md, session 28)."""
    import ovs.json

    return str(ovs.json.PARSER)


TRANSACTION_TIMEOUT = 60
"""Seconds a transaction may take, including ovs-vswitchd applying it. A bound for a stuck
switch, not a speed: seen over 10 s for deleting a bridge with kernel-datapath ports in the
software-emulated VM on a loaded machine (`scripts/test kernel-full`)."""


class _GroupCommit:
    """Group commit: a thread whose items find no transaction under way commits them
    along with whatever other threads queued meanwhile; those wait for that outcome.
    Measured on this machine's userspace switch with 1,000 ports: adding 4 ports took
    300 ms as 4 transactions and 55 ms as one (ovs-vswitchd CPU 390 against 138 ms)."""

    def __init__(self, commit: Callable[[list], None]) -> None:
        self.commit = commit
        self.cond = threading.Condition()
        self.queue: list[_Pending] = []
        self.busy = False

    def submit(self, items: list) -> None:
        mine = _Pending(items)
        with self.cond:
            self.queue.append(mine)
            while not mine.done:
                if self.busy:
                    self.cond.wait()
                    continue
                self.busy = True
                batch, self.queue = self.queue, []
                error: BaseException | None = None
                self.cond.release()
                try:
                    self.commit([item for pending in batch for item in pending.items])
                except BaseException as exc:
                    error = exc
                finally:
                    self.cond.acquire()
                    self.busy = False
                    for pending in batch:
                        pending.done, pending.error = True, error
                    self.cond.notify_all()
        if mine.error is not None:
            raise mine.error


@dataclass
class _Pending:
    items: list
    done: bool = False
    error: BaseException | None = None


class LazyOvsdb:
    """An `Ovsdb` that connects on first use. For handles on a lab's other hosts: a
    command may never need a host's database (a run reads and writes flows only), and
    the first non-main thread that opens a python-ovs stream never finishes (see
    _keep_python_signal_handling), so `nestednet run`'s worker thread must not open one
    it does not use."""

    def __init__(self, remote: str, tls: Tls | None = None) -> None:
        self.remote = remote
        self.tls = tls
        self._db: Ovsdb | None = None

    def __getattr__(self, name: str):
        if self._db is None:
            self._db = Ovsdb(self.remote, tls=self.tls)
        return getattr(self._db, name)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


class Ovsdb:
    """A connection to one ovsdb-server (Open_vSwitch database)."""

    def __init__(self, remote: str = HOST_DB, *, timeout: int = TRANSACTION_TIMEOUT,
                 tls: Tls | None = None, schema: dict | None = None) -> None:
        """Connect to ``remote`` (unix:PATH, tcp:IP:PORT, ssl:IP:PORT; `ssl:` needs
        ``tls``, this machine's side of the session).

        ``schema``: the database's schema (`schema` of a connection to a server of the
        same Open vSwitch build, e.g. another node of the lab: one node image), so it is
        not fetched again. Lexed in pure Python (see json_parser) it cost ~20 ms of CPU
        here, a third of opening a node's connection."""
        from ovsdbapp.backend.ovs_idl import connection
        from ovsdbapp.schema.open_vswitch import impl_idl

        self.remote = remote
        self._ports = _GroupCommit(self._add_ports_now)
        if remote.startswith("ssl:"):
            if tls is None:
                raise EnvironmentProblem(f"OVSDB remote {remote} is SSL but no key, "
                                         "certificate and CA certificate were given",
                                         hint="the hosts file's `ssl`")
            use_tls(tls)
        try:
            with _CONNECT_LOCK:
                helper = _schema_helper(remote, schema)
                self.schema: dict = helper.schema_json
                """The schema this connection was made with (see ``schema``)."""
                idl = connection.OvsdbIdl.from_server(remote, "Open_vSwitch", helper=helper)
                self._conn = connection.Connection(idl=idl, timeout=timeout)
                # ovsdbapp keeps the connection in a class attribute, so every instance
                # of one class shares the first server it met: one class per instance.
                api_class = type("OvsdbIdlOne", (impl_idl.OvsdbIdl,),
                                 {"_ovsdb_connection": None})
                self.api = api_class(self._conn)
        except Exception as exc:
            raise EnvironmentProblem(
                f"Open vSwitch database not reachable at {remote}: {exc}",
                hint="start Open vSwitch (scripts/setup does), then check `nestednet doctor`",
            ) from exc

    def close(self) -> None:
        self._conn.stop(timeout=5)

    def __enter__(self) -> Ovsdb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ovs_version(self) -> str:
        rows = self.api.db_list("Open_vSwitch", columns=["ovs_version"]).execute(check_error=True)
        return str(rows[0].get("ovs_version") or "unknown") if rows else "unknown"

    def switch_config(self) -> dict[str, str]:
        """The Open_vSwitch row's other_config (global ovs-vswitchd settings)."""
        rows = self.api.db_list("Open_vSwitch", columns=["other_config"]).execute(
            check_error=True)
        return dict(rows[0].get("other_config") or {}) if rows else {}

    def iface_types(self) -> list[str]:
        """Interface types this ovs-vswitchd supports (e.g. afxdp, internal, tap)."""
        rows = self.api.db_list("Open_vSwitch", columns=["iface_types"]).execute(
            check_error=True)
        return sorted(rows[0].get("iface_types") or []) if rows else []

    def add_bridge(self, name: str, *, datapath_type: str, external_ids: Mapping[str, str],
                   protocols: tuple[str, ...] = ("OpenFlow13",),
                   fail_mode: str = "secure",
                   other_config: Mapping[str, str] | None = None) -> None:
        """Create a bridge. fail_mode=secure: no NORMAL flow, so it forwards nothing until told.

        ``other_config`` may fix e.g. ``datapath-id``, which otherwise follows the ports'
        MAC addresses and so can change as ports are added.
        """
        with self.api.transaction(check_error=True) as txn:
            txn.add(self.api.add_br(name, may_exist=False, datapath_type=datapath_type))
            columns: list = [("external_ids", dict(external_ids)),
                             ("protocols", list(protocols)), ("fail_mode", fail_mode)]
            if other_config:
                columns.append(("other_config", dict(other_config)))
            txn.add(self.api.db_set("Bridge", name, *columns))

    def add_port(self, bridge: str, port: str, *, external_ids: Mapping[str, str],
                 ofport: int | None = None, iface_type: str | None = None) -> None:
        self.add_ports(bridge, [(port, {"external_ids": external_ids, "ofport": ofport,
                                        "iface_type": iface_type})])

    def add_ports(self, bridge: str, ports: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Several ports in one transaction: ovs-vswitchd reconfigures once for all of
        them, and every reconfiguration walks all the bridge's ports (a lab's main bridge
        holds 1,000 at 250 x 4). Calls made meanwhile from other threads (a create's node
        builders) join the next transaction (`_GroupCommit`); if it fails, each of them
        raises its error. Each port's keywords are `add_port`'s."""
        self._ports.submit([(bridge, port, kwargs) for port, kwargs in ports])

    def _add_ports_now(self, ports: list[tuple[str, str, Mapping[str, Any]]]) -> None:
        with self.api.transaction(check_error=True) as txn:
            for bridge, port, kwargs in ports:
                external_ids = dict(kwargs["external_ids"])
                txn.add(self.api.add_port(bridge, port, may_exist=False))
                txn.add(self.api.db_set("Port", port, ("external_ids", external_ids)))
                iface: list = [("external_ids", external_ids)]
                if kwargs.get("ofport") is not None:
                    iface.append(("ofport_request", kwargs["ofport"]))
                if kwargs.get("iface_type") is not None:
                    iface.append(("type", kwargs["iface_type"]))
                txn.add(self.api.db_set("Interface", port, *iface))

    def del_port(self, port: str) -> None:
        self.api.del_port(port, if_exists=True).execute(check_error=True)

    def del_bridge(self, name: str) -> None:
        self.api.del_br(name, if_exists=True).execute(check_error=True)

    def bridges(self) -> dict[str, dict[str, str]]:
        """Every bridge with its external_ids."""
        rows = self.api.db_list("Bridge", columns=["name", "external_ids"]).execute(
            check_error=True)
        return {r["name"]: dict(r["external_ids"]) for r in rows}

    def ports(self) -> dict[str, dict[str, str]]:
        rows = self.api.db_list("Port", columns=["name", "external_ids"]).execute(
            check_error=True)
        return {r["name"]: dict(r["external_ids"]) for r in rows}

    def bridge_exists(self, name: str) -> bool:
        return bool(self.api.br_exists(name).execute(check_error=True))

    def set_controller(self, bridge: str, *targets: str,
                       connection_mode: str = "out-of-band",
                       inactivity_probe: int | None = None) -> None:
        """Make ``targets`` (e.g. tcp:127.0.0.1:16653) the bridge's OpenFlow controllers.

        Out-of-band: the controller is reached over the host's own stack (loopback), so
        the in-band hidden flows, which would steer ARP on the bridge, are not wanted.
        ``inactivity_probe`` (ms; 0: never) overrides OVS's 5 s: a passive listener's
        sessions are closed when an echo request goes unanswered for that long.
        """
        extra = {} if inactivity_probe is None else {"inactivity_probe": inactivity_probe}
        with self.api.transaction(check_error=True) as txn:
            controllers = [txn.add(self.api.db_create("Controller", target=target,
                                                      connection_mode=connection_mode,
                                                      **extra))
                           for target in targets]
            txn.add(self.api.db_set("Bridge", bridge, ("controller", controllers)))

    def del_controller(self, bridge: str) -> None:
        self.api.del_controller(bridge).execute(check_error=True)

    def controllers(self, bridge: str) -> list[str]:
        return list(self.api.get_controller(bridge).execute(check_error=True))

    def protocols(self, bridge: str) -> list[str]:
        value = self.api.db_get("Bridge", bridge, "protocols").execute(check_error=True)
        return [value] if isinstance(value, str) else list(value)  # one-element sets come bare

    def set_protocols(self, bridge: str, protocols: list[str]) -> None:
        self.api.db_set("Bridge", bridge, ("protocols", list(protocols))).execute(
            check_error=True)

    def datapath_id(self, bridge: str) -> str:
        """The bridge's OpenFlow datapath id as 16 hex digits ("" before vswitchd set it)."""
        value = self.api.db_get("Bridge", bridge, "datapath_id").execute(check_error=True)
        if isinstance(value, list):
            value = value[0] if value else ""
        return str(value or "")

    def interface_error(self, iface: str) -> str:
        """vswitchd's reason for failing to create ``iface`` ("" when it is fine)."""
        value = self.api.db_get("Interface", iface, "error").execute(check_error=True)
        if isinstance(value, list):
            value = value[0] if value else ""
        return str(value or "")

    def ofport(self, iface: str) -> int:
        value = self.api.db_get("Interface", iface, "ofport").execute(check_error=True)
        if isinstance(value, list):
            value = value[0] if value else -1
        return int(value)
