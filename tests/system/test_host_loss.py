"""Losing a host of a multi-host lab mid-run (issue #32, item 3), on the two hosts
emulated here (tests/system/emulated_hosts.py).

A 4 x 2 lab spread over h0 (n1, n3) and h1 (n2, n4) plays a scenario whose first step
links n1-n3 (on h0), n2-n4 (on h1) and n1-n2, n3-n4 (across). Once the four links are
up, h1 is stopped as a host that loses its power: `docker kill` of its container, so its
engine, its helper, its switch, its nodes and its network go at once. Then:

- the run goes on: a `host_lost` event names h1 and its nodes n2 and n4; the three
  links that touch them come down, each `link_down` naming why; h0's switch keeps only
  n1-n3's flows; `status` says n2 and n4 are unreachable, n1 and n3 running; a later
  step takes n1-n3 down and the next makes it again (flows on
  h0 only), and the run ends normally (exit 0) with the loss in its summary;
- `delete` removes everything on h0 and on this machine, says h1 was not reachable and
  records what the lab has there;
- h1 comes back (its container started again, its OVSDB listeners configured as its
  admin's boot would): `cleanup --hosts FILE` removes the rest there, and nothing of
  the lab is left on either host.

Marked multihost: `scripts/test host-loss` runs it (the emulated hosts' start-up is most
of its time); `make test` leaves it out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import emulated_hosts
import pytest

from nestednet.adapters import netlink, openflow
from nestednet.hostd.client import HelperClient
from nestednet.hostd.service import port_of
from nestednet.lab import multihost as mh
from nestednet.lab import remains
from nestednet.lab.links import COOKIE_MARK
from nestednet.lab.record import LabRecord
from nestednet.model import placement as pl
from nestednet.model import topology as topo
from nestednet.model.events import read_events

pytestmark = [pytest.mark.system, pytest.mark.multihost]

LAB = "hlost"
CLI = str(Path(sys.executable).parent / "nestednet")
T_DROP, T_BACK, DURATION = 50, 60, 70
SCENARIO = {
    "format": "nestednet-scenario/1", "name": "host-loss-4x2", "duration": DURATION,
    "iphys": 2, "nodes": [{"name": f"n{k}", "id": k} for k in (1, 2, 3, 4)],
    "steps": [
        {"time": 0, "visible": [["n1", "n3"], ["n2", "n4"], ["n1", "n2"], ["n3", "n4"]]},
        {"time": T_DROP, "visible": [["n2", "n4"], ["n1", "n2"], ["n3", "n4"]]},
        {"time": T_BACK, "visible": [["n1", "n3"], ["n2", "n4"], ["n1", "n2"], ["n3", "n4"]]},
    ],
}


def nn(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def events_of(path: Path, kind: str | None = None) -> list:
    if not path.exists():
        return []
    return [e for e in read_events(path) if kind is None or e.event == kind]


def wait_for(what: str, check, timeout: float):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)
    return found


def link_cookies(hosts, host: str) -> set[int]:
    """The lab's link cookies on ``host``'s main bridge, read through its management
    socket (the test's own view, which works with the host cut off too)."""
    channel = openflow.Channel(topo.main_bridge(LAB), rundir=str(hosts.local[host].state / "ovs"))
    try:
        return {c for c in channel.cookies() if c >> 48 == COOKIE_MARK >> 48}
    finally:
        channel.close()


def on_host(hosts, host: str) -> list[str]:
    """What of the lab the host's state directory and kernel hold (the test's view)."""
    local = hosts.local[host]
    with netlink.route(local.netns) as ipr:
        left = [n for link in ipr.get_links()
                if (n := link.get_attr("IFLA_IFNAME") or "").startswith(f"{LAB}-")]
    return left + [f"{d.name}/" for d in local.state.glob(f"{LAB}-n*")]


def bring_back(hosts, name: str) -> float:
    """Start the host's container again and redo what its admin's boot would (OVSDB
    listening on its address); seconds until its helper answers."""
    t0 = time.monotonic()
    container = hosts.client.containers.get(name)
    (hosts.root / name / "ready").unlink(missing_ok=True)  # the killed run's, not this one's
    # A reboot empties /run: the killed dockerd's pid file would stop the new one.
    upper = Path(container.attrs["GraphDriver"]["Data"]["UpperDir"])
    for stale in ("run/docker.pid", "var/run/docker.pid"):
        (upper / stale).unlink(missing_ok=True)
    container.start()
    emulated_hosts._wait_ready(hosts.root / name)
    container.reload()
    pid = int(container.attrs["State"]["Pid"])
    hosts.local[name] = emulated_hosts.Local(f"/proc/{pid}/ns/net", pid, hosts.root / name)
    address = hosts.hostset.named(name).address
    done = container.exec_run(["sh", "-c", emulated_hosts.PREPARE.format(
        env=emulated_hosts.OVS_ENV, tcp=emulated_hosts.OVSDB_TCP,
        ssl=emulated_hosts.OVSDB_SSL, address=address)])
    assert done.exit_code == 0, done.output.decode()
    helper = HelperClient(name, address, port_of(hosts.hostset), None, timeout=5,
                          insecure=True, connect_timeout=2)
    try:
        wait_for(f"{name}'s helper", lambda: _answers(helper), 240)
    finally:
        helper.close()
    return time.monotonic() - t0


def _answers(helper: HelperClient) -> bool:
    try:
        helper.call("hello")
    except Exception:
        return False
    return True


@pytest.fixture(scope="module")
def hosts(emulated):
    try:
        yield emulated
    finally:
        if LabRecord(LAB).exists():
            nn("delete", "--lab", LAB)
        # The emulated hosts go at the session's end, and with them what was left there.
        remains.path_of(LAB).unlink(missing_ok=True)


def test_a_host_lost_mid_run(hosts, tmp_path):
    hosts_file = tmp_path / "hosts.json"
    hosts_file.write_text(json.dumps(pl.hosts_doc(hosts.hostset)))
    made = nn("create", "--lab", LAB, "-n", "4", "-m", "2", "--hosts", str(hosts_file))
    assert made.returncode == 0, made.stderr
    h0, h1 = hosts.names
    placement = LabRecord(LAB).meta()["placement"]
    assert placement == {"1": h0, "2": h1, "3": h0, "4": h1}, placement
    scenario, events = tmp_path / "loss.json", tmp_path / "events.jsonl"
    scenario.write_text(json.dumps(SCENARIO))
    run = subprocess.Popen([CLI, "run", str(scenario), "--lab", LAB, "--events", str(events),
                            "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        wait_for("four links", lambda: len(events_of(events, "link_up")) == 4, 180)
        assert len(link_cookies(hosts, h0)) == 3 and len(link_cookies(hosts, h1)) == 3

        hosts.client.containers.get(h1).kill()  # engine, helper, nodes, network: all at once
        t_cut = time.monotonic()
        lost = wait_for("host_lost event", lambda: events_of(events, "host_lost"), 60)
        detected_s = time.monotonic() - t_cut
        cookies_after = link_cookies(hosts, h0)
        status = nn("status", "--lab", LAB, "--json")
        out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(60)
    assert run.returncode == 0, err
    summary = json.loads(out)
    records = events_of(events)  # every line parses

    assert len(lost) == 1, lost
    assert lost[0].extra["host"] == h1 and lost[0].nodes == ("n2", "n4")
    assert lost[0].extra["links"] == 3
    at = records.index(lost[0])
    downs = [e for e in records[at:] if e.event == "link_down"][:3]
    assert {frozenset(e.nodes) for e in downs} == {frozenset(p) for p in
                                                    (("n1", "n2"), ("n3", "n4"), ("n2", "n4"))}
    assert all(e.reason and f"host {h1} lost" in e.reason for e in downs), downs
    assert len(cookies_after) == 1, "h0 keeps n1-n3's flows only"
    assert status.returncode == 0, status.stderr
    states = {n["node"]: (n["host"], n["state"]) for n in json.loads(status.stdout)["nodes"]}
    assert states == {"n1": (h0, "running"), "n2": (h1, "unreachable"),
                      "n3": (h0, "running"), "n4": (h1, "unreachable")}, states
    # The run went on: n1-n3 down at T_DROP and up again at T_BACK, on h0 alone.
    later = [(e.event, frozenset(e.nodes), e.step) for e in records[at:]
             if e.event in ("link_up", "link_down") and set(e.nodes) == {"n1", "n3"}]
    assert later == [("link_down", frozenset({"n1", "n3"}), 1),
                     ("link_up", frozenset({"n1", "n3"}), 2)], later
    assert not [e for e in records[at:] if e.event == "link_up" and
                set(e.nodes) & {"n2", "n4"}], "a dead node got a link"
    assert summary["lost_hosts"] == {h1: {"nodes": ["n2", "n4"], "links_down": 3}}
    assert summary["steps_played"] == 3 and not summary["interrupted"]
    assert link_cookies(hosts, h0) == set(), "the run withdrew its links on h0 at its end"

    print(f"\n[host-loss] h1 declared lost {detected_s:.1f} s after it was stopped")
    t0 = time.monotonic()
    gone = nn("delete", "--lab", LAB)
    delete_s = time.monotonic() - t0
    assert gone.returncode == 0, gone.stderr
    assert f"host {h1}: not reachable" in gone.stderr, gone.stderr
    assert not LabRecord(LAB).exists()
    kept = remains.read(remains.path_of(LAB))
    assert kept is not None and list(kept["left"]) == [h1], kept
    assert mh.leftovers(LAB, hosts.manager, [hosts.handles[h0]]) == []
    assert on_host(hosts, h0) == []
    assert not Path(f"/run/netns/{topo.control_netns(LAB)}").exists()

    back_s = bring_back(hosts, h1)
    assert on_host(hosts, h1), "h1 came back with the lab's state directories"
    t0 = time.monotonic()
    cleaned = nn("cleanup", "--hosts", str(hosts_file), "--json")
    cleanup_s = time.monotonic() - t0
    assert cleaned.returncode == 0, cleaned.stderr
    removed = json.loads(cleaned.stdout)["removed"]
    assert any(f"{h1}: directory {LAB}-n2/" in item for item in removed), removed
    assert not remains.path_of(LAB).exists()
    handles = mh.connect_all(hosts.hostset, hosts.names)
    try:
        assert mh.leftovers(LAB, hosts.manager, handles.values()) == []
    finally:
        mh.close_all(handles.values())
    assert on_host(hosts, h0) == [] and on_host(hosts, h1) == []
    print(f"\n[host-loss] events: {[(e.event, e.scenario_time) for e in records[at - 1:at + 4]]}")
    print(f"\n[host-loss] h1 declared lost {detected_s:.1f} s after it was stopped; "
          f"delete {delete_s:.1f} s; h1 back (helper answering) in {back_s:.1f} s; "
          f"cleanup --hosts {cleanup_s:.1f} s; removed there: {removed}")
