"""`nestednet view` in a real browser (headless Chromium) against a real lab and run.

A 3-node x 1-iPHY lab: the page loads without console errors and draws the lab's
nodes; a link made with `nestednet link add` is drawn within 2 s; a short run played
on the lab shows its steps and links as they happen, and its run directory replays
step by step with the links its events say. Screenshots go to results/view/ (one of
them was copied to docs/view.png for the README).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from browser import CLI, ROOT, browser, console_errors, screenshot, view_server, wait_for
from labs import module_lab

from nestednet.lab.record import LabRecord
from nestednet.lab.runs import RUNS_DIR

pytestmark = pytest.mark.system

LAB = "vw3"
NODES = 3


@pytest.fixture(scope="module")
def lab():
    with module_lab(LAB, nodes=NODES, iphys=1) as record:
        yield record


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())


def _cli(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_lab_page_draws_the_lab_and_a_new_link_within_2_s(lab: LabRecord):
    assert lab.meta()["nodes"] == NODES
    with view_server("--lab", LAB) as server, browser() as chrome:
        chrome.get(server["url"])
        wait_for(chrome, "window.nnView && nnView.snapshots >= 1", 20, "the first snapshot")
        assert chrome.execute_script("return nnView.nodesDrawn()") == lab.meta()["nodes"]
        assert chrome.execute_script("return nnView.linksDrawn()") == 0

        _cli("link", "add", "--lab", LAB, "n1:iphy1", "n2:iphy1", "--rate", "20Mbit")
        seen = wait_for(chrome, "nnView.linksDrawn() === 1", 2.0, "the new link on the page")
        print(f"link drawn {seen:.2f} s after `link add` returned")

        base = server["url"]
        node = _get(base + "api/node?name=n1")
        assert node["node_address"] == "10.100.0.1"
        components = {c["component"]: c for c in node["components"]}
        assert set(components) == {"gnab", "iphy1"}
        assert components["gnab"]["intra"] == "192.168.0.1/24"
        assert [(x["a"], x["b"]) for x in node["links"]] == [("n1", "n2")]
        _cli("exec", "--lab", LAB, "n1", "iphy1", "--", "ping", "-c", "5", "-i", "0.2",
             "192.168.2.2")
        link = _get(base + "api/link?a=n1&b=n2")
        assert link["up"] is True
        for direction in link["directions"].values():
            assert direction["configured"]["rate_bps"] == 20_000_000
            assert direction["kernel"]["rate_bps"] == 20_000_000
            assert direction["counters"]["tx_packets"] >= 5  # the pings and their replies

        chrome.execute_script("nnView.select('node|n1')")
        wait_for(chrome, "document.getElementById('details').textContent"
                         ".includes('192.168.0.1/24')", 30, "n1's components in the panel")
        chrome.execute_script("nnView.select('link|n1|n2')")
        wait_for(chrome, "document.getElementById('details').textContent"
                         ".includes('kernel holds')", 30, "the link's properties in the panel")
        panel = chrome.execute_script("return document.getElementById('details').textContent")
        assert panel.count("20.00 Mbit/s") == 4, panel  # configured and kernel, both ways
        chrome.execute_script("document.getElementById('colour').value = 'rate';"
                              "document.getElementById('colour').dispatchEvent("
                              "new Event('change'));")
        time.sleep(1.0)
        screenshot(chrome, "lab-live.png")
        assert console_errors(chrome) == []

        _cli("link", "del", "--lab", LAB, "n1:iphy1", "n2:iphy1")
        wait_for(chrome, "nnView.linksDrawn() === 0", 2.0, "the link to go")
        assert console_errors(chrome) == []


SCENARIO = {
    "format": "nestednet-scenario/1", "name": "view-3x1", "duration": 8, "iphys": 1,
    "length_unit": "m",
    "nodes": [{"name": f"n{k}", "id": k} for k in (1, 2, 3)],
    "steps": [
        {"time": t, "visible": visible,
         "positions": {"n1": [0, 0, 10 + t], "n2": [100, 0, 20], "n3": [50, 80, 30 - t]}}
        for t, visible in ((0, [["n1", "n2"]]), (2, [["n2", "n3"]]), (4, [["n1", "n3"]]),
                           (6, [["n1", "n2"], ["n2", "n3"]]))],
}


def _links_after(events: list[dict], step: int) -> int:
    """Links up once every event of steps <= ``step`` happened, counted from the file."""
    links: set[tuple[str, str]] = set()
    for e in events:
        if e.get("step") is not None and e["step"] > step:
            break
        ends = tuple(sorted(e.get("nodes", [])[:2]))
        if e["event"] == "link_up":
            links.add(ends)
        elif e["event"] == "link_down":
            links.discard(ends)
    return len(links)


def test_run_shows_live_and_replays_from_its_directory(lab: LabRecord, tmp_path: Path):
    scenario = tmp_path / "view-3x1.json"
    scenario.write_text(json.dumps(SCENARIO))
    runs_before = set(RUNS_DIR.glob(f"{LAB}-*"))
    with view_server("--lab", LAB, "--scenario", str(scenario)) as server, \
            browser() as chrome:
        chrome.get(server["url"])
        wait_for(chrome, "window.nnView && nnView.snapshots >= 1", 20, "the first snapshot")
        run = subprocess.Popen([CLI, "run", str(scenario), "--lab", LAB, "--speed", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(chrome, "nnView.live && nnView.live.step !== null", 90,
                     "the run's first step on the page", interval=0.2)
            wait_for(chrome, "nnView.linksDrawn() >= 1", 30, "a link the CA made")
            wait_for(chrome, "nnView.live.step === 3", 60, "the last step", interval=0.2)
            chrome.execute_script("nnView.select('node|n2')")
            wait_for(chrome, "document.getElementById('details').textContent"
                             ".includes('192.168.0.1/24')", 30, "n2's components")
            time.sleep(1.0)
            screenshot(chrome, "run-live.png")
            _out, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert run.returncode == 0, err
        assert console_errors(chrome) == []

    made = set(RUNS_DIR.glob(f"{LAB}-*")) - runs_before
    assert len(made) == 1, made
    run_dir = made.pop()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()
              if line.strip()]
    with view_server(str(run_dir), "--scenario", str(scenario)) as server, browser() as chrome:
        chrome.get(server["url"])
        wait_for(chrome, "window.nnView && nnView.snapshots >= 1", 20, "the first snapshot")
        steps = chrome.execute_script("return nnView.live.steps_seen.length")
        assert steps == len(SCENARIO["steps"])
        for index in range(steps):
            chrome.execute_script(
                f"const s = document.getElementById('slider'); s.value = {index};"
                "s.dispatchEvent(new Event('input'));")
            wait_for(chrome, f"nnView.shown && nnView.shown.step === {index}", 5,
                     f"step {index} replayed")
            assert chrome.execute_script("return nnView.linksDrawn()") == \
                _links_after(events, index), f"links after step {index}"
            assert chrome.execute_script("return nnView.nodesDrawn()") == NODES
        chrome.execute_script(
            "const s = document.getElementById('slider'); s.value = 1;"
            "s.dispatchEvent(new Event('input'));")
        wait_for(chrome, "nnView.shown && nnView.shown.step === 1", 5, "step 1 replayed")
        time.sleep(1.0)
        shot = screenshot(chrome, "run-replay.png")
        assert console_errors(chrome) == []
    assert shot.exists()


def test_earth_centred_scenario_is_drawn_on_a_globe(tmp_path: Path):
    """Orbits in ECEF kilometres (as TLE/Walker scenarios give them) go around a globe,
    and visible pairs take the colour of the delay the scenario's model gives them."""
    scenario = tmp_path / "leo.json"
    _cli("visibility", "generate", "--model", "orbit", "--nodes", "24", "--altitude", "550",
         "--planes", "4", "--range", "5000", "--length-unit", "km", "--duration", "120",
         "--step", "60", "--link-model", str(ROOT / "scenarios" / "models" / "laser-isl.json"),
         "-o", str(scenario))
    with view_server(str(scenario)) as server, browser() as chrome:
        chrome.get(server["url"])
        wait_for(chrome, "window.nnView && nnView.snapshots >= 1", 20, "the first snapshot")
        assert chrome.execute_script("return nnView.nodesDrawn()") == 24
        assert chrome.execute_script("return nnView.shown.globe_radius") == 6371
        assert chrome.execute_script(
            "return document.getElementById('scene').data.some(t => t.name === 'Earth')")
        chrome.execute_script("document.getElementById('colour').value = 'delay';"
                              "document.getElementById('colour').dispatchEvent("
                              "new Event('change'));")
        wait_for(chrome, "document.getElementById('scene').data.some("
                         "t => t.name === 'visible pairs' && t.line.colorscale)", 5,
                 "visible pairs coloured by delay")
        screenshot(chrome, "scenario-globe.png")
        assert console_errors(chrome) == []
