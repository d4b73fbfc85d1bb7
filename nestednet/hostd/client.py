"""The CLI machine's side of the per-host helper (nestednet.hostd.server).

One `HelperClient` per host per command: connections are kept and reused (a pool, so
nodes wired in parallel on one host do not queue behind each other), requests can go
as one batch, and a helper that refuses or fails names its host. `forward` gives a
local unix socket that reaches one of a parent's sockets on the host (the docker SDK
and python-ovs take it as they took the shared socket of an emulated host); `routes`
a stream of a lab's route changes; `RemoteTc` the tc adapter's functions run there.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.hostd import protocol as p
from nestednet.hostd.streams import pump, readable, recv_exact
from nestednet.model.placement import Tls


class HelperError(EnvironmentProblem):
    """The helper answered with an error (its kind: netlink, environment, ...)."""

    def __init__(self, host: str, kind: str, message: str) -> None:
        super().__init__(f"host {host}: helper: {message}",
                         hint=None if kind != "protocol" else
                         "the helper and this machine run different NestedNet versions? "
                         "`nestednet hosts prepare` again")
        self.kind = kind


def client_context(tls: Tls) -> ssl.SSLContext:
    """As the OVSDB and OpenFlow sessions do it: this machine's certificate, the host's
    checked against ``ca_cert``; the name it holds is checked after the handshake
    (`check_host_name`: ovs-pki's certificates name a host as ``NAME id:...``, which
    ssl's own host-name check cannot match)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        context.load_verify_locations(tls.ca_cert)
        context.load_cert_chain(tls.certificate, tls.private_key)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"hosts file ssl: cannot use {tls.certificate} / {tls.private_key} "
                         f"/ {tls.ca_cert}: {exc}") from None
    return context


def certificate_names(cert: Mapping[str, Any]) -> list[str]:
    """The names a peer certificate gives: its DNS subjectAltNames and its CN (ovs-pki
    writes ``NAME id:UUID``: the NAME)."""
    names = [v for k, v in cert.get("subjectAltName", ()) if k == "DNS"]
    names += [v.split(" id:")[0] for rdn in cert.get("subject", ()) for k, v in rdn
              if k == "commonName"]
    return names


def check_host_name(host: str, cert: Mapping[str, Any] | None) -> None:
    """Refuse a helper whose certificate does not name ``host`` (the hosts file's name):
    any certificate the hosts' CA signed would otherwise pass for any host's helper."""
    names = certificate_names(cert or {})
    if host not in names:
        raise EnvironmentProblem(f"host {host}: the helper's certificate names "
                                 f"{', '.join(names) or 'nothing'}, not {host}",
                                 hint="each host's certificate must name the host as the "
                                      "hosts file does (ovs-pki req+sign NAME switch)")


INSECURE_HINT = ("the helper runs as root: give the hosts file `ssl` (docs/multihost.md, "
                 "section 3), or `\"insecure\": true` on a network only you can reach")


class HelperClient:
    """Requests to one host's helper."""

    def __init__(self, host: str, address: str, port: int, tls: Tls | None,
                 timeout: float = 120.0, *, insecure: bool = False,
                 connect_timeout: float = 10.0) -> None:
        self.host, self.address, self.port, self.timeout = host, address, port, timeout
        self.connect_timeout = connect_timeout
        if tls is None and not insecure:
            raise UsageError(f"host {host}: the hosts file gives no `ssl`, so its helper "
                             "would be reached over plain TCP", hint=INSECURE_HINT)
        self.context = client_context(tls) if tls is not None else None
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._forwards: dict[tuple[str, str], Forward] = {}
        self.round_trips = 0

    # --- connections --------------------------------------------------------------------

    def connect(self) -> socket.socket:
        """A new connection (TLS when the hosts file has `ssl`)."""
        try:
            raw = socket.create_connection((self.address, self.port),
                                           timeout=self.connect_timeout)
        except OSError as exc:
            raise EnvironmentProblem(
                f"host {self.host}: no helper at {self.address}:{self.port} ({exc})",
                hint="`nestednet hosts prepare --hosts FILE` starts it on every host") from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.context is None:
            raw.settimeout(self.timeout)
            return raw
        try:
            conn = self.context.wrap_socket(raw)
        except (ssl.SSLError, OSError) as exc:
            raw.close()
            raise EnvironmentProblem(f"host {self.host}: TLS with the helper at "
                                     f"{self.address}:{self.port} failed: {exc}") from None
        try:
            check_host_name(self.host, conn.getpeercert())
        except EnvironmentProblem:
            conn.close()
            raise
        conn.settimeout(self.timeout)
        return conn

    def _take(self) -> socket.socket:
        """A kept connection the helper has not closed (it closes idle ones), else a
        new one."""
        while True:
            with self._lock:
                if not self._idle:
                    break
                conn = self._idle.pop()
            if not readable([conn], 0):
                return conn
            with contextlib.suppress(OSError):
                conn.close()
        return self.connect()

    def _give(self, conn: socket.socket) -> None:
        with self._lock:
            self._idle.append(conn)

    def _exchange(self, conn: socket.socket, messages: list[dict]) -> list[dict]:
        """Send every message, then read as many answers (in order)."""
        conn.sendall(b"".join(p.encode(m) for m in messages))
        answers = []
        for _ in messages:
            answer = p.read_frame(lambda n: recv_exact(conn, n), p.MAX_ANSWER)
            if answer is None:
                raise OSError("the helper closed the connection")
            answers.append(answer)
        self.round_trips += 1
        return answers

    def _result(self, answer: dict) -> Any:
        if answer.get("ok"):
            return answer.get("result")
        error = answer.get("error") or {}
        raise HelperError(self.host, str(error.get("kind", "?")), str(error.get("message")))

    def pipeline(self, messages: list[dict]) -> list[Any]:
        """Several requests in one write, their results in order (the first error
        raises, after every answer was read)."""
        conn = self._take()
        try:
            answers = self._exchange(conn, messages)
        except (OSError, p.ProtocolError) as exc:
            with contextlib.suppress(OSError):
                conn.close()
            raise EnvironmentProblem(f"host {self.host}: helper connection failed: {exc}"
                                     ) from None
        self._give(conn)
        return [self._result(a) for a in answers]

    def call(self, op: str, **args: Any) -> Any:
        return self.pipeline([p.request(op, **args)])[0]

    def batch(self, requests: Iterable[tuple[str, dict]]) -> list[Any]:
        """Requests run in order by the helper, stopping at the first error: one
        round trip."""
        return self.call("batch", requests=[p.request(op, **args) for op, args in requests])

    def stream(self, op: str, **args: Any) -> socket.socket:
        """A new connection turned into ``op``'s stream once the helper accepted it."""
        conn = self.connect()
        try:
            self._result(self._exchange(conn, [p.request(op, **args)])[0])
        except BaseException:
            conn.close()
            raise
        conn.settimeout(None)
        return conn

    def forward(self, lab: str, parent: str, name: str) -> Path:
        """A unix socket here reaching ``name`` (nestednet.hostd.protocol.SOCKETS) of
        parent ``parent`` on the host; kept until `close`."""
        key = (parent, name)
        with self._lock:
            if key not in self._forwards:
                self._forwards[key] = Forward(self, lab, parent, name)
            return self._forwards[key].path

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            forwards, self._forwards = list(self._forwards.values()), {}
        for conn in idle:
            with contextlib.suppress(OSError):
                conn.close()
        for forward in forwards:
            forward.close()


class Forward:
    """A listening unix socket here (in a private directory) whose every connection is
    relayed to a parent's socket on the host through its own helper connection."""

    def __init__(self, client: HelperClient, lab: str, parent: str, name: str) -> None:
        self.client, self.lab, self.parent, self.name = client, lab, parent, name
        self.directory = Path(tempfile.mkdtemp(prefix="nestednet-fwd-"))
        os.chmod(self.directory, 0o700)
        self.path = self.directory / name.replace("/", "-")
        # Removed at interpreter exit too: a command or test that never closed its
        # client left one directory a parent socket in /tmp (157 seen after a day).
        self._remove = weakref.finalize(self, _remove_socket_dir, self.path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(16)
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True,
                         name=f"nestednet-fwd-{parent}").start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                local, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(local,), daemon=True).start()

    def _relay(self, local: socket.socket) -> None:
        try:
            remote = self.client.stream("forward", lab=self.lab, parent=self.parent,
                                        socket=self.name)
        except EnvironmentProblem:
            local.close()  # the docker SDK / OVSDB client sees a closed connection
            return
        pump(local, remote, self.stop)

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self.listener.close()
        self._remove()


def _remove_socket_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
    with contextlib.suppress(OSError):
        path.parent.rmdir()


class RouteStream:
    """Route changes of several nodes on one host (`run`'s route watch), as frames
    from the helper, which holds a netlink socket in each GNAB's namespace."""

    def __init__(self, client: HelperClient, lab: str, pids: Mapping[int, int]) -> None:
        self.sock = client.stream("routes", lab=lab,
                                  pids={str(n): pid for n, pid in pids.items()})

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list[tuple[int, dict]]:
        """What is there: (node, change) pairs; OSError once the helper closed it."""
        out: list[tuple[int, dict]] = []
        while True:
            frame = p.read_frame(lambda n: recv_exact(self.sock, n), p.MAX_ANSWER)
            if frame is None:
                raise OSError("the helper closed the route stream")
            out += [(int(frame["node"]), change) for change in frame.get("changes", [])]
            if not readable([self.sock], 0):
                return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class RemoteTc:
    """nestednet.adapters.tc's functions, run by a host's helper in its namespace: the
    shaper calls them with the namespace it recorded for a port, which the helper
    replaces by its own."""

    def __init__(self, client: HelperClient, lab: str) -> None:
        self.client, self.lab = client, lab

    def __getattr__(self, function: str):
        if function not in p.TC_FUNCTIONS:
            raise AttributeError(function)

        def call(*args: Any) -> Any:
            wire = [[op.as_dict() for op in a] if i == 0 and isinstance(a, list) and a
                    and hasattr(a[0], "as_dict") else a for i, a in enumerate(args)]
            wire = [None if isinstance(a, str) and a.startswith(HOST_NETNS) else a
                    for a in wire]
            return self.client.call("tc", lab=self.lab, function=function, args=wire)

        return call


HOST_NETNS = "hostd:"
"""How a shaped port on another host names its namespace in the shaper's state (the
namespace there is the helper's own): ``hostd:<host name>``."""


def wait_answering(client: HelperClient, timeout: float) -> dict:
    """`hello` once the helper answers (a service just started), or the last error."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.call("hello")
        except EnvironmentProblem:
            if time.monotonic() >= deadline:
                raise
        time.sleep(0.5)
