"""The one place that makes os-ken 1.4.1 (with rest_router) run on Python 3.11.

PyPI `ryu` no longer builds or runs on 3.11; os-ken dropped rest_router in 2.0, so we
pin os-ken 1.4.1 with eventlet 0.33.3. That eventlet no longer defines
``eventlet.wsgi.ALREADY_HANDLED``, which os-ken's WSGI layer still reads at import
time; defining it before os_ken is imported is the import shim. One setting is
tuned when the router runs (``patch_rest_router``: its OpenFlow reply timeout). The
router process is started through this module too
(``python -m nestednet.adapters.os_ken_compat ARGS``), so no other code imports os_ken.
tests/unit/test_os_ken_compat.py fails if this stops being enough.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from types import ModuleType

REST_ROUTER_APP = "os_ken.app.rest_router"
REPLY_TIMEOUT_S = 5.0
"""How long rest_router waits for the switch's flow list, which it needs to delete routes.
Its own 1 s is too short when the controller has a backlog of packet-ins (seen in the
software-emulated VM right after a burst of pings to new hosts): the list came late,
rest_router deleted no route, and re-configuring the router failed. Kept below the
REST client's 10 s timeout (linkemu.router_api)."""


def apply() -> None:
    import eventlet.wsgi

    if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
        eventlet.wsgi.ALREADY_HANDLED = b""


def import_rest_router() -> ModuleType:
    apply()
    from os_ken.app import rest_router

    return rest_router


def os_ken_version() -> str:
    return metadata.version("os-ken")


def manager_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the router process runs in: ``base`` (default: ours) plus two
    import-time savings that change nothing the router does. eventlet's green DNS
    resolver (dnspython) is not needed - the router binds and talks to 127.0.0.1 only -
    and setuptools' distutils shim (which drags in pkg_resources, via eventlet's
    ``distutils.version`` import) is not needed either. Measured: importing
    eventlet.wsgi 230-300 ms -> ~30 ms on the host; in the software-emulated VM these
    imports took most of the 67 s os-ken needed to load."""
    env = dict(os.environ if base is None else base)
    env.update({"EVENTLET_NO_GREENDNS": "yes", "SETUPTOOLS_USE_DISTUTILS": "stdlib"})
    return env


UNUSED_PORT = 6653
"""os-ken listens on a unix socket when its listen "host" is a path in an existing
directory (os_ken.lib.hub.StreamServer) and then ignores the port; a port must still be
given, or the controller also listens on TCP 6633 for backward compatibility."""


def manager_command(*, ofp_socket: str, rest_socket: str,
                    apps: tuple[str, ...] = (REST_ROUTER_APP,)) -> list[str]:
    """The argv that runs os-ken's manager (osken-manager) with the shim applied first,
    OpenFlow and REST on unix sockets (paths in an existing directory)."""
    return [sys.executable, "-m", "nestednet.adapters.os_ken_compat",
            "--ofp-listen-host", ofp_socket, "--ofp-tcp-listen-port", str(UNUSED_PORT),
            "--wsapi-host", rest_socket, "--wsapi-port", str(UNUSED_PORT), *apps]


class _UnixSwitchSocket:
    """A switch's connection on a unix socket, as os-ken's Datapath uses it: it sets
    TCP_NODELAY, which a unix socket refuses (EOPNOTSUPP); that one option is skipped."""

    def __init__(self, sock) -> None:
        self._sock = sock

    def setsockopt(self, level: int, option: int, value) -> None:
        import socket

        if level == socket.IPPROTO_TCP:
            return
        self._sock.setsockopt(level, option, value)

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


def patch_unix_switches() -> None:
    """Switches connect over a unix socket (`manager_command`): os-ken's Datapath gets a
    socket whose TCP options are skipped."""
    import socket

    from os_ken.controller import controller

    factory = controller.datapath_connection_factory
    if getattr(factory, "nestednet_unix", False):
        return

    def unix_factory(sock, address):
        if getattr(sock, "family", None) == socket.AF_UNIX:
            sock = _UnixSwitchSocket(sock)
        return factory(sock, address)

    unix_factory.nestednet_unix = True  # type: ignore[attr-defined]
    controller.datapath_connection_factory = unix_factory


def patch_rest_router(rest_router: ModuleType) -> None:
    """Give rest_router a reply timeout a busy controller can meet (REPLY_TIMEOUT_S).

    rest_router reads the module global on every request, so setting it once is enough.
    """
    if not isinstance(getattr(rest_router, "OFP_REPLY_TIMER", None), float):
        raise RuntimeError("os_ken.app.rest_router has no OFP_REPLY_TIMER: the pinned "
                           "os-ken changed; review nestednet/adapters/os_ken_compat.py")
    rest_router.OFP_REPLY_TIMER = REPLY_TIMEOUT_S


def run_manager(argv: list[str]) -> None:
    """os-ken's manager, shimmed; the unix sockets it makes are 0600 (umask 077)."""
    os.umask(0o077)
    patch_rest_router(import_rest_router())
    patch_unix_switches()
    from os_ken.cmd import manager

    manager.main(args=argv)


if __name__ == "__main__":
    run_manager(sys.argv[1:])
