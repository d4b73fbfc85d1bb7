"""Working with one component of a running lab: exec, swap in code, restart.

The lab's record names its node design; the design does the work (a flat lab
refuses swap).
"""

from __future__ import annotations

from pathlib import Path

from nestednet.lab import designs, lock
from nestednet.lab.design import Write
from nestednet.lab.nodes import Lab


def exec_in(lab: Lab, node: str, component: str, command: list[str],
            out: Write, err: Write) -> int:
    """Run ``command`` in the component, streaming its output; returns its exit code."""
    return designs.of(lab.meta).exec_in(lab, node, component, command, out, err)


def swap(lab: Lab, node: str, component: str, path: Path, *, restart: bool) -> dict:
    """Copy ``path`` into the component's code directory; with ``restart``, restart it
    alone and wire it again (same addresses and ports, so links survive)."""
    with lock.hold(lab.record.lab, "swap", root=lab.record.path.parent):
        return designs.of(lab.meta).swap(lab, node, component, path, restart=restart)
