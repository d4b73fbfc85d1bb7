"""`nestednet run` without a lab: step lines from events, results directory, --iphys
default, the events tail and Ctrl-C handling."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from nestednet.ca import runner
from nestednet.cli import run as run_cli
from nestednet.lab import runs
from nestednet.lab.record import LabRecord
from nestednet.model import events as ev
from nestednet.model.scenario_file import load_scenario
from nestednet.model.step_figures import StepTally

pytestmark = pytest.mark.unit

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_a_step_is_reported_once_the_next_begins_with_what_the_events_say():
    tally = StepTally()
    assert tally.add([ev.Event(ev.STEP, 0.0, step=0),
                      ev.Event(ev.LINK_REQUEST, 0.0, step=0, nodes=("a", "b"), iphys=(1,))]) == []
    # the link_up of step 0 arrives late, after the live line of old would have printed 0
    late = [ev.Event(ev.LINK_UP, 0.0, step=0, nodes=("a", "b"), iphys=(1, 1)),
            ev.Event(ev.LINK_REQUEST, 0.0, step=0, nodes=("b", "c"), iphys=(2,)),
            ev.Event(ev.LINK_FAIL, 0.0, step=0, nodes=("b", "c"), iphys=(2,), reason="x")]
    assert tally.add(late) == []
    (first,) = tally.add([ev.Event(ev.STEP, 10.0, step=1),
                          ev.Event(ev.LINK_DOWN, 10.0, step=1, nodes=("a", "b"), iphys=(1, 1))])
    assert (first.step, first.scenario_time, first.requests, first.links_up, first.refused,
            first.links_down, first.links_after) == (0, 0.0, 2, 1, 1, 0, 1)
    (second,) = tally.finish()
    assert (second.step, second.links_down, second.links_after) == (1, 1, 0)
    assert tally.finish() == []


def test_step_figures_equal_the_event_counts_of_a_whole_scenario():
    sys.path.insert(0, str(Path(__file__).parent))
    import agent_sim

    scenario = load_scenario(SCENARIOS / "demo-12x4.json")
    _, events, _ = agent_sim.run(scenario)
    tally = StepTally()
    figures = tally.add(events) + tally.finish()
    assert [f.step for f in figures] == list(range(len(scenario.steps)))
    counts = Counter((e.step, e.event) for e in events)
    for f in figures:
        assert (f.requests, f.links_up, f.refused, f.links_down) == (
            counts[(f.step, ev.LINK_REQUEST)], counts[(f.step, ev.LINK_UP)],
            counts[(f.step, ev.LINK_FAIL)], counts[(f.step, ev.LINK_DOWN)])
    assert figures[-1].links_after == sum(f.links_up - f.links_down for f in figures) > 0


def test_results_directories_are_new_and_outside_the_labs(tmp_path):
    a = runs.results_dir("demo", tmp_path, now=0)
    b = runs.results_dir("demo", tmp_path, now=0)
    assert a != b and a.is_dir() and b.is_dir()
    assert a.name.startswith("demo-") and b.name == f"{a.name}-2"
    assert runs.RUNS_DIR.name == "runs" and not runs.RUNS_DIR.is_relative_to(
        LabRecord("demo").path)


def test_iphys_default_is_the_existing_labs(tmp_path, monkeypatch):
    record = LabRecord("small", tmp_path)
    record.path.mkdir()
    record.write_meta({"nodes": 4, "iphys": 2, "status": "complete"})
    assert runs.lab_iphys("small", tmp_path) == 2
    assert runs.lab_iphys("absent", tmp_path) is None
    monkeypatch.setattr(runs, "lab_iphys", lambda lab: {"small": 2}.get(lab))
    assert runner.iphys_for("small", None) == 2
    assert runner.iphys_for("small", 3) == 3
    assert runner.iphys_for("absent", None) == 4
    # a 4-node NestedNet-format file then needs exactly the 4 x 2 lab's shape
    scenario = load_scenario(SCENARIOS / "nestednet-format-example.json",
                             nestednet_iphys=runner.iphys_for("small", None))
    assert {n.iphys for n in scenario.nodes} == {2}


def test_event_tail_reads_whole_lines_and_skips_earlier_runs(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(ev.Event(ev.STEP, 0.0, step=0).to_line() + "\n")
    tail = runs.EventTail(path)
    assert tail.read() == []
    line = ev.Event(ev.STEP, 5.0, step=1).to_line()
    with path.open("a") as f:
        f.write(line[:10])
        f.flush()
        assert tail.read() == []
        f.write(line[10:] + "\n")
    assert [e.step for e in tail.read()] == [1]
    assert runs.EventTail(tmp_path / "none.jsonl").read() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_sets_stop_instead_of_raising_and_restores_the_handler(sig):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    stop = threading.Event()
    with run_cli._signals_stop(stop.set) as received:
        os.kill(os.getpid(), sig)
        assert stop.wait(5) and received == [sig]
    assert {s: signal.getsignal(s) for s in before} == before


def test_run_help_teaches_the_new_defaults():
    from click.testing import CliRunner

    from nestednet.cli import main

    result = CliRunner().invoke(main, ["run", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "the existing lab's count" in text and "outlives the lab" in text
    assert "exit 130" in text


def test_the_summary_ends_with_the_run_directory_alone_on_its_line(capsys):
    """`report "$(nestednet run ... | tail -n 1)"`: the last line is the bare directory."""
    from nestednet.ca.session import RunSummary

    summary = RunSummary(lab="x", created_lab=False, events="/tmp/ev.jsonl",
                         run_dir="/var/lib/nestednet/runs/x-20261126-101500")
    run_cli._print_summary(summary, None, as_json=False)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "/var/lib/nestednet/runs/x-20261126-101500"
    assert lines[-2] == "events in /tmp/ev.jsonl"
