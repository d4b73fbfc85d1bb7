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

import contextlib
import gc
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from nestednet import connectivity_plot
from nestednet.adapters import netlink
from nestednet.ca.actions import ActionPlayer
from nestednet.ca.assistant import CommunicationAssistant, EventLog, StepProgress, ends_of
from nestednet.ca.fidelity import FidelityCheck
from nestednet.ca.flows import HostsInstaller, MainBridgeInstaller
from nestednet.ca.link_shaping import RunShaping
from nestednet.ca.player import Player, PlayResult
from nestednet.ca.server import CA_NICE, CA_REALTIME, ControlServer, listen
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.lab import designs, runs
from nestednet.lab.create import CreateRequest, create
from nestednet.lab.host_watch import HostWatch
from nestednet.lab.multihost import HostLinks
from nestednet.lab.nodes import Lab
from nestednet.lab.oom_watch import OomWatch
from nestednet.lab.record import LabRecord
from nestednet.lab.route_watch import RouteWatch
from nestednet.lab.shaping import LabShaper
from nestednet.lab.teardown import delete_lab
from nestednet.model import topology as topo
from nestednet.model.actions import actions_summary, crashed_nodes, timeline
from nestednet.model.addressing import CA_PORT
from nestednet.model.component_spec import check_component_caps
from nestednet.model.events import (
    HOST_FLOWS,
    HOST_LOST,
    OOM,
    PLAY,
    RESUMED,
    ROUTE,
    host_flows_fields,
    host_flows_summary,
    negotiation_summary,
    parse_events,
    route_summary,
)
from nestednet.model.link_models import LinkModel
from nestednet.model.link_resolver import LinkResolver
from nestednet.model.link_table import InterNodeLinks
from nestednet.model.link_table import Link as TableLink
from nestednet.model.path_delay import summary as path_delay_summary
from nestednet.model.scenario import Scenario
from nestednet.model.shaping_policy import ShapingPolicy


@dataclass
class RunOptions:
    lab: str
    speed: float = 1.0
    until: float | None = None
    events: Path | None = None
    remove_lab: bool = False
    hello_timeout: float = 90.0
    jobs: int | None = None
    created_lab: bool = False
    """Set by the caller when ensure_lab() made the lab for this run."""
    plot_dir: Path | None = None
    """Write one connectivity picture per step here (`nestednet run --plot DIR`)."""
    links: LinkResolver | None = None
    """Where each link's properties come from; None: the scenario shapes no link."""
    shaping: ShapingPolicy | None = None
    """How properties become tc trees on this kernel (checked by plan_shaping)."""
    routing: str = "none"
    """Routing strategy of a lab this run creates (an existing lab keeps its own)."""
    component_caps: tuple[str, ...] | None = None
    """Capabilities of a created lab's components (None: the default set)."""

    resume_at: float | None = None
    """Scenario time at which this run takes over a dead one (`run --resume`): the links
    found are adopted, the step in effect then is applied, play goes on from there."""

    def __post_init__(self) -> None:
        if self.component_caps is not None:
            self.component_caps = check_component_caps(self.component_caps)


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
    run_dir: str = ""
    """The run's directory (its record, run.json): what `nestednet report` and
    `run --resume` take, printed as `run`'s last line."""
    removed_lab: bool = False
    negotiation: dict = field(default_factory=dict)
    """events.negotiation_summary of this run: requests, refusals by reason, latency."""
    link_properties: list = field(default_factory=list)
    """Per step played: min/median/max delay and rate of its links (LinkResolver.summary)."""
    shaping: dict = field(default_factory=dict)
    """The shaping mode and what it left out; empty when no link was shaped."""
    shaping_updates: list = field(default_factory=list)
    """Per step: links kept up, links changed in place, ms resolving and in tc."""

    routing: str = "none"
    routes: list = field(default_factory=list)
    """events.route_summary of this run: route changes per step and node, convergence."""
    actions: dict = field(default_factory=dict)
    """model.actions.actions_summary: cues played and failed, per measurement its figures."""
    fidelity: dict = field(default_factory=dict)
    """model.fidelity.summary: shaped directions checked at each step's end, matched."""
    lost_hosts: dict = field(default_factory=dict)
    """Host -> {nodes, links_down} for each host lost during the run (its nodes dead)."""
    oom: dict = field(default_factory=dict)
    """"node:component" -> OOM kills in it during the run, for those with one
    (nestednet.lab.oom_watch); their links were left as they were."""
    path_delay: dict = field(default_factory=dict)
    """model.path_delay.summary: each ping's RTT against its path's configured delay, per
    step, and the steps where they part; empty without pings."""
    host_flows: dict = field(default_factory=dict)
    """events.host_flows_summary (labs over several hosts): per op, the flows' time on all
    hosts and the spread between hosts, p50/p90/max ms; empty on one host."""


def plan_shaping(scenario: Scenario, override: LinkModel | None, mode: str, source: str,
                 netem_available: Callable[[], bool], *,
                 keep_order: bool = False) -> tuple[LinkResolver, ShapingPolicy] | None:
    """Check up front what the run's links need (exit 2 before anything is made).

    None when the scenario neither declares nor is given a link model and states no
    explicit properties: its links stay ideal, as before. Otherwise the resolver and
    the policy; a property this kernel cannot emulate raises UsageError naming
    sch_netem unless ``mode`` is rate-only.
    """
    resolver = LinkResolver(scenario, override, source=source)
    if not resolver.has_models and not any(step.links for step in scenario.steps):
        return None
    policy = ShapingPolicy.choose(mode, netem_available(), keep_order=keep_order)
    for i in range(len(scenario.steps)):
        policy.check_all((f"{source}: steps[{i}] {a}->{b}", props)
                         for (a, b), props in resolver.step_properties(i).items())
    return resolver, policy


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
    design = designs.of(lab.meta)
    if not design.plays_scenarios:
        raise UsageError(f"lab {lab.record.lab} is a {design.kind} lab: `run` cannot play "
                         "scenarios on it (its nodes have no GNAB)")
    needed_iphys = max(n.iphys for n in scenario.nodes)
    if len(scenario.nodes) > lab.shape.nodes or needed_iphys > lab.shape.iphys:
        raise UsageError(
            f"scenario needs {len(scenario.nodes)} nodes x {needed_iphys} iPHYs but lab "
            f"{lab.record.lab} has {lab.shape.nodes} x {lab.shape.iphys}",
            hint="use another --lab (run creates it) or delete this one")


def _listen_in(namespace: str, host: str, port: int) -> socket.socket:
    """A listening socket created inside ``namespace``: it stays bound to that namespace."""
    try:
        return netlink.in_namespace(namespace, lambda: listen(host, port))
    except OSError as exc:
        raise UsageError(f"the CA cannot listen on {host}:{port} in {namespace}: {exc}",
                         hint="is another `nestednet run` using this lab?") from exc


class CaSession:
    """A CA attached to an existing lab for one scenario: start, step, inspect, close.

    `run()` plays it in real time; tests and benchmarks step it by hand.
    """

    def __init__(self, scenario: Scenario, lab: Lab, events_path: Path,
                 links: tuple[LinkResolver, ShapingPolicy] | None = None, *,
                 adopt: bool = False,
                 on_events_failure: Callable[[OSError], None] = lambda error: None) -> None:
        """``adopt``: take the links found on the lab as the CA's own (a resumed run)
        instead of refusing them; ``on_events_failure``: told when the events file's
        disk refuses a write."""
        check_fits(scenario, lab)
        self.scenario = scenario
        self.lab = lab
        self.design = designs.of(lab.meta)
        self._adopt_found = adopt
        self._on_events_failure = on_events_failure
        self.adopted: list[TableLink] = []
        """The links a resumed run found and took over."""
        try:
            self._start(scenario, lab, events_path, links)
        except BaseException:
            self.design.close()
            raise

    def _start(self, scenario: Scenario, lab: Lab, events_path: Path,
               links: tuple[LinkResolver, ShapingPolicy] | None) -> None:
        # The design says where the lab's links are: one main bridge, or one per host.
        self.links = self.design.links(lab.record, lab.meta)
        found = self.links.links()
        if found and not self._adopt_found:
            raise UsageError(f"lab {lab.record.lab} has {len(found)} link(s) made by "
                             "`nestednet link add`; during a run the CA makes every link",
                             hint="remove them with `nestednet link del` first")
        names = list(scenario.node_names)
        self.lab_node = {name: k for k, name in enumerate(names, 1)}
        self.table = InterNodeLinks(scenario.iphy_inventory())
        if found:
            self.adopted = self._adopt(found)
        self.events = EventLog(events_path, on_failure=self._on_events_failure)
        plan = self.links.plan
        self.address = (str(plan.ca_address().ip), CA_PORT)
        self.installer: MainBridgeInstaller | HostsInstaller = (
            HostsInstaller(self.links, self.endpoint_of, self._hosts_done)
            if isinstance(self.links, HostLinks)
            else MainBridgeInstaller(self.links.bridge, self.port_of, self.cookie_of))
        self.shaping: RunShaping | None = None
        self.shaping_info: dict = {}
        if links is not None:
            shaper = LabShaper(lab.record, links[1],
                               offloads_off=self.links.shaping_offloads_off,
                               tc_for=self.links.tc_for)
            self.shaping = RunShaping(links[0], shaper, self.endpoint_of, lab.record.lab,
                                      self.links)
            self.shaping_info = self.shaping.check()
            self.events.write("shaping", scenario_time=0.0, **self.shaping_info)
        self.server = ControlServer(_listen_in(topo.control_netns(lab.record.lab),
                                               *self.address), nice=CA_NICE,
                                    realtime=CA_REALTIME)
        self.ca = CommunicationAssistant(
            self.server, self.table, self.installer,
            node_ids={n.name: n.node_id for n in scenario.nodes},
            control_ips={name: str(plan.control_address(k).ip)
                         for name, k in self.lab_node.items()},
            events=self.events,
            aliases={topo.node_name(k): name for name, k in self.lab_node.items()},
            shaping=self.shaping, directory=self.directory())
        self.server.start(self.ca)
        try:
            # On the server thread, which uses it: a thread that imports os-ken (as the
            # first open does) can no longer be joined, and run() joins its worker.
            self.server.call(self._open_flows, 60)
        except BaseException:
            self.server.stop()
            raise
        self.player = Player(scenario, self.server, self.ca)
        self._closed = False

    def _open_flows(self) -> None:
        self.installer.open()
        self.ca.watch_flows()

    def _adopt(self, found: list[tuple[topo.Endpoint, topo.Endpoint]]) -> list[TableLink]:
        """The lab's links (flows) as the table's, for a run taking over a dead one."""
        names = {k: name for name, k in self.lab_node.items()}
        stray = [f"{a}-{b}" for a, b in found if a.node not in names or b.node not in names]
        links = [TableLink(names[a.node], a.iphy, names[b.node], b.iphy) for a, b in found
                 if a.node in names and b.node in names]
        refused = ([f"links of nodes outside the scenario: {', '.join(stray)}"] if stray
                   else self.table.adopt(links))
        if refused:
            raise UsageError(f"lab {self.lab.record.lab}: the links found cannot be the "
                             f"run's: {'; '.join(refused[:3])}",
                             hint=f"`nestednet cleanup --lab {self.lab.record.lab}` undoes "
                                  "the dead run instead")
        return links

    def _hosts_done(self, op: str, links: int, per_host: dict[str, float]) -> None:
        """A batch's flows are in on every host it touched (CA thread): a host_flows event."""
        progress = self.ca.progress
        self.events.write(HOST_FLOWS, scenario_time=progress.scenario_time,
                          step=progress.step, **host_flows_fields(op, links, per_host))

    def endpoint_of(self, node: str, iphy: str) -> topo.Endpoint:
        return topo.Endpoint(self.lab_node[node], int(iphy.removeprefix("iphy")))

    def directory(self) -> dict[str, dict]:
        """Every scenario node's node address and iPHY inter addresses (sent in ID)."""
        plan = self.links.plan
        return {name: {"address": str(plan.node_address(k).ip),
                       "iphys": {topo.component_name(j): str(plan.inter_address(k, j).ip)
                                 for j in range(1, plan.shape.iphys + 1)}}
                for name, k in self.lab_node.items()}

    def port_of(self, node: str, iphy: str) -> int:
        return self.links.port(self.endpoint_of(node, iphy))

    def cookie_of(self, a: int, b: int) -> int:
        return self.links.cookie(self.links.endpoint(a), self.links.endpoint(b))

    def missing_hellos(self, frozen: frozenset[str] = frozenset()) -> list[str]:
        return sorted(set(self.lab_node) - self.ca.hello_seen - frozen)

    def wait_for_hellos(self, timeout: float, stop: threading.Event,
                        frozen: frozenset[str] = frozenset()) -> bool:
        """True when every agent said HELLO; False if stopped; UsageError on timeout.
        ``frozen``: nodes a crash still holds (a resumed run): not waited for."""
        deadline = time.monotonic() + timeout
        while self.missing_hellos(frozen):
            if stop.wait(0.1):
                return False
            if time.monotonic() > deadline:
                raise UsageError(
                    f"no HELLO within {timeout:.0f} s from: "
                    f"{', '.join(self.missing_hellos(frozen)[:8])}",
                    hint="check the GNAB with `nestednet exec NODE gnab -- cat "
                         "/run/nestednet/agent.json`")
        return True

    def apply_step(self, index: int) -> None:
        self.player.apply_now(index)

    def settled(self) -> bool:
        """Every visible pair with a free iPHY on both sides is linked, flows included."""
        return self.server.call(lambda: not self.table.unlinked_feasible_pairs()
                                and not self.ca.installing(), 10)

    def close(self) -> None:
        """Withdraw every link the CA made (flows included), then stop serving."""
        if self._closed:
            return
        self._closed = True

        def withdraw() -> None:
            gone = self.table.set_visibility(())
            if gone:
                self.installer.remove([ends_of(link) for link in gone])
                if self.shaping is not None:
                    self.shaping.down([ends_of(link) for link in gone])

        try:
            self.server.call(withdraw, 10)
        finally:
            self.server.stop()
            self.installer.close()
            self.events.close()
            self.design.close()

    def __enter__(self) -> CaSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StepPictures:
    """One PNG per finished step, drawn off the player's thread so steps keep their time."""

    def __init__(self, scenario: Scenario, ca_session: CaSession,
                 directory: Path | None) -> None:
        self.scenario, self.ca_session, self.directory = scenario, ca_session, directory
        self._pool: ThreadPoolExecutor | None = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nestednet-plot")

    def step_done(self, index: int) -> None:
        if self._pool is None:
            return
        records = self.ca_session.server.call(lambda: list(self.ca_session.events.records))
        frame = connectivity_plot.frames_from_scenario(self.scenario, records)[index]
        self._pool.submit(connectivity_plot.render_png, frame,
                          self.directory / f"step-{index + 1:03d}.png")

    def __enter__(self) -> StepPictures:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def ensure_lab(scenario: Scenario, options: RunOptions,
               notify: Callable[[str], None] = lambda text: None) -> bool:
    """Create the lab with the scenario's shape unless it exists; True if created.

    Call it on the main thread: creation talks to OVSDB through python-ovs, and a
    non-main thread that does so cannot finish (see nestednet.adapters.ovsdb).
    """
    if LabRecord(options.lab).exists():
        return False
    if len(scenario.nodes) > topo.MAX_NODES:
        raise UsageError(f"the scenario has {len(scenario.nodes)} nodes; a lab has at most "
                         f"{topo.MAX_NODES}", hint="`visibility check` and `graph` take it; "
                                                 "`run` needs a smaller one")
    needed_iphys = max(n.iphys for n in scenario.nodes)
    notify(f"creating lab {options.lab}: {len(scenario.nodes)} nodes x {needed_iphys} iPHYs")
    jobs = {"jobs": options.jobs} if options.jobs else {}
    caps = {"component_caps": options.component_caps} \
        if options.component_caps is not None else {}
    create(CreateRequest(lab=options.lab, nodes=len(scenario.nodes), iphys=needed_iphys,
                         routing=options.routing, **jobs, **caps))
    return True


SWITCH_INTERVAL_S = 0.0005
"""How long another Python thread may keep the GIL from the CA's thread during a run."""


@contextmanager
def prompt_thread_switches(interval: float = SWITCH_INTERVAL_S) -> Iterator[None]:
    """Let a thread that wakes (the CA's, on an agent's message) take the GIL within
    ``interval`` instead of CPython's 5 ms: `run`'s display thread parses the event
    log while links are being made, and each request would wait out its turn."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(min(previous, interval))
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep what is alive when play starts (the lab, the session, the scenario) out of
    the cyclic collector's full passes until play ends: at 250 x 4 each full pass walked
    them all, 60-230 ms holding the GIL, and the CA's thread waited behind it (the
    requests of the step it fell on: `to_ca` p90 75-100 ms, docs/benchmarks.md). Garbage
    is collected first, so nothing unreachable is frozen; objects still die by refcount.
    The freeze is the process's: two runs in one process thaw it when the first ends."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _route_events(lab: Lab, ca_session: CaSession, routing: str) -> Iterator[None]:
    """With routing on, every node-address route change in a GNAB is a `route` event."""
    if routing == "none":  # designs without routing (flat) only ever record "none"
        yield
        return
    names = {k: name for name, k in ca_session.lab_node.items()}
    ca = ca_session.ca

    def record(number: int, change: dict, _when: float) -> None:
        if number in names:
            ca_session.events.write(ROUTE, scenario_time=ca.progress.scenario_time,
                                    step=ca.progress.step, nodes=[names[number]],
                                    op=change["op"], dst=change["dst"], via=change["via"])

    with RouteWatch(lab, record):
        yield


@contextlib.contextmanager
def _oom_events(lab: Lab, ca_session: CaSession, summary: RunSummary) -> Iterator[None]:
    """Every OOM kill in a component is an `oom` event and a line of the summary; the
    links stay as they are (nestednet.lab.oom_watch)."""
    names = {k: name for name, k in ca_session.lab_node.items()}
    ca = ca_session.ca

    def record(number: int, component: str, new: int, total: int) -> None:
        node = names.get(number, topo.node_name(number))
        links = len(ca_session.table.links_of(node))
        ca_session.events.write(OOM, scenario_time=ca.progress.scenario_time,
                                step=ca.progress.step, nodes=[node], component=component,
                                kills=new, oom_kills=total,
                                memory_mb=lab.meta.get("memory_mb"), links=links)
        summary.oom[f"{node}:{component}"] = summary.oom.get(f"{node}:{component}", 0) + new

    with OomWatch(lab, record):
        yield


@contextlib.contextmanager
def _host_loss(lab: Lab, ca_session: CaSession, summary: RunSummary) -> Iterator[None]:
    """In a lab over several hosts, a host that stops answering (nestednet.lab.host_watch)
    is a `host_lost` event; its nodes are dead for the rest of the run and their links
    come down on the hosts left, while play goes on for those."""
    if not isinstance(ca_session.installer, HostsInstaller):
        yield
        return
    names = {k: name for name, k in ca_session.lab_node.items()}
    ca = ca_session.ca

    def lost(host: str, numbers: list[int], error: str) -> None:
        dead = [names[k] for k in numbers if k in names]

        def on_ca_thread() -> int:
            ca_session.installer.lose(host)
            if ca_session.shaping is not None:
                ca_session.shaping.gone.update(dead)
            links = sum(1 for link in ca_session.table.links()
                        if link.src in dead or link.dst in dead)
            ca_session.events.write(HOST_LOST, scenario_time=ca.progress.scenario_time,
                                    step=ca.progress.step, nodes=dead, host=host,
                                    error=error, links=links)
            return len(ca.declare_dead(dead, f"host {host} lost"))

        down = ca_session.server.call(on_ca_thread, 60)
        summary.lost_hosts[host] = {"nodes": dead, "links_down": down}

    with HostWatch(lab, lost):
        yield


def _check_events(ca_session: CaSession, path: Path, summary: RunSummary) -> None:
    """EnvironmentProblem when the events file's disk refused a write (the run was stopped
    for it); raised inside the session, whose close removes the links."""
    if (failure := ca_session.events.failure) is not None:
        raise EnvironmentProblem(events_refused(path, failure, summary))


def _clock_started(ca_session: CaSession, clock: runs.ScenarioClock, t0_wall: float,
                   speed: float, events_path: Path) -> None:
    """Scenario time 0 is ``t0_wall``: a `play` event says so (a report places events by
    their wall time with it; its node addresses and intra-node net read the route
    events) and captures beside the run read it from the clock file."""
    ca_session.events.write(PLAY, scenario_time=0.0, t0_wall=round(t0_wall, 6), speed=speed,
                            addresses={name: entry["address"] for name, entry
                                       in ca_session.directory().items()},
                            intra=str(ca_session.links.plan.intra),
                            ca_scheduling=ca_session.server.scheduling)
    clock.start(t0_wall, speed, events_path)


def _actions(scenario: Scenario, ca_session: CaSession, events_path: Path,
             speed: float) -> ActionPlayer | None:
    """The scenario's actions, played beside the steps (None: it has none)."""
    if not scenario.actions:
        return None
    return ActionPlayer(scenario, ca_session, events_path.parent, speed=speed)


def events_refused(path: Path, error: OSError, summary: RunSummary) -> str:
    """Why a run stopped when its events file's disk refused a write, naming the disk."""
    mount = path.resolve().parent
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        free = os.statvfs(mount)
        room = f", {free.f_bavail * free.f_frsize // 1024} KiB free"
    except OSError:
        room = ""
    return (f"the run stopped at scenario time {summary.scenario_time:.1f} s: the disk of "
            f"{mount} refused the events file {path} ({error.strerror}{room}); the run's "
            "links are removed and the events written so far are intact")


def _path_delay(events_path: Path, start: int) -> dict:
    """model.path_delay.summary of this run's events, read back from the file: the link
    updates that change a link's delay are not kept in memory (EventLog.NOT_KEPT)."""
    try:
        with events_path.open("rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
        return path_delay_summary(parse_events(text, str(events_path)))
    except (OSError, UsageError):
        return {}


def run(scenario: Scenario, options: RunOptions, stop: threading.Event,
        live: Live, notify: Callable[[str], None] = lambda text: None,
        lab: Lab | None = None) -> RunSummary:
    """Play ``scenario`` on the lab (see ensure_lab; ``lab``: it, as the caller opened
    it, else it is opened here); see the module docstring."""
    created = options.created_lab
    lab = lab if lab is not None else Lab.open(options.lab)
    events_path = options.events or lab.record.path / "events.jsonl"
    summary = RunSummary(lab=options.lab, created_lab=created, events=str(events_path))
    try:
        links = (options.links, options.shaping) if options.links and options.shaping else None
        resuming = options.resume_at is not None
        # Where this run's events begin in the file (a resumed run's: the dead run's too).
        events_start = events_path.stat().st_size \
            if not resuming and events_path.exists() else 0
        with prompt_thread_switches(), CaSession(
                scenario, lab, events_path, links, adopt=resuming,
                on_events_failure=lambda _error: stop.set()) as ca_session:
            if resuming:
                ca_session.events.write(
                    RESUMED, scenario_time=options.resume_at, pid=os.getpid(),
                    links=[[lk.src, lk.src_iphy, lk.dst, lk.dst_iphy]
                           for lk in ca_session.adopted])
            live.phase = "waiting for GNAB agents"
            notify(f"CA listening on {ca_session.address[0]}:{ca_session.address[1]} in "
                   f"{topo.control_netns(options.lab)}; waiting for "
                   f"{len(ca_session.lab_node)} GNAB HELLOs")
            # A resumed run finds the nodes a crash under way froze still frozen.
            frozen = crashed_nodes(timeline(scenario.actions, scenario.duration),
                                   options.resume_at) if resuming else frozenset()
            if not ca_session.wait_for_hellos(options.hello_timeout, stop, frozen):
                _check_events(ca_session, events_path, summary)
                summary.interrupted = True
                return summary
            live.phase = "playing"
            live.duration, live.steps = scenario.duration, len(scenario.steps)
            actions = _actions(scenario, ca_session, events_path, options.speed)
            player = Player(scenario, ca_session.server, ca_session.ca, speed=options.speed,
                            until=options.until, actions=actions)
            ca, table = ca_session.ca, ca_session.table

            def tick(t: float) -> None:
                live.scenario_time = t
                live.step = ca.progress.step
                live.progress = ca.progress
                live.links = len(table.links())

            summary.routing = lab.meta.get("routing", "none")
            with (frozen_heap(),
                  StepPictures(scenario, ca_session, options.plot_dir) as pictures,
                  _route_events(lab, ca_session, summary.routing),
                  _oom_events(lab, ca_session, summary),
                  _host_loss(lab, ca_session, summary),
                  contextlib.closing(actions) if actions else contextlib.nullcontext()):
                clock = runs.ScenarioClock(options.lab)
                try:
                    fidelity = FidelityCheck(ca_session)

                    def step_done(index: int) -> None:
                        pictures.step_done(index)
                        fidelity.step_done(index)

                    result: PlayResult = player.play(
                        stop, on_tick=tick, on_step_done=step_done,
                        start_at=options.resume_at or 0.0,
                        on_start=lambda wall: _clock_started(ca_session, clock, wall,
                                                             options.speed, events_path))
                finally:
                    clock.stop()
            summary.steps_played = result.steps_played
            summary.scenario_time = result.scenario_time
            summary.interrupted = result.interrupted
            summary.links_at_end = len(table.links())
            live.phase = "stopping"
            _check_events(ca_session, events_path, summary)
        counts = ca_session.events.counts
        summary.requests = counts["link_request"]
        summary.links_up = counts["link_up"]
        summary.links_failed = counts["link_fail"]
        summary.links_down = counts["link_down"]
        summary.negotiation = negotiation_summary(ca_session.events.records)
        if ca_session.shaping is not None:
            summary.shaping = ca_session.shaping_info
            summary.shaping_updates = ca_session.shaping.timings
            summary.link_properties = ca_session.shaping.resolver.summary()[
                :summary.steps_played]
        summary.routes = route_summary(ca_session.events.records)
        summary.host_flows = host_flows_summary(ca_session.events.records)
        if scenario.actions:
            summary.actions = actions_summary(ca_session.events.records)
            if any(a.kind == "ping" for a in scenario.actions):
                summary.path_delay = _path_delay(events_path, events_start)
        if ca_session.shaping is not None:
            summary.fidelity = ca_session.events.fidelity.result()
    finally:
        if options.remove_lab:
            delete_lab(lab.record)
            summary.removed_lab = True
    return summary
