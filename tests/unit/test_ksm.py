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


# /proc/PID/stat of this machine's host ovs-vswitchd (2026-11-29), whose `ps -o ni,cls`
# said -10 TS and `chrt -p` SCHED_OTHER; a comm with a space and a ')' checks the parse.
VSWITCHD_STAT = (
    "12826 (ovs-vswitchd) S 12825 12825 12825 0 -1 4194624 78019 0 0 0 2738 2443 0 0 10 "
    "-10 6 0 2357333 2582392832 16074 18446744073709551615 93927472648192 93927474567913 "
    "140736131816384 0 0 0 0 4096 25603 0 0 0 17 1 0 0 0 0 0 93927475323968 "
    "93927475608064 93928495247360 140736131824047 140736131824261 140736131824261 "
    "140736131825633 0\n")


def _scheduled(tmp_path: Path, stat: str, autogroup: str | None, enabled: str | None):
    proc = tmp_path / "proc"
    (proc / "12826").mkdir(parents=True)
    (proc / "12826" / "stat").write_text(stat)
    if autogroup is not None:
        (proc / "12826" / "autogroup").write_text(autogroup)
    if enabled is not None:
        (proc / "sys" / "kernel").mkdir(parents=True)
        (proc / "sys" / "kernel" / "sched_autogroup_enabled").write_text(enabled)
    pidfile = tmp_path / "ovs-vswitchd.pid"
    pidfile.write_text("12826\n")
    return pidfile, str(proc)


def test_switch_cpu_check_sees_through_nice_to_the_session_autogroup(tmp_path):
    """ovs-ctl's nice -10 does not rank the switch ahead of other sessions when the
    kernel groups sessions (autogroup): the check then reads the autogroup's nice."""
    from nestednet.capabilities.nodes import switch_cpu_check, switch_scheduling

    pidfile, proc = _scheduled(tmp_path, VSWITCHD_STAT, "/autogroup-39179 nice 0\n", "1\n")
    assert switch_scheduling(pidfile, proc) == {"pid": 12826, "realtime": False,
                                                "nice": -10, "autogroup_nice": 0}
    check = switch_cpu_check(pidfile, proc)
    assert not check.ok and not check.needed_for_create
    assert "autogroup) at nice 0" in check.detail and "own nice -10" in check.detail
    assert check.fix.startswith(f"echo -10 > {proc}/12826/autogroup")
    (Path(proc) / "12826" / "autogroup").write_text("/autogroup-39179 nice -10\n")
    assert switch_cpu_check(pidfile, proc).ok


def test_switch_cpu_check_without_autogroups_and_real_time(tmp_path):
    from nestednet.capabilities.nodes import switch_cpu_check

    pidfile, proc = _scheduled(tmp_path, VSWITCHD_STAT, None, "0\n")
    check = switch_cpu_check(pidfile, proc)
    assert check.ok and check.detail == "host ovs-vswitchd at nice -10 (no autogroups)"
    at_zero = VSWITCHD_STAT.replace(" 10 -10 6 ", " 20 0 6 ")
    (Path(proc) / "12826" / "stat").write_text(at_zero)
    check = switch_cpu_check(pidfile, proc)
    assert not check.ok and check.fix.startswith("renice -n -10 -p 12826")
    # proc(5): field 40 rt_priority, 41 policy (1 = SCHED_FIFO); priority -2 for FIFO 1.
    fifo = VSWITCHD_STAT.replace(" 10 -10 6 ", " -2 0 6 ").replace(
        " 17 1 0 0 0 0 0 ", " 17 1 1 1 0 0 0 ")
    (Path(proc) / "12826" / "stat").write_text(fifo.replace("(ovs-vswitchd)", "(ovs (x) d)"))
    check = switch_cpu_check(pidfile, proc)
    assert check.ok and "real-time" in check.detail
    gone = switch_cpu_check(tmp_path / "no.pid", proc)
    assert not gone.ok and gone.detail == "host ovs-vswitchd not found"
