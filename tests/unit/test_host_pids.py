"""netlink.host_pids looks only below the given process (nestednet.adapters.netlink
._below): here, in this test's own PID namespace (one level, so a pid is its own
"inner" pid), a child and a grandchild forked from a second thread are found, and a
process that is not below is not."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading

import pytest

from nestednet.adapters import netlink
from nestednet.errors import EnvironmentProblem

pytestmark = pytest.mark.unit


def test_processes_below_are_found_and_others_are_not():
    started: dict[str, subprocess.Popen] = {}

    def from_a_thread() -> None:
        started["shell"] = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"],
                                            stdout=subprocess.PIPE, text=True)

    thread = threading.Thread(target=from_a_thread)
    thread.start()
    thread.join()
    shell = started["shell"]
    other = subprocess.Popen(["sleep", "30"])
    grandchild = int(shell.stdout.readline())
    try:
        assert netlink.host_pids(shell.pid, [grandchild]) == {grandchild: grandchild}
        mine = netlink.host_pids(os.getpid(), [shell.pid, grandchild, other.pid])
        assert mine == {shell.pid: shell.pid, grandchild: grandchild, other.pid: other.pid}
        with pytest.raises(EnvironmentProblem, match=str(other.pid)):
            netlink.host_pids(shell.pid, [other.pid])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)
        for proc in (other, shell):
            proc.kill()
            proc.wait()
