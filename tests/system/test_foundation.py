"""The foundation on the real engine: images, doctor, and clear errors for bad states."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ovs.json
import pytest

from nestednet import images
from nestednet.adapters import docker_engine
from nestednet.adapters.ovsdb import HOST_VSWITCHD_PIDFILE
from nestednet.capabilities.nodes import cgroup_version, ovs_datapath, parent_security_mode
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.errors import EnvironmentProblem

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
NESTEDNET = [sys.executable, "-m", "nestednet.cli"]


def _cli(*args: str, env: dict | None = None, user: int | None = None):
    argv = [*NESTEDNET, *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, **(env or {})})


def test_second_build_is_cached():
    built = _cli("images", "build", "--json")
    assert built.returncode == 0, built.stderr
    again = _cli("images", "build", "--json")
    assert again.returncode == 0, again.stderr
    rows = json.loads(again.stdout)
    assert {r["tag"] for r in rows} == {images.COMPONENT_IMAGE, images.DIND_IMAGE,
                                        images.HOSTD_IMAGE}
    assert all(r["cached"] for r in rows), rows


def test_component_image_has_iperf3_and_ping():
    client = docker_engine.connect()
    out = client.containers.run(
        images.COMPONENT_IMAGE,
        ["sh", "-c", "iperf3 --version | head -n 1 && ping -c 1 -W 2 127.0.0.1 && python3 -V"],
        network_mode="none", remove=True, labels={"org.nestednet.test": "foundation"})
    text = out.decode()
    assert "iperf 3" in text
    assert "1 received" in text
    assert "Python 3" in text


def test_doctor_json_agrees_with_detection():
    done = _cli("doctor", "--json")
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert done.returncode == (0 if report["ready_for_create"] else 1)
    for kind, present in available_qdiscs().items():
        assert checks[f"qdisc:{kind}"]["ok"] is present
    datapath = ovs_datapath()
    assert ("userspace" in checks["datapath"]["detail"]) is (datapath == "netdev")
    assert checks["cgroup"]["detail"].startswith(f"cgroup {cgroup_version()}")
    mode = parent_security_mode(images.COMPONENT_IMAGE)
    assert ("fallback" in checks["privileged"]["detail"]) is (mode == "capset")
    assert checks["ovs json"]["ok"] is (ovs.json.PARSER == "C")
    # The switch's CPU priority, read here with chrt and the autogroup file directly.
    pid = HOST_VSWITCHD_PIDFILE.read_text().strip()
    policy = subprocess.run(["chrt", "-p", pid], capture_output=True, text=True).stdout
    grouped = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    if "SCHED_FIFO" in policy or "SCHED_RR" in policy:
        ahead = True
    elif grouped:
        ahead = Path(f"/proc/{pid}/autogroup").read_text().split()[-1].startswith("-")
    else:
        ahead = os.getpriority(os.PRIO_PROCESS, int(pid)) < 0
    assert checks["switch cpu"]["ok"] is ahead, checks["switch cpu"]
    for c in report["checks"]:
        assert c["ok"] or c["fix"] or c["name"] == "privileged", c


def test_setup_gave_python_ovs_its_c_json_parser():
    """scripts/setup links Debian's compiled JSON lexer into the venv (PyPI's python-ovs
    has none); it reads an OVSDB update as the standard library does (doctor's line on it:
    test_doctor_json_agrees_with_detection)."""
    assert ovs.json.PARSER == "C"
    assert type(ovs.json.Parser()).__module__ == "ovs._json"
    message = ('{"id":null,"method":"update2","params":[["monid","Open_vSwitch"],'
               '{"Interface":{"5c1e":{"insert":{"name":"nn-n1-i1","ofport":3,'
               '"external_ids":["map",[["org.nestednet.lab","l\\u00e9"]]],'
               '"mtu":["set",[]],"link_speed":1.0e10}}}}]}')
    parser = ovs.json.Parser()
    assert parser.feed(message) == len(message)
    assert parser.finish() == json.loads(message)


def test_engine_down_is_a_clear_error(tmp_path: Path):
    nowhere = f"unix://{tmp_path}/no-engine.sock"
    with pytest.raises(EnvironmentProblem, match="not reachable") as caught:
        docker_engine.connect(nowhere, timeout=5)
    assert "scripts/setup" in (caught.value.hint or "")
    done = _cli("images", "list", env={"DOCKER_HOST": nowhere})
    assert done.returncode == 1
    assert "Docker engine not reachable" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_image_is_a_clear_error():
    client = docker_engine.connect()
    with pytest.raises(EnvironmentProblem, match="nestednet/absent:latest is missing") as caught:
        images.require(client, "nestednet/absent:latest")
    assert "nestednet images build" in (caught.value.hint or "")


def test_not_root_is_a_clear_error():
    setup = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            str(ROOT / "scripts" / "setup")], capture_output=True, text=True,
                           timeout=60)
    assert setup.returncode == 1
    assert "run as root" in setup.stderr
    doctor = _cli("doctor", "--json", user=65534)
    assert doctor.returncode == 1
    root_check = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "root")
    assert root_check["ok"] is False and root_check["fix"] == "run as root"
