"""What `delete` could not reach on a lost host (nestednet.lab.remains) and how
`cleanup --hosts` settles it (nestednet.lab.teardown.cleanup_hosts), with the hosts
faked: a host that still does not answer is kept, one that answers is cleared."""

from __future__ import annotations

import json
import stat

import pytest

from nestednet.errors import EnvironmentProblem
from nestednet.lab import remains, teardown
from nestednet.lab.record import DIRECTORY, SERVICE, VETH, Resource
from nestednet.model.placement import Host, HostSet

pytestmark = pytest.mark.unit

RESOURCES = [Resource(SERVICE, "lx-n2", "h1"), Resource(VETH, "lx-n2-i1", "h1"),
             Resource(DIRECTORY, "/srv/lx-n2", "h1"), Resource(VETH, "lx-n1-i1", "h0"),
             Resource(VETH, "lx-ctl", "host")]


def test_delete_records_only_the_unreachable_hosts_part_privately_and_merges(tmp_path):
    path = remains.record("lx", {"hosts": []}, RESOURCES, {"h1": "no helper"}, tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert list(data["left"]) == ["h1"]
    assert data["left"]["h1"]["why"] == "no helper"
    assert [r["name"] for r in data["left"]["h1"]["resources"]] == \
        ["lx-n2", "lx-n2-i1", "/srv/lx-n2"]
    remains.record("lx", {"hosts": []}, RESOURCES, {"h1": "still not"}, tmp_path)
    again = remains.read(path)
    assert len(again["left"]["h1"]["resources"]) == 3 and again["left"]["h1"]["why"] == \
        "still not"
    assert [p.name for p, _ in remains.all_remains(tmp_path)] == ["lx.remains.json"]


class Worker:
    """A swarm worker's engine: services are the manager's business."""

    def info(self) -> dict:
        return {"Swarm": {"ControlAvailable": False}}


class Handle:
    def __init__(self, name: str) -> None:
        self.name, self.closed, self.engine = name, False, Worker()

    def close(self) -> None:
        self.closed = True


def test_cleanup_hosts_clears_the_hosts_that_answer_and_keeps_the_rest(tmp_path, monkeypatch):
    remains.record("lx", {}, [*RESOURCES, Resource(VETH, "lx-n4-i1", "h2")],
                   {"h1": "gone", "h2": "gone"}, tmp_path)
    remains.record("ly", {}, [Resource(VETH, "ly-n1-i1", "h3")], {"h3": "gone"}, tmp_path)
    hosts = HostSet(tuple(Host(n, f"10.0.0.{k}") for k, n in enumerate(("h1", "h2"), 1)),
                    insecure=True)
    handles, removed_names = [], {}

    def connect(host, hostset, connect_timeout):
        if host.name == "h2":
            raise EnvironmentProblem("host h2: no helper at 10.0.0.2:6651 (timed out)")
        handles.append(Handle(host.name))
        return handles[-1]

    def remove_found(lab, handle, names, dry_run):
        removed_names[(lab, handle.name)] = list(names)
        return [f"{handle.name}: directory {lab}-n2/"]

    monkeypatch.setattr(teardown.mh, "connect", connect)
    monkeypatch.setattr(teardown.mh, "remove_found", remove_found)
    result = teardown.cleanup_hosts(hosts, root=tmp_path)
    assert result.items == ["h1: directory lx-n2/ (lab lx, left by delete)"]
    assert removed_names == {("lx", "h1"): ["lx-n2-i1"]}
    assert all(h.closed for h in handles)
    assert sorted(result.kept) == [
        "lab lx on host h2: still not reachable (host h2: no helper at 10.0.0.2:6651 "
        "(timed out))", "lab ly on host h3: not in the hosts file"]
    assert list(remains.read(remains.path_of("lx", tmp_path))["left"]) == ["h2"]
    # h2 answers at last: the file goes with it.
    monkeypatch.setattr(teardown.mh, "connect", lambda host, hs, connect_timeout: Handle("h2"))
    result = teardown.cleanup_hosts(hosts, root=tmp_path)
    assert not remains.path_of("lx", tmp_path).exists()
    assert f"file {remains.path_of('lx', tmp_path)} (what delete could not reach)" in \
        result.items
