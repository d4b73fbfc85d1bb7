"""`nestednet run`: a lab, a CA on its control net, and a scenario played in real time.

The CA listens only on the control bridge's address inside the lab's control
namespace (its socket is created there), never on the host's interfaces. Scenario
nodes map onto lab nodes in order (the k-th scenario node is lab node n<k>); agents
say HELLO with their lab name and the CA answers with their scenario name. Links
are flow pairs under the same cookies `nestednet link` uses, so `link list` and
`status` show what the CA made. On the way out (end, Ctrl-C or error) the CA removes
every flow it installed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyroute2 import netns

from nestednet.ca.assistant import CommunicationAssistant, EventLog, StepProgress, ends_of
from nestednet.ca.flows import MainBridgeInstaller
from nestednet.ca.player import PlayResult, Player
from nestednet.ca.server import ControlServer, listen
from nestednet.errors import UsageError
from nestednet.lab.record import LabRecord
from nestednet.lab.create import CreateRequest, create
from nestednet.lab.links import LabLinks
from nestednet.lab.nodes import Lab
from nestednet.model import topology as topo
from nestednet.model.addressing import CA_PORT
from nestednet.model.link_table import LinkTable
from nestednet.model.scenario import Scenario


@dataclass
class RunOptions:
    lab: str
    speed: float = 1.0
    until: float | None = None
    events: Path | None = None
    remove_lab: bool = False
    hello_timeout: float = 90.0
    jobs: int | None = None


@dataclass
class RunSummary:
    lab: str
    created_lab: bool
    steps_played: int = 0
    scenario_time: float = 0.0
    interrupted: bool = False
    links_at_end: int = 0
    requests: int = 0
    links_up: int = 0
    links_failed: int = 0
    links_down: int = 0
    events: str = ""
    removed_lab: bool = False


@dataclass
class Live:
    """What the live display reads (from the player's thread)."""

    scenario_time: float = 0.0
    duration: float = 0.0
    step: int = -1
    steps: int = 0
    links: int = 0
    progress: StepProgress = field(default_factory=StepProgress)
    phase: str = "starting"


def check_fits(scenario: Scenario, lab: Lab) -> None:
    needed_iphys = max(n.iphys for n in scenario.nodes)
    if len(scenario.nodes) > lab.shape.nodes or needed_iphys > lab.shape.iphys:
        raise UsageError(
            f"scenario needs {len(scenario.nodes)} nodes x {needed_iphys} iPHYs but lab "
            f"{lab.record.lab} has {lab.shape.nodes} x {lab.shape.iphys}",
            hint="use another --lab (run creates it) or delete this one")


def _listen_in(namespace: str, host: str, port: int):
    """A listening socket created inside ``namespace``: it stays bound to that namespace."""
    holder: dict = {}

    def make() -> None:
        netns.pushns(namespace)
        try:
            holder["sock"] = listen(host, port)
        except OSError as exc:
            holder["error"] = exc
        finally:
            netns.popns()

    # setns() changes only the calling thread; a throwaway thread keeps ours untouched.
    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if "error" in holder:
        raise UsageError(f"the CA cannot listen on {host}:{port} in {namespace}: "
                         f"{holder['error']}", hint="is another `nestednet run` using this lab?")
    return holder["sock"]


def run(scenario: Scenario, options: RunOptions, stop: threading.Event,
        live: Live, notify: Callable[[str], None] = lambda text: None) -> RunSummary:
    created = False
    if not LabRecord(options.lab).exists():
        needed_iphys = max(n.iphys for n in scenario.nodes)
        notify(f"creating lab {options.lab}: {len(scenario.nodes)} nodes x {needed_iphys} iPHYs")
        live.phase = "creating lab"
        jobs = {"jobs": options.jobs} if options.jobs else {}
        create(CreateRequest(lab=options.lab, nodes=len(scenario.nodes), iphys=needed_iphys,
                             **jobs))
        created = True
    lab = Lab.open(options.lab)
    check_fits(scenario, lab)
    links = LabLinks.of(lab.record)
    names = list(scenario.node_names)
    lab_node = {name: k for k, name in enumerate(names, 1)}

    def port_of(node: str, iphy: str) -> int:
        return links.port(topo.Endpoint(lab_node[node], int(iphy.removeprefix("iphy"))))

    def cookie_of(a: int, b: int) -> int:
        return links.cookie(links.endpoint(a), links.endpoint(b))

    events_path = options.events or lab.record.root / "events.jsonl"
    summary = RunSummary(lab=options.lab, created_lab=created, events=str(events_path))
    events = EventLog(events_path)
    table = LinkTable(scenario.iphy_inventory())
    plan = links.plan
    server = ControlServer(_listen_in(topo.control_netns(options.lab),
                                      str(plan.ca_address().ip), CA_PORT))
    installer = MainBridgeInstaller(links.bridge, port_of, cookie_of)
    ca = CommunicationAssistant(
        server, table, installer,
        node_ids={n.name: n.node_id for n in scenario.nodes},
        control_ips={name: str(plan.control_address(lab_node[name]).ip) for name in names},
        events=events, aliases={topo.node_name(k): name for name, k in lab_node.items()})
    server.start(ca)
    try:
        live.phase = "waiting for GNAB agents"
        notify(f"CA listening on {plan.ca_address().ip}:{CA_PORT} in "
               f"{topo.control_netns(options.lab)}; waiting for {len(names)} GNAB HELLOs")
        deadline = time.monotonic() + options.hello_timeout
        while ca.hello_seen != set(names):
            if stop.wait(0.1):
                summary.interrupted = True
                return summary
            if time.monotonic() > deadline:
                missing = sorted(set(names) - ca.hello_seen)
                raise UsageError(f"no HELLO within {options.hello_timeout:.0f} s from: "
                                 f"{', '.join(missing[:8])}",
                                 hint="check the GNAB with `nestednet exec NODE gnab -- cat "
                                      "/run/nestednet/agent.json`")
        live.phase = "playing"
        live.duration, live.steps = scenario.duration, len(scenario.steps)
        player = Player(scenario, server, ca, speed=options.speed, until=options.until)

        def tick(t: float) -> None:
            live.scenario_time = t
            live.step = ca.progress.step
            live.progress = ca.progress
            live.links = len(table.links())

        result: PlayResult = player.play(stop, on_tick=tick)
        summary.steps_played = result.steps_played
        summary.scenario_time = result.scenario_time
        summary.interrupted = result.interrupted
        summary.links_at_end = len(table.links())
    finally:
        live.phase = "stopping"
        done = threading.Event()

        def withdraw() -> None:
            try:
                gone = table.set_visibility(())
                if gone:
                    installer.remove([ends_of(link) for link in gone])
            finally:
                done.set()

        server.call_soon(withdraw)
        done.wait(10)
        server.stop()
        events.close()
    summary.requests = events.counts["link_request"]
    summary.links_up = events.counts["link_up"]
    summary.links_failed = events.counts["link_fail"]
    summary.links_down = events.counts["link_down"]
    if options.remove_lab:
        from nestednet.lab.teardown import delete_lab

        delete_lab(lab.record)
        summary.removed_lab = True
    return summary

