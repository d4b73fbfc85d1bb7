"""KSM (same-page merging): the sysfs reader, the wait for merge passes, and the
node image's ksm-merge wrapper run on this kernel."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from nestednet.adapters import ksm

pytestmark = pytest.mark.unit

HELPER = Path(__file__).resolve().parents[2] / "images" / "dind" / "ksm-merge"


def fake_ksm(tmp_path: Path, run: int = 1, full_scans: int = 7) -> Path:
    for name, value in {"run": run, "full_scans": full_scans, "pages_shared": 3,
                        "pages_sharing": 40, "pages_to_scan": 100,
                        "sleep_millisecs": 20}.items():
        (tmp_path / name).write_text(f"{value}\n")
    return tmp_path


def test_state_reads_counters_and_none_without_ksm(tmp_path):
    assert ksm.state(tmp_path / "absent") is None
    s = ksm.state(fake_ksm(tmp_path))
    assert s == {"run": 1, "full_scans": 7, "pages_shared": 3, "pages_sharing": 40,
                 "pages_to_scan": 100, "sleep_millisecs": 20}
    assert ksm.running(tmp_path)


def test_wait_passes_false_when_ksm_is_off(tmp_path):
    d = fake_ksm(tmp_path, run=0)
    start = time.monotonic()
    assert ksm.wait_passes(timeout=5, ksm_dir=d) is False
    assert time.monotonic() - start < 1
    assert not ksm.running(d)


def test_wait_passes_waits_for_two_more_passes(tmp_path):
    d = fake_ksm(tmp_path, full_scans=7)

    def scanner():
        for n in (8, 9):
            time.sleep(0.6)
            (d / "full_scans").write_text(f"{n}\n")

    t = threading.Thread(target=scanner)
    start = time.monotonic()
    t.start()
    assert ksm.wait_passes(passes=2, timeout=10, ksm_dir=d) is True
    t.join()
    assert time.monotonic() - start >= 1.2


def test_wait_passes_gives_up_after_timeout(tmp_path):
    d = fake_ksm(tmp_path)
    assert ksm.wait_passes(passes=1, timeout=1.0, ksm_dir=d) is False


def test_wait_passes_gives_up_early_when_no_pass_ends(tmp_path):
    """ksmd counts no passes while nobody offers memory: no waiting the whole timeout."""
    d = fake_ksm(tmp_path)
    start = time.monotonic()
    assert ksm.wait_passes(passes=2, timeout=30, first_pass_s=1.0, ksm_dir=d) is False
    assert time.monotonic() - start < 3


def _merge_any(prefix: list[str]) -> str:
    out = subprocess.run([*prefix, "sh", "-c", "grep merge_any /proc/self/ksm_stat"],
                         capture_output=True, text=True, check=True).stdout
    return out.split(":")[1].strip()


@pytest.mark.skipif("ksm_merge_any" not in (Path("/proc/self/ksm_stat").read_text()
                                            if Path("/proc/self/ksm_stat").exists() else ""),
                    reason="kernel without PR_SET_MEMORY_MERGE (Linux < 6.4)")
def test_ksm_merge_wrapper_opts_the_command_in_and_keeps_it_across_exec():
    assert _merge_any([]) == "no"
    assert _merge_any(["sh", str(HELPER)]) == "yes"


def test_ksm_merge_wrapper_passes_arguments_and_exit_status():
    done = subprocess.run(["sh", str(HELPER), "sh", "-c", 'echo "$1 $2"; exit 3', "x", "a b",
                           "c"], capture_output=True, text=True)
    assert done.returncode == 3
    assert done.stdout == "a b c\n"


JEMALLOC_MAP = ("7f4b1c000000-7f4b1c02a000 r--p 00000000 fe:00 1234   "
                "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n")
LIBC_MAP = ("7f4b1d000000-7f4b1d026000 r--p 00000000 fe:00 99   "
            "/usr/lib/x86_64-linux-gnu/libc.so.6\n")


def _vswitchd(tmp_path: Path, locked_kb: int, jemalloc: bool = True) -> tuple[Path, str]:
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "status").write_text(f"Name:\tovs-vswitchd\nVmLck:\t  {locked_kb} kB\n"
                                          "VmRSS:\t 9000 kB\n")
    (proc / "4242" / "maps").write_text((JEMALLOC_MAP if jemalloc else "") + LIBC_MAP)
    pidfile = tmp_path / "ovs-vswitchd.pid"
    pidfile.write_text("4242\n")
    return pidfile, str(proc)


def test_memory_check_ok_with_ksm_on_and_no_mlock(tmp_path):
    from nestednet.capabilities.nodes import memory_check
    pidfile, proc = _vswitchd(tmp_path, 0)
    (tmp_path / "k").mkdir()
    check = memory_check(fake_ksm(tmp_path / "k"), pidfile, proc)
    assert check.ok and not check.needed_for_create
    assert check.detail == "KSM on; host ovs-vswitchd not mlocked; on jemalloc"


def test_memory_check_names_both_problems_and_fixes(tmp_path):
    from nestednet.capabilities.nodes import memory_check
    (tmp_path / "k").mkdir()
    pidfile, proc = _vswitchd(tmp_path, 800 * 1024, jemalloc=False)
    check = memory_check(fake_ksm(tmp_path / "k", run=0), pidfile, proc)
    assert not check.ok
    assert "KSM off" in check.detail and "mlocked (800 MB locked)" in check.detail
    assert "glibc malloc" in check.detail
    assert "/run" in check.fix and "--no-mlockall" in check.fix and "ovs-ctl stop" in check.fix
    absent = memory_check(tmp_path / "nowhere", tmp_path / "no.pid", proc)
    assert not absent.ok and absent.detail.startswith("KSM absent") and absent.fix == ""


def test_nodes_offer_their_ovs_to_ksm_unless_told_not_to(monkeypatch):
    """KSM is on by default (the full LEO showcase churned as much without it);
    NESTEDNET_KSM=0 turns it off, anything but 0/1 is refused."""
    from nestednet.errors import UsageError
    from nestednet.lab import engine

    monkeypatch.delenv("NESTEDNET_KSM", raising=False)
    assert engine.parent_environment()["NESTEDNET_KSM"] == "1"
    assert engine.ksm_offered()
    monkeypatch.setenv("NESTEDNET_KSM", "0")
    assert engine.parent_environment()["NESTEDNET_KSM"] == "0"
    assert not engine.ksm_offered()
    monkeypatch.setenv("NESTEDNET_KSM", "yes")
    with pytest.raises(UsageError, match="NESTEDNET_KSM"):
        engine.parent_environment()
