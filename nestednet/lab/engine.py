"""A node's inner Docker engine: parked while idle, woken on use.

The children of a nested node run under their containerd shim; the inner dockerd and
containerd are needed only to start, inspect or exec into them. The entrypoint of a lab
node's parent (started with ``NESTEDNET_ENGINE_IDLE``) runs dockerd with --live-restore, so
both can stop while the children run on, and stopped they hold none of the ~23 MB (dockerd)
and ~9 MB (containerd) they use running -- memory per node is what limits how many nodes
fit on one machine.

The protocol with the entrypoint (images/dind/entrypoint), all through the node's state
directory and signals to its parent container:

- every use holds a shared flock on ``engine.lock`` and touches it; the entrypoint parks
  only when it can take that lock exclusively without waiting, so an engine in use is
  never parked under its user, and a crashed user's lock dies with it;
- SIGUSR1 to the parent starts containerd and dockerd if they are not running; `using`
  then waits until the socket answers;
- SIGUSR2 parks it now (`park`, at the end of each node's creation); and an engine that
  nobody touched for a whole ``NESTEDNET_ENGINE_IDLE`` interval parks itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import docker
import docker.errors

from nestednet.adapters import docker_engine
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.lab import node_image

IDLE_VARIABLE = "NESTEDNET_ENGINE_IDLE"
IDLE_S = 30
"""A lab's engines park after this long unused (checked every IDLE_S: 30-60 s), unless
$NESTEDNET_ENGINE_IDLE says otherwise when the lab is created (0: never by itself)."""
LOCK_FILE = "engine.lock"
STATE_FILE = "engine"
SOCKET_FILE = "docker.sock"


KSM_VARIABLE = "NESTEDNET_KSM"
"""1 (the default): the nodes' internal OVS daemons offer their memory to the host's KSM
(about 9 MB a node less, images/dind/entrypoint); 0: they do not. It was off by default
while babel's routes churned about 3x more with it on the 66 + 4 LEO showcase; since
`run` leaves engines parked and babel ignores link quality, the full showcase churned
the same with it as without (13,996 against 13,488 route events, docs/setup.md)."""


def ksm_offered() -> bool:
    """Whether a lab created now has its nodes offer their OVS memory to KSM."""
    ksm = os.environ.get(KSM_VARIABLE, "1")
    if ksm not in ("0", "1"):
        raise UsageError(f"${KSM_VARIABLE}={ksm!r}: give 1 (offer the nodes' OVS memory to "
                         "KSM, the default) or 0 (do not)")
    return ksm == "1"


OCI_VARIABLE = "NESTEDNET_OCI_RUNTIME"
OCI_RUNTIMES = ("crun", "runc")
"""The OCI runtime a node's inner engine starts its children with: crun (the default; a
node's parent took 11 % and 21 % less CPU than with runc in two alternated 12 x 4 runs,
docs/benchmarks.md) unless $NESTEDNET_OCI_RUNTIME says runc when the lab is created.
Multi-host parents keep runc whatever it says (images/dind/entrypoint)."""


def oci_runtime() -> str:
    """The children's OCI runtime for nodes started now."""
    runtime = os.environ.get(OCI_VARIABLE, OCI_RUNTIMES[0])
    if runtime not in OCI_RUNTIMES:
        raise UsageError(f"${OCI_VARIABLE}={runtime!r}: give crun (the default) or runc")
    return runtime


def parent_environment() -> dict[str, str]:
    """What a lab's node parents are started with (the entrypoint never parks by itself
    without it: probes and image templates keep their engine)."""
    given = os.environ.get(IDLE_VARIABLE, str(IDLE_S))
    if not given.isdigit():
        raise UsageError(f"${IDLE_VARIABLE}={given!r} is not a whole number of seconds")
    return {IDLE_VARIABLE: given, KSM_VARIABLE: "1" if ksm_offered() else "0",
            OCI_VARIABLE: oci_runtime()}


def state(state_dir: Path) -> str:
    """``up``, ``parked`` or ``unknown`` (a parent from before engines parked)."""
    try:
        return (state_dir / STATE_FILE).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def api_version(state_dir: Path) -> str | None:
    """The inner engine's API version as the parent's `ready` gives it (``api=1.41``),
    so a connection need not ask the engine first; None for a parent from an older node
    image (the client then asks)."""
    try:
        words = (state_dir / "ready").read_text().split()
    except OSError:
        return None
    given = dict(word.partition("=")[::2] for word in words)
    version = given.get("api", "")
    return version if re.fullmatch(r"1\.\d+", version) else None


def answers(sock: Path, timeout: float = 2.0) -> bool:
    """Whether an engine listens on ``sock`` and answers its ping."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(sock))
        s.sendall(b"GET /_ping HTTP/1.0\r\nHost: engine\r\n\r\n")
        return s.recv(64).split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"200"]
    return False


def wake(state_dir: Path, parent: docker.models.containers.Container,
         timeout: float = 120.0) -> None:
    """Make sure the engine of ``parent`` (its state directory ``state_dir``) answers."""
    sock = state_dir / SOCKET_FILE
    if answers(sock):
        return
    try:
        parent.kill(signal="SIGUSR1")
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"cannot wake the inner engine of {parent.name}: "
                                 f"{docker_engine.explain(exc)}") from exc
    deadline = time.monotonic() + timeout
    delay = 0.02
    while not answers(sock):
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"the inner engine of {parent.name} did not answer "
                                     f"{timeout:.0f} s after being woken",
                                     hint=f"its log: {state_dir}/log/dockerd.log")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)
    # dockerd makes the socket anew each start (root:root 0660 with --group root).
    node_image.root_only(sock)


LOCK_WAIT_S = 120.0
"""A park holds the engine lock while it stops dockerd and containerd (each TERMed, then
KILLed after 20 s): longer than this, something else holds it."""


def _share(fd: int, lock: Path, name: str) -> None:
    """The shared engine lock, waited for at most LOCK_WAIT_S: an error naming the lock
    instead of a command that hangs."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise EnvironmentProblem(
                    f"the inner engine of {name} stayed locked for {LOCK_WAIT_S:.0f} s: "
                    f"{lock} is held exclusively",
                    hint="a process in the node's parent holds it (a parent from an older "
                         "node image could leave a daemon holding it): delete the lab and "
                         "create it again") from None
            time.sleep(0.05)


@contextlib.contextmanager
def using(state_dir: Path, parent: docker.models.containers.Container, *,
          timeout: int = 30) -> Iterator[docker.DockerClient]:
    """A client of the node's inner engine, woken if parked and kept from parking while
    the block runs."""
    lock = state_dir / LOCK_FILE
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _share(fd, lock, parent.name)
        os.utime(lock)
        wake(state_dir, parent)
        client = docker_engine.connect(f"unix://{state_dir / SOCKET_FILE}", timeout=timeout,
                                       api_version=api_version(state_dir))
        try:
            yield client
        finally:
            client.close()
            with contextlib.suppress(OSError):
                os.utime(lock)
    finally:
        os.close(fd)


def park(parents: Iterable[docker.models.containers.Container]) -> None:
    """Ask each parent to park its engine now (it refuses while someone uses it)."""
    for parent in parents:
        with contextlib.suppress(docker.errors.DockerException):
            parent.kill(signal="SIGUSR2")


def wake_all(pairs: Iterable[tuple[Path, docker.models.containers.Container]]) -> None:
    """Signal every parked engine at once, so that the following uses find them up
    instead of waking them one after another."""
    for state_dir, parent in pairs:
        if not answers(state_dir / SOCKET_FILE, timeout=0.5):
            with contextlib.suppress(docker.errors.DockerException):
                parent.kill(signal="SIGUSR1")
