"""Packet captures from iPHY ports (nestednet.lab.capture), for scripts and the CLI."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

__all__ = ["capture"]


def capture(lab: str, ports: Sequence[str], path: Path, seconds: float | None = None,
            stop: threading.Event | None = None) -> dict:
    """Capture ``ports`` (``["n1:iphy1", ...]``) of ``lab`` into the pcapng file ``path``
    until ``seconds`` pass or ``stop`` is set; returns ``file``, ``ports`` (host port ->
    label), ``packets`` and ``scenario_time`` ("packet comment" when a run was playing on
    the lab, each packet then carrying its scenario time; None otherwise)."""
    # Lazy: the capture loads netlink and scapy, which `import nestednet` must not.
    from nestednet.lab import capture as lab_capture
    from nestednet.lab.nodes import Lab

    return lab_capture.capture(Lab.open(lab), ports, path, seconds,
                               stop if stop is not None else threading.Event())
