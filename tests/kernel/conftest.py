"""Kernel tests share one results file and one delay calibration per run.

The calibration measures how late netem fires on *this* kernel in *this* run (plain netem
delays of 1, 5, 10, 20 and 50 ms on one direction between two scratch namespaces) and turns
it into the judge every delay assertion uses (linkemu.measure.DelayJudge): exact to 0.2 ms
per delayed direction on a real kernel; in the software-emulated VM, the lateness measured
at that delay (interpolated between references) within 0.5 ms per delayed direction. The
calibration and every verdict go to the results file.
"""

from __future__ import annotations

import pytest
from recording import record

from linkemu import measure
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.capabilities.vm import in_full_kernel_vm


@pytest.fixture(scope="session")
def delay_judge() -> measure.DelayJudge:
    if not available_qdiscs()["netem"]:
        pytest.skip("needs sch_netem: run in the full-kernel VM (scripts/kernel-vm)")
    emulated = in_full_kernel_vm()
    rises, idle, delayed = measure.reference_rises()
    record("calibration", emulated=emulated, rises_ms=rises, idle=idle.summary(),
           delayed={str(d): pings.summary() for d, pings in delayed.items()})
    try:
        judge = measure.judge_for(emulated, rises)
    except ValueError as exc:
        pytest.fail(f"netem calibration: {exc}")
    record("judge", **judge.as_dict())
    return judge
