"""Kernel tests share one results file and one delay judge per parent qdisc per run.

Every delay assertion is judged by linkemu.measure.DelayJudge: a reference netem (under an
htb or hfsc class, as our shaping uses it, between two scratch namespaces built with
pyroute2) is measured right before and right after each measurement, idle around the
judged path's idle pings and, at the same one-way delay on as many directions, around the
judged path's delayed pings. Exact to 0.2 ms per delayed direction on a real kernel; in
the software-emulated VM, the reference's rise within 0.5 ms per delayed direction. Every
verdict, with what the reference showed, goes to the results file. Goodput is judged by
linkemu.measure.RateJudge against a reference class of the same rate and delay on the same
port (built with pyroute2), measured right before and right after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from recording import record

from linkemu import measure
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.capabilities.vm import in_full_kernel_vm


@pytest.fixture(scope="session")
def delay_judge() -> Iterator[Callable[[str], measure.DelayJudge]]:
    """``delay_judge(parent)``: the judge for netem under an htb or hfsc class; its
    reference path is made on first use and removed at the end of the run."""
    if not available_qdiscs()["netem"]:
        pytest.skip("needs sch_netem: run in the full-kernel VM (scripts/kernel-vm)")
    emulated = in_full_kernel_vm()
    judges: dict[str, measure.DelayJudge] = {}
    with ExitStack() as stack:
        def judge(parent: str) -> measure.DelayJudge:
            if parent not in judges:
                reference = measure.ReferencePath(parent)
                stack.callback(reference.close)
                judges[parent] = measure.DelayJudge(emulated, reference)
                record("judge", parent=parent, emulated=emulated)
            return judges[parent]

        yield judge


@pytest.fixture(scope="session")
def rate_judge() -> measure.RateJudge:
    """The goodput judge: a reference class on the same port right before and after."""
    emulated = in_full_kernel_vm()
    record("rate_judge", emulated=emulated)
    return measure.RateJudge(emulated)
