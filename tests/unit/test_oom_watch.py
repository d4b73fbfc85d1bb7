"""OOM kills read from cgroup files (v1 memory.oom_control, v2 memory.events), and the
run's watch reporting only kills that are new, on fake /proc and cgroup trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from nestednet.adapters import cgroups
from nestednet.lab.oom_watch import OomWatch

pytestmark = pytest.mark.unit

V1_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill {}\n"
V2_EVENTS = "low 0\nhigh 0\nmax 12\noom 3\noom_kill {}\noom_group_kill 0\n"


def tree(tmp_path: Path, pid: int, proc_cgroup: str, file: str, text: str) -> tuple[str, str]:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(proc_cgroup)
    path = cg / file
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return str(proc), str(cg)


def test_v1_counter_is_found_through_the_memory_line_and_read(tmp_path):
    proc, cg = tree(tmp_path, 42, "12:pids:/docker/p/c\n4:memory:/docker/p/c\n1:name=systemd:/x\n",
                    "memory/docker/p/c/memory.oom_control", V1_CONTROL.format(2))
    counter = cgroups.oom_counter(42, proc, cg)
    assert counter == Path(cg, "memory/docker/p/c/memory.oom_control")
    assert cgroups.oom_kills(counter) == 2


def test_v2_counter_is_memory_events_of_the_unified_path(tmp_path):
    proc, cg = tree(tmp_path, 7, "0::/nestednet/abc\n", "nestednet/abc/memory.events",
                    V2_EVENTS.format(5))
    counter = cgroups.oom_counter(7, proc, cg)
    assert counter == Path(cg, "nestednet/abc/memory.events")
    assert cgroups.oom_kills(counter) == 5  # not `oom` (3), which counts limit hits


def test_gone_process_or_uncounted_kernel_gives_none(tmp_path):
    proc, cg = tree(tmp_path, 9, "4:memory:/a\n", "memory/a/memory.oom_control",
                    "oom_kill_disable 0\nunder_oom 0\n")  # before kernel 4.13
    assert cgroups.oom_counter(10, proc, cg) is None
    assert cgroups.oom_kills(cgroups.oom_counter(9, proc, cg)) is None
    assert cgroups.oom_kills(tmp_path / "missing") is None


def test_the_watch_reports_new_kills_only_once_each(tmp_path):
    files = {(1, "iphy1"): tmp_path / "a", (2, "gnab"): tmp_path / "b"}
    files[(1, "iphy1")].write_text(V1_CONTROL.format(1))  # a kill before the run
    files[(2, "gnab")].write_text(V1_CONTROL.format(0))
    seen = []
    watch = OomWatch(lab=None, on_oom=lambda *args: seen.append(args))
    watch.counters = files
    watch._seen = {k: cgroups.oom_kills(p) for k, p in files.items()}
    watch.check()
    assert seen == []
    files[(1, "iphy1")].write_text(V1_CONTROL.format(3))
    watch.check()
    watch.check()
    assert seen == [(1, "iphy1", 2, 3)]
    files[(2, "gnab")].unlink()  # the component went: no report, no error
    watch.check()
    assert seen == [(1, "iphy1", 2, 3)]


def test_starting_the_watch_wakes_no_engine(tmp_path, monkeypatch):
    """The counters come from the nodes' data roots: waking every parked engine at a
    run's start (250 at once) loaded the machine just as the first step began."""
    from types import SimpleNamespace

    from nestednet.lab import designs

    counter = tmp_path / "a"
    counter.write_text(V1_CONTROL.format(2))
    calls = []

    class Design:
        def before_use(self, lab):
            calls.append("woken")

        def oom_counters(self, lab):
            calls.append("counters")
            return {(1, "gnab"): counter}

        def close(self):
            calls.append("closed")

    monkeypatch.setattr(designs, "of", lambda meta: Design())
    watch = OomWatch(lab=SimpleNamespace(meta={}), on_oom=lambda *args: None, poll=60)
    watch.start()
    watch.stop()
    assert calls == ["counters", "closed"]
    assert watch._seen == {(1, "gnab"): 2}
