"""The Python API's pure parts: lazy exports, commands and processes (against a real local
``sh``), scenarios built, generated, saved and loaded, and create's input checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import nestednet as nn
from nestednet.api import process
from nestednet.api.links import properties_given
from nestednet.ca.runner import RunRequest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_import_nestednet_loads_neither_docker_nor_the_api() -> None:
    loaded = _loaded_after("import nestednet")
    assert not {"docker", "ovs", "pyroute2", "nestednet.api.lab"} & loaded


def test_every_public_name_resolves_is_listed_and_documented() -> None:
    names = set(nn.__all__) - {"LABEL_PREFIX", "__version__"}
    assert names == set(nn._PUBLIC)
    assert names <= set(dir(nn))
    for name in names:
        value = getattr(nn, name)
        assert value.__doc__, f"nn.{name} has no docstring"
    with pytest.raises(AttributeError):
        nn.NoSuchThing  # noqa: B018


def test_the_errors_are_the_command_lines() -> None:
    from nestednet import errors

    assert nn.InputError is errors.UsageError
    assert nn.InputError.exit_code == 2 and issubclass(nn.InputError, nn.NestedNetError)
    assert nn.EnvironmentProblem.exit_code == 1


def _local(argv: list[str], out, err) -> int:
    """A runner that runs the argument list on this machine and streams its output as it
    comes (what an exec in a component does)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def pump(stream, write) -> None:
        for chunk in iter(lambda: os.read(stream.fileno(), 4096), b""):
            write(chunk)

    readers = [threading.Thread(target=pump, args=pair)
               for pair in ((proc.stdout, out), (proc.stderr, err))]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    return proc.wait()


def test_a_string_runs_under_sh_and_a_list_as_is() -> None:
    assert process.argv("echo hi | tr a-z A-Z") == ["sh", "-c", "echo hi | tr a-z A-Z"]
    assert process.argv(["ping", "-c", 1]) == ["ping", "-c", "1"]
    for empty in ("", "  ", []):
        with pytest.raises(nn.InputError):
            process.argv(empty)
    result = process.run(_local, "echo hi | tr a-z A-Z; echo oops >&2; exit 3")
    assert result == nn.Result(3, "HI\n", "oops\n")
    assert not result.ok
    with pytest.raises(nn.EnvironmentProblem, match="exited 3: oops"):
        result.check()
    assert process.run(_local, ["printf", "%s", "a b"]).check().stdout == "a b"


def test_a_process_runs_on_until_terminated_and_keeps_its_output() -> None:
    started = time.monotonic()
    with nn.Process(_local, "echo started; exec sleep 30", "local") as proc:
        deadline = time.monotonic() + 10
        while "started" not in proc.stdout and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.running()
        with pytest.raises(TimeoutError):
            proc.wait(0.2)
        result = proc.terminate()
    assert result.exit_code == -15  # SIGTERM, as Popen reports it here
    assert result.stdout == "started\n"
    assert time.monotonic() - started < 10
    assert nn.Process(_local, ["true"], "local").wait(10) == nn.Result(0, "", "")


def test_a_process_leaves_no_pid_file_behind() -> None:
    ended = nn.Process(_local, ["true"], "local")
    ended.wait(10)
    with nn.Process(_local, "exec sleep 30", "local") as stopped:
        time.sleep(0.3)
    assert stopped.wait(10).exit_code == -15
    for proc in (ended, stopped):
        assert not Path(proc._pidfile).exists()


def test_leaving_a_with_block_terminates_a_running_process() -> None:
    with nn.Process(_local, "exec sleep 30", "local") as proc:
        time.sleep(0.3)
    assert not proc.running()


def test_link_properties_are_unit_strings() -> None:
    assert properties_given(rate="20Mbit", delay=None) == {"rate": "20Mbit"}
    with pytest.raises(nn.InputError, match="rate=20: give a string with its unit"):
        properties_given(rate=20)


def test_a_scenario_built_in_code_saves_and_loads_back(tmp_path: Path) -> None:
    built = nn.Scenario.build(nodes={"a": 2, "b": 2, "c": 1}, duration=30,
                              steps=[(0, [("a", "b")]), (10, [("a", "b"), ("b", "c")]),
                                     {"time": 20, "visible": []}], name="line")
    assert [sorted(s.visible) for s in built.steps] == [[("a", "b")],
                                                        [("a", "b"), ("b", "c")], []]
    assert [n.iphys for n in built.nodes] == [2, 2, 1]
    path = built.save(tmp_path / "line.json")
    again = nn.Scenario.load(path)
    assert isinstance(again, nn.Scenario)
    assert (again.nodes, again.steps, again.duration) == (built.nodes, built.steps, 30.0)
    assert json.loads(path.read_text())["format"] == "nestednet-scenario/1"


def test_a_scenario_built_wrong_says_where() -> None:
    with pytest.raises(nn.InputError, match=r"steps\[1\]\.visible\[0\]: unknown node 'x'"):
        nn.Scenario.build(nodes=["a", "b"], duration=10, steps=[(0, []), (5, [("a", "x")])])
    with pytest.raises(nn.InputError, match="time"):
        nn.Scenario.build(nodes=["a", "b"], duration=10, steps=[(20, [])])
    with pytest.raises(nn.InputError, match="list of names"):
        nn.Scenario.build(nodes="ab", duration=10, steps=[(0, [])])


def test_generated_scenarios_repeat_with_their_seed() -> None:
    one = nn.Scenario.generate(nodes=6, duration=20, step=5, range=100, seed=7)
    two = nn.Scenario.generate(nodes=6, duration=20, step=5, range=100, seed=7)
    assert one == two and len(one.steps) == 4 and one.length_unit == "m"
    assert one != nn.Scenario.generate(nodes=6, duration=20, step=5, range=100, seed=8)


def test_every_shipped_scenario_loads_through_the_api() -> None:
    for path in sorted((ROOT / "scenarios").glob("*.json")):
        if "schema" in path.name:
            continue
        assert nn.Scenario.load(path).nodes, path


def test_a_run_request_takes_a_scenario_object() -> None:
    built = nn.Scenario.build(nodes=["a", "b"], duration=5, steps=[(0, [("a", "b")])])
    assert RunRequest(scenario=built, lab="x").scenario is built
    assert RunRequest(scenario="s.json").scenario == Path("s.json")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "9bad"}, "lab name"),
    ({"component_caps": "NET_ADMIN"}, "give a list of names"),
    ({"component_caps": ["SYS_ADMIN"]}, "not one NestedNet grants"),
    ({"pins": ["n1=a"]}, "need --hosts"),
    ({"flat": True, "hosts": "h.json"}, "cannot be combined"),
    ({"images": "gnab=x"}, "images="),
    ({"routing": "ospf"}, "ospf"),
    ({"iphys": 0}, "iphys"),
])
def test_create_refuses_bad_input_before_making_anything(kwargs: dict, message: str) -> None:
    args = {"name": "apiu", "nodes": 2, "iphys": 1, **kwargs}
    with pytest.raises(nn.InputError, match=message):
        nn.Lab.check(args.pop("name"), **args)


def test_check_says_how_a_lab_will_be_built() -> None:
    plan = nn.Lab.check("apiu", nodes=3, iphys=2, routing="babel", component_caps=["NET_ADMIN"])
    assert plan.kind == "nested" and plan.phases
    assert plan.request.component_caps == ("NET_ADMIN",)
    assert nn.Lab.check("apiu", nodes=3, iphys=2, flat=True).kind == "flat"
