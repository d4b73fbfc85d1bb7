"""Reading ping's output (linkemu/measure.py): what the kernel tests and bench judge by."""

from __future__ import annotations

import pytest

from linkemu import measure

PER_PACKET = """PING 198.19.0.2 (198.19.0.2) 56(84) bytes of data.
64 bytes from 198.19.0.2: icmp_seq=1 ttl=62 time=5.52 ms
64 bytes from 198.19.0.2: icmp_seq=3 ttl=62 time=5.61 ms
64 bytes from 198.19.0.2: icmp_seq=4 ttl=62 time=25.1 ms

--- 198.19.0.2 ping statistics ---
4 packets transmitted, 3 received, 25% packet loss, time 61ms
rtt min/avg/max/mdev = 5.520/12.076/25.100/9.211 ms
"""

ALL_LOST = """PING 198.19.0.2 (198.19.0.2) 56(84) bytes of data.

--- 198.19.0.2 ping statistics ---
2 packets transmitted, 0 received, +2 errors, 100% packet loss, time 1029ms
"""


@pytest.mark.unit
def test_per_packet_times_counts_and_statistics():
    result = measure.parse_ping(PER_PACKET)
    assert (result.sent, result.received) == (4, 3)
    assert result.rtts_ms == (5.52, 5.61, 25.1)
    assert result.loss_pct == 25.0
    assert result.median_ms == 5.61 and result.min_ms == 5.52
    assert result.p90_ms == 5.61  # the 90th percentile by rank of three samples
    assert result.summary()["median_ms"] == 5.61


@pytest.mark.unit
def test_nothing_received_has_no_rtts_and_full_loss():
    result = measure.parse_ping(ALL_LOST)
    assert (result.sent, result.received, result.rtts_ms) == (2, 0, ())
    assert result.loss_pct == 100.0
    assert result.summary()["median_ms"] is None


@pytest.mark.unit
def test_text_that_is_not_ping_output_is_refused():
    with pytest.raises(ValueError, match="not ping output"):
        measure.parse_ping("ping: connect: Network is unreachable\n")


@pytest.mark.unit
def test_head_of_line_rise_is_loaded_minus_idle_median():
    idle = measure.parse_ping(PER_PACKET)
    loaded = measure.PingResult(3, 3, (6.0, 7.0, 8.0))
    assert measure.HeadOfLine(idle, loaded).rise_ms == round(7.0 - 5.61, 3)
    assert measure.HeadOfLine(idle, measure.parse_ping(ALL_LOST)).rise_ms is None


# --- the delay judge (calibrated against a reference in the same run) ------------------


@pytest.mark.unit
def test_real_kernel_judges_against_the_configured_delay_within_0_2_ms():
    judge = measure.judge_for(emulated=False, rises={1.0: 1.02, 10.0: 10.05, 50.0: 49.9})
    assert judge.tolerance_ms == 0.2 and judge.expected_ms(20) == 20
    assert judge.holds(20, 20.19) and not judge.holds(20, 20.21)
    assert judge.holds(22, 22.39, directions=2) and not judge.holds(22, 22.41, directions=2)


# Lateness seen in one VM run (session 4): it grows with the delay, then levels off.
VM_RISES = {1.0: 1.2, 5.0: 5.5, 10.0: 10.7, 20.0: 20.8, 50.0: 50.75}


@pytest.mark.unit
def test_emulated_kernel_expects_the_lateness_measured_at_that_delay():
    judge = measure.judge_for(emulated=True, rises=VM_RISES)
    assert judge.lateness_ms == {1.0: 0.2, 5.0: 0.5, 10.0: 0.7, 20.0: 0.8, 50.0: 0.75}
    assert judge.expected_ms(1) == 1.2 and judge.expected_ms(50) == 50.75
    # between references: linear; beyond them: the nearest reference's lateness
    assert judge.late_at(7.5) == 0.6 and judge.late_at(35) == 0.775
    assert judge.late_at(0.5) == 0.2 and judge.late_at(80) == 0.75
    # the RTT's delay is spread over the delayed directions: 2 x 11 ms one way
    assert judge.expected_ms(22, directions=2) == round(22 + 2 * 0.71, 3)
    assert judge.holds(1, 1.65) and not judge.holds(1, 1.75)
    assert judge.holds(50, 50.3) and not judge.holds(50, 50.2)
    verdict = judge.verdict(20, 21.075)
    assert verdict == {"configured_ms": 20, "directions": 1, "rise_ms": 21.075,
                       "expected_ms": 20.8, "bound_ms": 0.5, "holds": True}


@pytest.mark.unit
def test_one_reference_mispredicts_what_several_get_right():
    """Session 4's flakes: judged from 10 ms alone, a 1 ms delay that was exactly as late
    as plain netem at 1 ms fell outside the bound."""
    single = measure.judge_for(emulated=True, rises={10.0: 10.9})
    several = measure.judge_for(emulated=True, rises={**VM_RISES, 10.0: 10.9})
    assert not single.holds(1, 1.2) and several.holds(1, 1.2)


@pytest.mark.unit
def test_a_calibration_that_cannot_be_trusted_is_refused():
    with pytest.raises(ValueError, match="nothing can be judged"):
        measure.judge_for(emulated=True, rises={**VM_RISES, 20.0: 22.5})
    with pytest.raises(ValueError, match="nothing can be judged"):
        measure.judge_for(emulated=True, rises={10.0: 9.0})
    with pytest.raises(ValueError, match="real kernel"):
        measure.judge_for(emulated=False, rises={1.0: 1.0, 10.0: 10.5})
    with pytest.raises(ValueError, match="no reference"):
        measure.judge_for(emulated=True, rises={})
