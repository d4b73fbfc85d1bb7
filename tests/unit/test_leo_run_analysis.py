"""scripts/bench/leo_run.py's ping analysis: answered share per step, gaps at handovers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "leo_run.py"


def load():
    spec = importlib.util.spec_from_file_location("leo_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ping_output(start: float, answered: set[int], sent: int, rtt_ms: float = 2.0) -> str:
    lines = [f"[{start + (seq - 1) * 0.2 + rtt_ms / 1000:.6f}] 64 bytes from 10.100.0.69: "
             f"icmp_seq={seq} ttl=62 time={rtt_ms} ms" for seq in sorted(answered)]
    lines.append(f"{sent} packets transmitted, {len(answered)} received")
    return "\n".join(lines)


def test_shares_per_step_and_the_gap_at_a_handover():
    leo = load()
    start = 1000.0
    # 10 s steps at 1000, 1010, 1020: 50 pings each; seqs 60..74 (3 s) go unanswered
    lost = set(range(60, 75))
    text = ping_output(start, set(range(1, 151)) - lost, 150)
    answered, sent = leo.send_times(text, start)
    assert sent == 150 and len(answered) == 135
    assert answered[1] == pytest.approx(start)
    result = leo.analyse(answered, sent, start, [1000.0, 1010.0, 1020.0], 1030.0, [1])
    assert result["per_step_answered_share"] == [1.0, 0.7, 1.0]
    (gap,) = result["handovers"]
    assert gap["longest_gap_in_step_s"] == 3.0
    assert gap["first_answer_after_s"] == pytest.approx(0.0, abs=1e-6)
    later = leo.analyse(answered, sent, start, [1000.0, 1011.8, 1020.0], 1030.0, [1])
    assert later["handovers"][0]["first_answer_after_s"] == pytest.approx(3.0, abs=1e-6)


def test_no_answers_at_all():
    leo = load()
    answered, sent = leo.send_times("5 packets transmitted, 0 received", 0.0)
    result = leo.analyse(answered, sent, 0.0, [0.0], 2.0, [])
    assert result["answered_share"] == 0 and result["per_step_answered_share"] == [0.0]
