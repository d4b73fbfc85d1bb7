"""`make demo`, end to end, the way the README's first command runs it (issue #30).

The demo was broken for three days while every test passed, because nothing ran it.
This runs `make demo` from the repository's root as a user would (setup first, which is
quick on a machine that is set up), with only the demo's --speed raised so the 60 s
scenario plays in 6 s, then checks its summary against the events file it names and
checks the machine for anything the lab left.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from labs import forget

from nestednet.lab.record import LabRecord

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
LAB = "demo"
"""The demo's own default lab name, as `make demo` uses it."""


def _names(*cmd: str) -> list[str]:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, check=True)
    return [line for line in done.stdout.split() if line.startswith(f"{LAB}-")]


def test_demo_runs_end_to_end_and_its_summary_is_the_events_files():
    forget(LAB)
    done = subprocess.run(["make", "--no-print-directory", "demo", "DEMO_ARGS=--speed 10"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    out = done.stdout
    assert done.returncode == 0, f"stdout:\n{out}\nstderr:\n{done.stderr[-3000:]}"

    finished = re.search(r"run finished: lab demo, (\d+) steps, scenario time ([\d.]+) s; "
                         r"links made (\d+), refused (\d+), taken down (\d+), requests (\d+)",
                         out)
    assert finished, out
    steps, scenario_time, made, refused, down, requests = (
        float(g) if "." in g else int(g) for g in finished.groups())
    assert steps == 10 and scenario_time == pytest.approx(60.0, abs=6.0), out
    assert made > 0 and requests >= made, out

    *_, said, last = out.strip().splitlines()
    run_dir = Path(last)  # the last line is the run's directory, alone
    events = run_dir / "events.jsonl"
    assert said == f"events in {events}", out
    assert events.is_file() and (run_dir / "run.json").is_file(), out
    kinds = Counter(json.loads(line)["event"] for line in events.read_text().splitlines()
                    if line.strip())
    assert kinds["link_up"] == made and kinds["link_request"] == requests, kinds
    assert kinds["link_down"] == down and kinds["link_fail"] == refused, kinds
    assert kinds["hello"] >= 12, kinds

    assert f"lab {LAB} deleted" in out, out
    assert not LabRecord(LAB).exists()
    assert _names("docker", "ps", "-a", "--format", "{{.Names}}") == []
    assert _names("ovs-vsctl", "list-br") == []
