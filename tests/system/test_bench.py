"""`nestednet bench stress --quick` end to end on real labs: files, structure, and
numbers that are plausible (not specific values: the machine is shared)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from nestednet.bench.common import LAB_PREFIX
from nestednet.bench.stress import VARIANTS
from nestednet.cli import main as nestednet_main
from nestednet.lab.record import existing_labs

pytestmark = [pytest.mark.system, pytest.mark.long]


def test_stress_quick_end_to_end(tmp_path):
    ours = f"{LAB_PREFIX}{os.getpid() % 1000}x"  # the names this process's bench gives labs
    result = CliRunner().invoke(nestednet_main, ["bench", "stress", "--quick", "--out",
                                                 str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "stress.json").read_text())
    assert (tmp_path / "stress.png").stat().st_size > 1000
    assert "paper D" in (tmp_path / "stress.md").read_text()
    for key in ("cores", "memory_mb", "kernel", "ovs_datapath", "docker"):
        assert data["machine"][key], key
    assert data["machine"]["ovs_datapath"] in ("netdev", "system")
    assert data["mode"] == "quick" and data["params"]["streams"] == 120
    assert [(v["kind"], v["cpus"]) for v in data["variants"]] == list(VARIANTS)
    for v in data["variants"]:
        assert v["t1_gbps"] > 0 and v["t2_gbps"] > 0 and v["baseline_gbps"] > 0
        assert v["stress_gbps"] > 0
        assert len(v["series"]) >= data["params"]["total_s"] - 1
        start, end = v["stress_window_s"]
        assert 0 < start < end < data["params"]["total_s"] + 2
        assert v["D"] == pytest.approx((v["t1_gbps"] - v["t2_gbps"]) / v["t1_gbps"])
        # Plausible, not specific: D is a fraction below 1 (T2 >= 0), and above -1 (the
        # baseline did not double under stress). D > 0 itself is not asserted: with other
        # work on a small shared machine, the load outside the lab can change more between
        # the two windows than the stress does (seen here at load average 20 on 2 cores).
        assert -1 < v["D"] < 1, v
        assert -1 < v["D_median"] < 1, v
    assert set(data["quota_lowers_D"]) == {"nested", "flat"}
    assert not [lab for lab in existing_labs() if lab.startswith(ours)]  # all deleted
