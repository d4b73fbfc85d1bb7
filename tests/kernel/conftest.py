"""Kernel tests share one results file and one delay calibration per parent qdisc per run.

The calibration measures how late netem fires on *this* kernel in *this* run (netem delays
of 1, 5, 10, 20 and 50 ms under an htb or hfsc class, as our shaping uses it, on one
direction between two scratch namespaces) and turns
it into the judge every delay assertion uses (linkemu.measure.DelayJudge): exact to 0.2 ms
per delayed direction on a real kernel; in the software-emulated VM, the lateness measured
at that delay (interpolated between references) within 0.5 ms per delayed direction. The
calibration and every verdict go to the results file.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from recording import record

from linkemu import measure
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.capabilities.vm import in_full_kernel_vm


@pytest.fixture(scope="session")
def delay_judge() -> Callable[[str], measure.DelayJudge]:
    """``delay_judge(parent)``: the judge for netem under an htb or hfsc class, calibrated
    on first use in this run (each parent adds lateness of its own in the VM)."""
    if not available_qdiscs()["netem"]:
        pytest.skip("needs sch_netem: run in the full-kernel VM (scripts/kernel-vm)")
    emulated = in_full_kernel_vm()
    judges: dict[str, measure.DelayJudge] = {}

    def judge(parent: str) -> measure.DelayJudge:
        if parent not in judges:
            rises, idle, delayed = measure.reference_rises(parent)
            record("calibration", emulated=emulated, parent=parent, rises_ms=rises,
                   idle=idle.summary(),
                   delayed={str(d): pings.summary() for d, pings in delayed.items()})
            try:
                judges[parent] = measure.judge_for(emulated, rises)
            except ValueError as exc:
                pytest.fail(f"netem calibration under {parent}: {exc}")
            record("judge", parent=parent, **judges[parent].as_dict())
        return judges[parent]

    return judge
