"""What the host reads from a node parent's `ready` before talking to its inner engine."""

from __future__ import annotations

import pytest

from nestednet.lab import engine

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("ready", "expected"), [
    ("cgroup=v1 docker=20.10.24+dfsg1 api=1.41 ovs=3.1.0 tso=on\n", "1.41"),
    ("cgroup=v2 docker=27.5.1 api=1.47 ovs=3.4.0 tso=on", "1.47"),
    # a parent from before the image recorded it: the client asks the engine
    ("cgroup=v1 docker=20.10.24+dfsg1 ovs=3.1.0 tso=on\n", None),
    ("cgroup=v1 api= ovs=3.1.0", None),
    ("cgroup=v1 api=latest", None),
    ("api=1.41/../../x", None),
])
def test_api_version_comes_from_ready(tmp_path, ready, expected):
    (tmp_path / "ready").write_text(ready)
    assert engine.api_version(tmp_path) == expected


def test_no_ready_file_means_ask_the_engine(tmp_path):
    assert engine.api_version(tmp_path) is None


def test_ready_with_the_runtime_still_gives_the_api_version(tmp_path):
    (tmp_path / "ready").write_text("cgroup=v1 docker=20.10.24+dfsg1 api=1.41 ovs=3.1.0 "
                                    "oci=crun tso=on\n")
    assert engine.api_version(tmp_path) == "1.41"


@pytest.mark.parametrize(("given", "expected"), [(None, "crun"), ("crun", "crun"),
                                                 ("runc", "runc")])
def test_the_children_runtime_is_crun_unless_told_runc(monkeypatch, given, expected):
    if given is None:
        monkeypatch.delenv(engine.OCI_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(engine.OCI_VARIABLE, given)
    assert engine.oci_runtime() == expected
    assert engine.parent_environment()[engine.OCI_VARIABLE] == expected


@pytest.mark.parametrize("given", ["", "kata", "CRUN", "runc "])
def test_another_runtime_is_a_usage_error_that_names_the_variable(monkeypatch, given):
    from nestednet.errors import UsageError

    monkeypatch.setenv(engine.OCI_VARIABLE, given)
    with pytest.raises(UsageError, match=r"NESTEDNET_OCI_RUNTIME=.*give crun \(the default\) "
                       r"or runc"):
        engine.oci_runtime()
