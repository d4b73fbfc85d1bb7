"""What running a command in a component gives back: a finished `Result`, or a
`Process` still running (`Component.popen`) for traffic that must outlive the call.

Both go through the lab's node design (`nestednet exec`'s path), so they work the same
in nested, flat and multi-host labs. A `Process` runs its command under ``sh`` that
first writes its pid, so it can be signalled later by a second exec: Docker's exec API
itself cannot stop what it started.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nestednet.errors import EnvironmentProblem, InputError

Command = str | Sequence[str]
"""A shell command line (run by ``sh -c``) or an argument list (run as is)."""

Write = Callable[[bytes], None]
Runner = Callable[[list[str], Write, Write], int]
"""Runs an argument list in one component, streaming stdout and stderr; its exit code."""


@dataclass(frozen=True)
class Result:
    """A finished command: its exit code and everything it wrote."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """Whether it exited 0."""
        return self.exit_code == 0

    def check(self, what: str = "command") -> Result:
        """This result, or EnvironmentProblem with its stderr when it did not exit 0."""
        if not self.ok:
            tail = (self.stderr or self.stdout).strip().splitlines()[-3:]
            raise EnvironmentProblem(f"{what} exited {self.exit_code}"
                                     + (f": {' / '.join(tail)}" if tail else ""))
        return self


def argv(command: Command) -> list[str]:
    """The argument list for ``command``: a string runs under ``sh -c``."""
    if isinstance(command, str):
        if not command.strip():
            raise InputError("no command given")
        return ["sh", "-c", command]
    args = [str(a) for a in command]
    if not args:
        raise InputError("no command given")
    return args


class _Collector:
    """Bytes written by one stream, decoded on demand (thread-safe appends)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            self._parts.append(data)

    def text(self) -> str:
        with self._lock:
            return b"".join(self._parts).decode("utf-8", errors="replace")


def run(runner: Runner, command: Command) -> Result:
    """Run ``command`` to its end and collect its output."""
    out, err = _Collector(), _Collector()
    code = runner(argv(command), out.write, err.write)
    return Result(code, out.text(), err.text())


class Process:
    """A command running in a component (`Component.popen`).

    Its output accumulates in `stdout` / `stderr` as it arrives. `wait()` returns the
    `Result`; `terminate()` / `kill()` signal it; leaving a ``with`` block terminates it
    if it still runs. Its exec runs on a thread of this process.
    """

    def __init__(self, runner: Runner, command: Command, where: str) -> None:
        self.where = where
        """The component, as ``n1:iphy2``."""
        self.command = argv(command)
        self._runner = runner
        self._pidfile = f"/tmp/nestednet-popen-{uuid.uuid4().hex}.pid"
        self._out, self._err = _Collector(), _Collector()
        self._code: int | None = None
        self._error: BaseException | None = None
        wrapped = ["sh", "-c", f"echo $$ > {self._pidfile}; exec {shlex.join(self.command)}"]
        self._thread = threading.Thread(target=self._work, args=(wrapped,), daemon=True,
                                        name=f"nestednet-popen-{where}")
        self._thread.start()

    def _work(self, wrapped: list[str]) -> None:
        try:
            self._code = self._runner(wrapped, self._out.write, self._err.write)
        except BaseException as exc:  # handed to wait()
            self._error = exc
        finally:
            # The pid file outlives the exec'd command; one more exec removes it (a
            # component that is gone has nothing left to clean).
            with contextlib.suppress(Exception):
                self._runner(["rm", "-f", self._pidfile], lambda _data: None,
                             lambda _data: None)

    @property
    def stdout(self) -> str:
        """What it wrote to stdout so far."""
        return self._out.text()

    @property
    def stderr(self) -> str:
        """What it wrote to stderr so far."""
        return self._err.text()

    def running(self) -> bool:
        """Whether it has not ended yet."""
        return self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Result:
        """Its `Result` once it ends; TimeoutError if it runs on past ``timeout`` s."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"{shlex.join(self.command)} in {self.where} still runs "
                               f"after {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._code is not None
        return Result(self._code, self.stdout, self.stderr)

    def signal(self, name: str = "TERM") -> None:
        """Send signal ``name`` (TERM, INT, KILL, ...) to it, if it still runs."""
        if not name.isalnum():
            raise InputError(f"bad signal name {name!r}")
        if self.running():
            self._runner(["sh", "-c", f"test -s {self._pidfile} && kill -{name} "
                          f"$(cat {self._pidfile}); rm -f {self._pidfile}"],
                         lambda _data: None, lambda _data: None)

    def terminate(self, timeout: float = 10.0) -> Result:
        """SIGTERM, then its `Result` (SIGKILL if it is still there after ``timeout``)."""
        self.signal("TERM")
        try:
            return self.wait(timeout)
        except TimeoutError:
            return self.kill(timeout)

    def kill(self, timeout: float = 10.0) -> Result:
        """SIGKILL, then its `Result`."""
        self.signal("KILL")
        return self.wait(timeout)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.running():
            self.terminate()
