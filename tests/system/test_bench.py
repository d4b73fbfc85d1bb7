"""`nestednet bench stress --quick` end to end on real labs: files, structure, and
numbers that are plausible (not specific values: the machine is shared)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nestednet.bench.stress import VARIANTS
from nestednet.cli import main as nestednet_main
from nestednet.lab.record import existing_labs

pytestmark = pytest.mark.system


def test_stress_quick_end_to_end(tmp_path):
    before = set(existing_labs())
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
        if v["cpus"] is None:
            # 120 streams on loopback with no quota on a small machine always cost the
            # baseline something; never more than all of it.
            assert 0 < v["D"] < 1, v
        else:
            assert -1 < v["D"] < 1, v
    assert set(data["quota_lowers_D"]) == {"nested", "flat"}
    assert set(existing_labs()) == before  # every lab it made is gone
