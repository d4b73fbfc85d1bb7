"""The scripts in docs/examples/ run as a user runs them, each on a small lab of its own.

make test runs the two quick ones; `scripts/test examples` (NESTEDNET_ALL_EXAMPLES=1)
runs the iperf3 one too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from labs import forget

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
ALL = bool(os.environ.get("NESTEDNET_ALL_EXAMPLES"))


def _run(script: str, *args: str, lab: str) -> subprocess.CompletedProcess:
    forget(lab)
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    print(done.stdout, done.stderr)
    assert not (Path("/var/lib/nestednet/labs") / lab).exists(), "the example left its lab"
    return done


def test_line_with_babel_pings_across_the_middle_node() -> None:
    done = _run("line_babel.py", "apiexl", lab="apiexl")
    assert done.returncode == 0, done.stderr
    assert "3 packets transmitted, 3 received" in done.stdout
    assert "10.100.0.3 via" in done.stdout, "n1 routes n3's address through a neighbour"


def test_scenario_run_reacts_to_its_link_events() -> None:
    done = _run("scenario_events.py", "apiexe", lab="apiexe")
    assert done.returncode == 0, done.stderr
    ups = [line for line in done.stdout.splitlines() if " up; ping " in line]
    assert ups and all(line.endswith("ping ok") for line in ups), done.stdout
    assert "down" in done.stdout and "links made" in done.stdout


@pytest.mark.skipif(not ALL, reason="`scripts/test examples` runs it (NESTEDNET_ALL_EXAMPLES=1)")
def test_iperf_rate_change_is_plotted(tmp_path: Path) -> None:
    out = tmp_path / "rate.png"
    done = _run("iperf_rate_change.py", str(out), "apiexi", lab="apiexi")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    words = done.stdout.split()
    before = float(words[words.index("change") + 1])
    after = float(words[words.index("after") + 1])
    assert 15 <= before <= 21 and 3.5 <= after <= 5.5, done.stdout


def test_the_readme_python_tour_runs_as_written() -> None:
    """The Python part of the README's tour (shown on the docs' home page too)."""
    text = (ROOT / "README.md").read_text()
    tour = text[text.index("[start:tour]"):text.index("[end:tour]")]
    code = tour[tour.index("```python\n") + len("```python\n"):]
    code = code[:code.index("```")]
    lab = re.search(r'Lab\.create\("(\w+)"', code).group(1)
    forget(lab)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2 packets transmitted, 2 received" in done.stdout
    assert "rate_bps=5000000" in done.stdout, "the rate was set in place"
    assert not (Path("/var/lib/nestednet/labs") / lab).exists()
