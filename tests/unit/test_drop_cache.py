"""drop_cache: which cgroup file it writes (v1 memory.force_empty, v2 memory.reclaim),
that it refuses while swap is on, and that a write the kernel keeps looping in is cut
off, on fake /proc and cgroup trees."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nestednet.adapters import cgroups

pytestmark = pytest.mark.unit

NO_SWAP = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
A_SWAP = NO_SWAP + "/swapfile                               file\t\t1048572\t\t0\t\t-2\n"


def tree(tmp_path: Path, swaps: str, v1: bool) -> tuple[str, str, Path]:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "7").mkdir(parents=True)
    (proc / "swaps").write_text(swaps)
    if v1:
        (proc / "7" / "cgroup").write_text("5:memory:/docker/abc\n1:name=systemd:/x\n")
        base = cg / "memory" / "docker" / "abc"
    else:
        (proc / "7" / "cgroup").write_text("0::/system.slice/docker-abc.scope\n")
        base = cg / "system.slice" / "docker-abc.scope"
    base.mkdir(parents=True)
    (base / ("memory.force_empty" if v1 else "memory.reclaim")).touch()
    return str(proc), str(cg), base


@pytest.mark.parametrize("v1, file, text", [(True, "memory.force_empty", "0"),
                                            (False, "memory.reclaim", str(1 << 40))])
def test_writes_the_reclaim_file_of_the_process_cgroup(tmp_path, v1, file, text):
    proc, cg, base = tree(tmp_path, NO_SWAP, v1)
    assert cgroups.drop_cache(7, proc, cg) is True
    assert (base / file).read_text() == text


def test_refuses_while_swap_is_on_and_writes_nothing(tmp_path):
    proc, cg, base = tree(tmp_path, A_SWAP, True)
    assert cgroups.drop_cache(7, proc, cg) is False
    assert (base / "memory.force_empty").read_text() == ""


def test_a_gone_process_or_an_unwritable_cgroup_is_false(tmp_path):
    proc, cg, base = tree(tmp_path, NO_SWAP, True)
    assert cgroups.drop_cache(8, proc, cg) is False
    (base / "memory.force_empty").unlink()
    assert cgroups.drop_cache(7, proc, cg) is False


def test_a_write_that_never_returns_is_cut_off(tmp_path):
    # A FIFO with no reader: opening it for writing blocks, as force_empty's loop does.
    proc, cg, base = tree(tmp_path, NO_SWAP, True)
    (base / "memory.force_empty").unlink()
    os.mkfifo(base / "memory.force_empty")
    start = time.monotonic()
    assert cgroups.drop_cache(7, proc, cg, timeout=0.5) is True
    assert time.monotonic() - start < 5


def test_swap_active_reads_proc_swaps(tmp_path):
    (tmp_path / "swaps").write_text(NO_SWAP)
    assert cgroups.swap_active(str(tmp_path)) is False
    (tmp_path / "swaps").write_text(A_SWAP)
    assert cgroups.swap_active(str(tmp_path)) is True
