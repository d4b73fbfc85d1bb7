"""Running a program inside a network namespace we created.

A name under /var/run/netns or a path such as /proc/<pid>/ns/net. The child process
enters the namespace before exec (pyroute2's setns), so no `ip netns exec` is needed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from pyroute2 import netns as _netns


def _enter(namespace: str) -> None:
    # flags=0: open an existing namespace only; never create one by accident.
    _netns.setns(namespace, flags=0)


def run(namespace: str, argv: Sequence[str], *, timeout: float,
        check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``namespace`` and capture its text output; bounded by ``timeout``."""
    return subprocess.run(list(argv), preexec_fn=lambda: _enter(namespace), capture_output=True,
                          text=True, timeout=timeout, check=check)


def popen(namespace: str, argv: Sequence[str], **kwargs: object) -> subprocess.Popen:
    """Start ``argv`` in ``namespace`` (for servers such as `iperf3 -s`); caller stops it."""
    return subprocess.Popen(list(argv), preexec_fn=lambda: _enter(namespace), **kwargs)
