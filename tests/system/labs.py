"""Labs made for one test module: whatever an earlier, interrupted run left is deleted
first, and the lab is deleted after the module whatever happened."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from nestednet.lab.create import CreateRequest, create
from nestednet.lab.record import LabRecord
from nestednet.lab.teardown import delete_lab


def forget(lab: str) -> None:
    if LabRecord(lab).exists():
        delete_lab(LabRecord(lab))


@contextlib.contextmanager
def module_lab(lab: str, nodes: int, iphys: int) -> Iterator[LabRecord]:
    forget(lab)
    create(CreateRequest(lab=lab, nodes=nodes, iphys=iphys))
    try:
        yield LabRecord(lab)
    finally:
        forget(lab)


def swap_code(directory: Path) -> Path:
    """Code for `nestednet swap` (a directory with main.py): it leaves /tmp/swapped
    saying "new code", then idles until SIGTERM."""
    directory.mkdir()
    (directory / "main.py").write_text(
        "import signal, sys, time\n"
        "open('/tmp/swapped', 'w').write('new code')\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        "while True: time.sleep(1)\n")
    return directory
