import pytest

pytestmark = pytest.mark.unit


class NoOvs:
    def bridges(self):
        return {}


def test_delete_takes_a_killed_runs_marker_and_clock_with_the_lab(tmp_path):
    """A run killed with SIGKILL leaves `<lab>.run` and `<lab>.clock` beside the lab's
    record (cleanup undoes them); `delete` of that lab must not leave them behind."""
    from nestednet.lab import runs
    from nestednet.lab.record import LabRecord
    from nestednet.lab.teardown import delete_lab

    record = LabRecord("k", tmp_path)
    record.claim()
    record.write_meta({"kind": "nested", "status": "complete"})
    marker = runs.RunMarker("k", tmp_path)
    marker.path.write_text('{"pid": 999999999, "start": ""}')
    clock = runs.ScenarioClock("k", tmp_path).path
    clock.write_text("0")
    (tmp_path / "other.run").write_text("{}")
    removed = delete_lab(record, client=object(), ovs=NoOvs())
    assert not marker.path.exists() and not clock.exists()
    assert (tmp_path / "other.run").exists(), "another lab's marker is not ours"
    assert any("k.run" in item for item in removed.items)
