"""Labs made for one test module: whatever an earlier, interrupted run left is deleted
first, and the lab is deleted after the module whatever happened."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from nestednet import images
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


def build_user_image(tag: str, context: Path, extra: str) -> None:
    """A user's image as the issue describes it: the component image plus one file,
    /opt/user-extra.txt holding ``extra``, built in ``context``."""
    (context / "extra.txt").write_text(extra)
    (context / "Dockerfile").write_text(
        f"FROM {images.COMPONENT_IMAGE}\nCOPY extra.txt /opt/user-extra.txt\n")
    built = subprocess.run(["docker", "build", "-q", "-t", tag, str(context)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
