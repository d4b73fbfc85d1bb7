"""Labs made for one test module: whatever an earlier, interrupted run left is deleted
first, and the lab is deleted after the module whatever happened."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
