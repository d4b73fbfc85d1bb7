"""The router runtime: the os-ken rest_router app as a background process, the emulator
bridge connected to it, and its addressing configured through REST.

`start` spawns os-ken's manager (through nestednet.adapters.os_ken_compat, so the shim is in
place) with OpenFlow and REST on unix sockets made 0600 (the router runs with umask
077): REST in the state directory (``rest.sock``, the directory root's alone: 0700),
OpenFlow in Open vSwitch's run directory (``linkemu-<hash of the state dir>.sock``:
ovs-vswitchd connects a bridge to a ``unix:`` controller only there). No other local
user can reach the router's API or pose as its switch, and no web page can send it a
request (there is no TCP port). It records what it started in
``<state dir>/router.json`` (0600) before anything else can fail, points the bridge at
it (OpenFlow 1.3, through OVSDB) and waits until REST answers and the bridge's datapath
has joined. `stop` undoes exactly that: it signals only the process it recorded
(checked against its command line, so a recycled pid is never hit) and removes only
the controller setting it made. rest_router learns the bridge's ports when the bridge
joins, so the router must be started after the ports exist; `status` says when ports
were added later.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from linkemu.router_api import RouterApi
from linkemu.router_plan import RouterPlan
from nestednet.adapters import os_ken_compat
from nestednet.adapters.files import open_private, private_dir, write_private
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.vm import in_full_kernel_vm
from nestednet.errors import EnvironmentProblem, NestedNetError, UsageError

DEFAULT_STATE_DIR = "/var/lib/nestednet/linkemu"
REST_SOCKET = "rest.sock"
OVS_RUNDIR = os.environ.get("OVS_RUNDIR", "/var/run/openvswitch")
"""Where ovs-vswitchd accepts ``unix:`` controllers ("due to possibility for remote
exploit", it refuses any other directory: seen in its log)."""


def ofp_socket_path(directory: Path) -> str:
    """The OpenFlow socket of the router whose state is in ``directory``."""
    digest = hashlib.sha256(str(directory).encode()).hexdigest()[:12]
    return f"{OVS_RUNDIR}/linkemu-{digest}.sock"
START_TIMEOUT = 60.0
"""Seconds to wait for the router to come up: ~1 s on a host. In the software-emulated
full-kernel VM, importing os-ken alone took 67 s, so there it is VM_START_TIMEOUT."""
VM_START_TIMEOUT = 600.0
UNIX_PATH_MAX = 107
STATE_FILE = "router.json"
LOG_FILE = "router.log"


def state_dir(path: str | Path | None = None) -> Path:
    """Where linkemu keeps what it started: ``path``, $LINKEMU_STATE_DIR or the default."""
    return Path(path or os.environ.get("LINKEMU_STATE_DIR") or DEFAULT_STATE_DIR)


@dataclass
class RouterState:
    """What `start` made, recorded so that `stop` undoes exactly that."""

    pid: int
    argv: list[str]
    bridge: str
    ofp_socket: str
    rest_socket: str
    log: str
    controller: str
    started_at: float
    dpid: str = ""
    previous_controllers: list[str] = field(default_factory=list)
    previous_protocols: list[str] | None = None
    ports_at_start: list[str] = field(default_factory=list)
    start_seconds: float | None = None
    configured: dict | None = None

    def api(self, timeout: float = 10.0) -> RouterApi:
        return RouterApi(self.rest_socket, timeout=timeout)


@dataclass(frozen=True)
class RouterStatus:
    running: bool
    healthy: bool
    problems: tuple[str, ...]
    state: RouterState | None
    router: dict | None = None
    routes_pending: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        s = self.state
        return {
            "running": self.running, "healthy": self.healthy, "problems": list(self.problems),
            "pid": s.pid if s else None, "bridge": s.bridge if s else None,
            "dpid": s.dpid if s else None,
            "openflow": s.controller if s else None,
            "rest": f"unix:{s.rest_socket}" if s else None,
            "log": s.log if s else None,
            "start_seconds": s.start_seconds if s else None,
            "router": self.router, "routes_pending": list(self.routes_pending),
        }


# --- state file -------------------------------------------------------------------


def load_state(directory: str | Path | None = None) -> RouterState | None:
    path = state_dir(directory) / STATE_FILE
    try:
        data = json.loads(path.read_text())
        return RouterState(**data)
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError, TypeError) as exc:
        raise EnvironmentProblem(f"router state {path} unreadable: {exc}",
                                 hint="inspect it; remove it if no router runs (a record "
                                      "of a router on TCP ports is an older linkemu's)"
                                 ) from exc


def _save_state(state: RouterState, directory: str | Path | None) -> None:
    path = private_dir(state_dir(directory)) / STATE_FILE
    write_private(path, json.dumps(asdict(state), indent=2))


def _drop_state(directory: str | Path | None) -> None:
    with contextlib.suppress(FileNotFoundError):
        (state_dir(directory) / STATE_FILE).unlink()


# --- process ----------------------------------------------------------------------


def process_alive(pid: int, argv: list[str]) -> bool:
    """Whether ``pid`` is still the process we started (same command line, not a zombie)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
        return False
    return [c.decode(errors="replace") for c in cmdline if c] == argv


def _log_tail(path: str, lines: int = 8) -> str:
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


# --- start / stop / status -------------------------------------------------------


def start(bridge: str, *, directory: str | Path | None = None,
          timeout: float | None = None) -> RouterState:
    """Run rest_router for ``bridge`` and wait until the bridge has joined it."""
    if timeout is None:
        timeout = VM_START_TIMEOUT if in_full_kernel_vm() else START_TIMEOUT
    existing = load_state(directory)
    if existing is not None:
        if process_alive(existing.pid, existing.argv):
            raise EnvironmentProblem(
                f"a router already runs (pid {existing.pid}, bridge {existing.bridge}, "
                f"REST unix:{existing.rest_socket})", hint="`linkemu router stop` first")
        stop(directory)  # a stale record: undo what it says (controller), then start afresh
    with Ovsdb() as db:
        if not db.bridge_exists(bridge):
            raise EnvironmentProblem(f"Open vSwitch bridge {bridge} does not exist",
                                     hint="`linkemu testbed up` builds one, or pass --bridge")
    directory_path = private_dir(state_dir(directory)).resolve()
    ofp_socket, rest_socket = ofp_socket_path(directory_path), str(directory_path / REST_SOCKET)
    if not os.path.isdir(OVS_RUNDIR):
        raise EnvironmentProblem(f"Open vSwitch's run directory {OVS_RUNDIR} does not exist",
                                 hint="set $OVS_RUNDIR to where ovs-vswitchd keeps its sockets")
    if len(rest_socket.encode()) > UNIX_PATH_MAX:
        raise UsageError(f"state directory {directory_path} is too long for a unix socket "
                         f"path ({UNIX_PATH_MAX} bytes)", hint="choose a shorter --state-dir")
    for path in (ofp_socket, rest_socket):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # left by a router that died (ours: the directory is root's)
    log = str(directory_path / LOG_FILE)
    argv = os_ken_compat.manager_command(ofp_socket=ofp_socket, rest_socket=rest_socket)
    began = time.monotonic()
    with open_private(log, append=True) as log_file:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   env=os_ken_compat.manager_environment())
    state = RouterState(pid=process.pid, argv=argv, bridge=bridge, ofp_socket=ofp_socket,
                        rest_socket=rest_socket, log=log, controller=f"unix:{ofp_socket}",
                        started_at=time.time())
    _save_state(state, directory)
    try:
        _wait(lambda: state.api(timeout=2).answering(), process, state, timeout,
              "the router's REST API to answer")
        with Ovsdb() as db:
            state.previous_controllers = db.controllers(bridge)
            protocols = db.protocols(bridge)
            if "OpenFlow13" not in protocols:
                state.previous_protocols = protocols
                db.set_protocols(bridge, [*protocols, "OpenFlow13"])
            state.ports_at_start = sorted(db.api.list_ports(bridge).execute(check_error=True))
            db.set_controller(bridge, state.controller)
            _save_state(state, directory)
            _wait(lambda: _bridge_realized(db, bridge), process, state, timeout,
                  f"bridge {bridge} to get a datapath id",
                  hint="Open vSwitch may have failed to create the bridge (its log says why; "
                       "its datapath_type must be one `nestednet doctor` reports)")
            state.dpid = db.datapath_id(bridge)
        _wait(lambda: state.api(timeout=2).connected(state.dpid), process, state, timeout,
              f"bridge {bridge} (datapath {state.dpid}) to join the router")
    except BaseException:
        stop(directory)
        if process.poll() is None:  # stop() could not recognise it yet (exec not done)
            process.kill()
            process.wait(timeout=10)
        raise
    state.start_seconds = round(time.monotonic() - began, 3)
    _save_state(state, directory)
    return state


def _bridge_realized(db: Ovsdb, bridge: str) -> bool:
    """Whether vswitchd gave ``bridge`` a datapath id; raises when it recorded an error
    for the bridge's interface (seen: a netdev bridge in the kernel VM). A bridge whose
    datapath cannot be opened at all records nothing: then only the timeout tells."""
    if db.datapath_id(bridge):
        return True
    error = db.interface_error(bridge)
    if error:
        raise EnvironmentProblem(f"Open vSwitch could not create bridge {bridge}: {error}",
                                 hint="check its datapath_type against `nestednet doctor`'s "
                                      "datapath line")
    return False


def _wait(ready: object, process: subprocess.Popen, state: RouterState, timeout: float,
          what: str, hint: str = "on a slow machine pass a longer --start-timeout") -> None:
    # process.poll(), not process_alive(): until exec completes, /proc/<pid>/cmdline is
    # still our own command line.
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise EnvironmentProblem(f"the router process exited while waiting for {what}; "
                                     f"its log ({state.log}) ends:\n{_log_tail(state.log)}")
        if ready():  # type: ignore[operator]
            return
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"timed out after {timeout:.0f} s waiting for {what}; "
                                     f"router log ({state.log}) ends:\n{_log_tail(state.log)}",
                                     hint=hint)
        time.sleep(0.1)


def stop(directory: str | Path | None = None) -> dict:
    """Stop the recorded router and remove its controller setting; idempotent."""
    state = load_state(directory)
    if state is None:
        return {"stopped": False, "detail": "no router recorded"}
    done: list[str] = []
    alive = process_alive(state.pid, state.argv)
    if alive and state.dpid:
        with contextlib.suppress(NestedNetError):
            state.api(timeout=3).delete_all(state.dpid)
            done.append("removed the router's addresses and routes (their flows)")
    with Ovsdb() as db:
        if db.bridge_exists(state.bridge):
            if db.controllers(state.bridge) == [state.controller]:
                if state.previous_controllers:
                    db.set_controller(state.bridge, *state.previous_controllers)
                else:
                    db.del_controller(state.bridge)
                done.append(f"removed controller {state.controller} from {state.bridge}")
            if state.previous_protocols is not None:
                db.set_protocols(state.bridge, state.previous_protocols)
                done.append(f"restored {state.bridge} protocols")
    if alive:
        _terminate(state)
        done.append(f"stopped router process {state.pid}")
    for path in (state.ofp_socket, state.rest_socket):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    _drop_state(directory)
    return {"stopped": alive, "detail": "; ".join(done) or "nothing was left to undo"}


def _terminate(state: RouterState) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not process_alive(state.pid, state.argv):
                return
            time.sleep(0.05)
    raise EnvironmentProblem(f"router process {state.pid} did not exit after SIGKILL")


def status(directory: str | Path | None = None) -> RouterStatus:
    """Process alive, REST answering, bridge joined, and what the router holds."""
    state = load_state(directory)
    if state is None:
        return RouterStatus(False, False, ("no router started (nothing recorded in "
                                           f"{state_dir(directory) / STATE_FILE})",), None)
    problems: list[str] = []
    if not process_alive(state.pid, state.argv):
        problems.append(f"router process {state.pid} is gone (log: {state.log})")
        return RouterStatus(False, False, tuple(problems), state)
    api = state.api(timeout=3)
    router = None
    pending: tuple[str, ...] = ()
    if not api.answering():
        problems.append(f"REST API not answering on unix:{state.rest_socket}")
    elif not state.dpid or not api.connected(state.dpid):
        problems.append(f"bridge {state.bridge} (datapath {state.dpid or '?'}) is not "
                        "connected to the router")
    else:
        data = api.get(state.dpid)
        router = data.as_dict()
        if state.configured:
            want = {r["destination"] for r in state.configured.get("routes", [])}
            pending = tuple(sorted(want - set(data.routes)))
            if pending:
                problems.append("routes waiting for their gateway to answer ARP: "
                                + ", ".join(pending))
    with Ovsdb() as db:
        if not db.bridge_exists(state.bridge):
            problems.append(f"bridge {state.bridge} no longer exists")
        else:
            if db.controllers(state.bridge) != [state.controller]:
                problems.append(f"bridge {state.bridge}'s controller is no longer "
                                f"{state.controller}")
            ports = set(db.api.list_ports(state.bridge).execute(check_error=True))
            late = sorted(ports - set(state.ports_at_start))
            if late:
                problems.append(f"ports added after the router started are unknown to it: "
                                f"{', '.join(late)} (restart the router)")
    healthy = not [p for p in problems if not p.startswith("routes waiting")]
    return RouterStatus(True, healthy, tuple(problems), state, router, pending)


def running_state(directory: str | Path | None = None) -> RouterState:
    state = load_state(directory)
    if state is None or not process_alive(state.pid, state.argv):
        raise EnvironmentProblem("no router is running",
                                 hint="`linkemu router start` (or `linkemu testbed up`)")
    return state


# --- configuration ----------------------------------------------------------------


def configure(plan: RouterPlan, directory: str | Path | None = None, *,
              resolve_timeout: float = 5.0) -> dict:
    """Make the router hold exactly ``plan``'s addresses and routes.

    Unchanged: nothing is sent. Changed: everything is replaced (rest_router cannot edit
    in place); if a request fails, the previous configuration is put back.
    """
    state = running_state(directory)
    if plan.bridge != state.bridge:
        raise UsageError(f"the links are for bridge {plan.bridge} but the router serves "
                         f"{state.bridge}")
    api = state.api()
    began = time.monotonic()
    before = api.get(state.dpid)
    want_addresses = {str(a.address) for a in plan.addresses}
    want_routes = {str(r.destination): str(r.gateway) for r in plan.routes}
    have_routes = {d: g for d, (_, g) in before.routes.items()}
    if set(before.addresses) == want_addresses and have_routes == want_routes:
        return {"changed": False, "requests": 0, "seconds": 0.0, "routes_pending": []}
    try:
        api.delete_all(state.dpid)
        for a in plan.addresses:
            api.add_address(state.dpid, str(a.address))
        for r in plan.routes:
            api.add_route(state.dpid, str(r.destination), str(r.gateway))
    except NestedNetError as exc:
        _restore(api, state.dpid, before.addresses, have_routes)
        exc.args = (f"{exc.args[0]} (the router's previous addresses and routes were put "
                    "back)",)
        raise
    state.configured = plan.as_dict()
    _save_state(state, directory)
    seconds = round(time.monotonic() - began, 3)
    pending = set(want_routes)
    deadline = time.monotonic() + resolve_timeout
    while pending and time.monotonic() < deadline:
        pending -= set(api.get(state.dpid).routes)
        if pending:
            time.sleep(0.05)
    return {"changed": True, "requests": len(plan.requests()), "seconds": seconds,
            "resolved_seconds": round(time.monotonic() - began, 3),
            "routes_pending": sorted(pending)}


def _restore(api: RouterApi, dpid: str, addresses: dict[str, int],
             routes: dict[str, str]) -> None:
    with contextlib.suppress(NestedNetError):
        api.delete_all(dpid)
        for address in sorted(addresses, key=addresses.__getitem__):
            api.add_address(dpid, address)
        for destination, gateway in routes.items():
            api.add_route(dpid, destination, gateway)
