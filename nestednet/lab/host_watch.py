"""Hosts of a multi-host lab that stop answering during a run (issue #32, item 3).

A host that loses power or its network takes its nodes with it, and nothing on it
says so: its agents' connections to the CA go quiet (TCP does not notice a cut for
minutes) and their HELLOs stop. The helper (nestednet.hostd) runs on every host beside
its engine, so the watch asks each host's helper `hello` once a second over a
connection of its own with a 3 s timeout; a host whose helper misses ``misses``
probes in a row is lost, and ``on_lost`` is told once. The run then declares the
host's nodes dead and takes their links down on the hosts that are left
(nestednet.ca.session). A host that answers again later stays lost for that run: its
nodes' parents died with its engine, and `delete` and `cleanup --hosts` deal with
what is left there.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from nestednet.errors import EnvironmentProblem
from nestednet.hostd import client as hostd
from nestednet.hostd import service as hostd_service
from nestednet.lab.nodes import Lab
from nestednet.model import placement as pl

OnLost = Callable[[str, list[int], str], None]
"""(host, its lab node numbers, the last probe's error), from the watch's thread."""

PROBE_S = 1.0
PROBE_TIMEOUT_S = 3.0
MISSES = 5
"""A host is lost after this many failed probes in a row: at least MISSES x PROBE_S
seconds of silence (up to MISSES x (PROBE_S + PROBE_TIMEOUT_S)). A helper answers
`hello` in milliseconds (docs/multihost.md: 0.004-0.014 s under 2,000 idle
connections); five misses of 3 s each are not a busy machine (a lost host is declared
within about 5-20 s, and declaring a live one dead would cost its links)."""


def nodes_by_host(meta: dict) -> dict[str, list[int]]:
    """Host -> its lab node numbers, from a multi-host lab's record."""
    out: dict[str, list[int]] = {}
    for node, host in sorted(meta.get("placement", {}).items(), key=lambda kv: int(kv[0])):
        out.setdefault(host, []).append(int(node))
    return out


class HostWatch:
    """Start, then a host that stops answering calls ``on_lost`` once; stop."""

    def __init__(self, lab: Lab, on_lost: OnLost, *, probe: float = PROBE_S,
                 timeout: float = PROBE_TIMEOUT_S, misses: int = MISSES) -> None:
        self.lab = lab
        self.on_lost = on_lost
        self.probe, self.timeout, self.misses = probe, timeout, misses
        self.nodes = nodes_by_host(lab.meta)
        self.lost: dict[str, str] = {}
        """Host -> why it was declared lost."""
        self.missed: dict[str, int] = {}
        self._clients: dict[str, hostd.HelperClient] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> HostWatch:
        hosts = pl.hosts_from_doc(self.lab.meta["hosts"])
        port = hostd_service.port_of(hosts)
        for name in self.nodes:
            host = hosts.named(name)
            self._clients[name] = hostd.HelperClient(
                name, host.address, port, hosts.ssl, timeout=self.timeout,
                insecure=hosts.insecure, connect_timeout=self.timeout)
        self._thread = threading.Thread(target=self._watch, name="nestednet-hosts",
                                        daemon=True)
        self._thread.start()
        return self

    def check(self) -> None:
        """Probe every host not yet lost once."""
        for name, client in self._clients.items():
            if name in self.lost:
                continue
            try:
                client.call("hello")
            except EnvironmentProblem as exc:
                self.missed[name] = self.missed.get(name, 0) + 1
                if self.missed[name] >= self.misses:
                    self.lost[name] = str(exc)
                    self.on_lost(name, self.nodes[name], str(exc))
                continue
            self.missed[name] = 0

    def _watch(self) -> None:
        while True:
            started = time.monotonic()
            self.check()
            if self._stop.wait(max(0.0, self.probe - (time.monotonic() - started))):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout * 2 + 1)
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()

    def __enter__(self) -> HostWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
