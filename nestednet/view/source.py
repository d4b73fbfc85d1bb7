"""Where the live view's data comes from: the one place that reads a lab, a run or a
scenario for it.

`Source` is the interface the web layer sees; three implementations read

- a scenario file (`ScenarioSource`): its steps, positions and the link properties
  its model resolves; nothing changes;
- a run's directory (`RunDirSource`): its events.jsonl, followed while the run
  appends to it;
- a lab (`LabSource`): its record, the links its main bridge holds (polled), their
  shaping, and the events of a run playing on it.

Everything here only reads: no lock is taken and nothing in the lab changes (a node
click reads the node's state as `nestednet status` does, which may wake its parked
inner engine for a moment). The lab runtime is imported lazily, so the web layer
and the two file sources never load Docker or OVS code, and this module is the only
one to re-point once the public Python API (`nestednet.Lab`) exists.
"""

from __future__ import annotations

import abc
import ipaddress
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestednet.errors import UsageError
from nestednet.model import events as ev
from nestednet.model import topology as topo
from nestednet.model.line_of_sight import Pair, pair
from nestednet.model.link_models import LinkModel
from nestednet.model.link_resolver import LinkResolver
from nestednet.model.scenario import DEFAULT_IPHYS, Scenario
from nestednet.model.scenario_file import load_scenario
from nestednet.view.state import LinkView, ViewState, scenario_events

if TYPE_CHECKING:
    from nestednet.lab.runs import EventTail

RUNS_DIR = Path(os.environ.get("NESTEDNET_RUNS_DIR", "/var/lib/nestednet/runs"))
LABS_DIR = Path(os.environ.get("NESTEDNET_LABS_DIR", "/var/lib/nestednet/labs"))
EVENTS_FILE = "events.jsonl"


class Source(abc.ABC):
    """What the view reads. ``kind`` is "lab", "run" or "scenario"; ``title`` names it."""

    kind: str = ""
    title: str = ""
    generation: int = 0
    """Bumped when what the events describe starts afresh (a new run on a lab): the
    view then forgets the events before."""
    scenario: Scenario | None = None
    scenario_links: dict[int, dict[Pair, dict[str, Any]]] = {}  # noqa: RUF012 (read-only)

    def make_state(self) -> ViewState:
        """A fresh state for this source, before any event."""
        return ViewState(self.initial_nodes(), title=self.title, kind=self.kind,
                         scenario=self.scenario, scenario_links=self.scenario_links)

    @abc.abstractmethod
    def initial_nodes(self) -> list[str]:
        """Node names known before any event."""

    @abc.abstractmethod
    def read_events(self) -> list[ev.Event]:
        """Events not returned before (the first call: every event so far)."""

    def links_now(self) -> list[LinkView] | None:
        """The links there are now, from something other than events (a lab's flow
        table); None when the source has no such truth."""
        return None

    def live(self) -> bool:
        """Whether more may come (a lab, a run still writing)."""
        return False

    @abc.abstractmethod
    def node_details(self, name: str, state: ViewState) -> dict[str, Any]:
        """What a click on a node shows: components, addresses, routes, links."""

    @abc.abstractmethod
    def link_details(self, a: str, b: str, state: ViewState) -> dict[str, Any]:
        """What a click on a link shows: configured and measured properties."""

    def close(self) -> None:  # noqa: B027 (nothing to release by default)
        """Release what the source holds."""


# --- shared pieces --------------------------------------------------------------------


def follow(path: Path) -> EventTail:
    """An events file from its start, then what is appended; whole lines only, and a torn
    or foreign line is skipped (the view shows what it can)."""
    # Lazy: the lab runtime stays out of the web layer's imports until a source reads.
    from nestednet.lab.runs import EventTail

    return EventTail(path, from_start=True, skip_bad=True)


def _links_of(name: str, state: ViewState) -> list[dict[str, Any]]:
    return [link.as_dict() for link in state.links.values() if name in (link.a, link.b)]


def _visible_peers(name: str, state: ViewState) -> list[str]:
    return sorted(b if a == name else a for a, b in state.visible if name in (a, b))


def _routes_from_events(name: str, events: list[ev.Event]) -> list[dict[str, Any]]:
    """A node's node-address routes as its route events left them."""
    table: dict[str, Any] = {}
    for e in events:
        if e.event == ev.ROUTE and e.nodes and e.nodes[0] == name:
            ev.apply_route(table, str(e.extra.get("dst")), e)
    return [{"dst": dst, "via": via} for dst, via in sorted(table.items())]


def _scenario_node(name: str, scenario: Scenario | None, state: ViewState) -> dict[str, Any]:
    out: dict[str, Any] = {"node": name}
    position = state.current_positions().get(name)
    if position is not None:
        out["position"] = list(position)
    if scenario is not None and name in scenario.node_names:
        spec = scenario.node(name)
        out.update(node_id=spec.node_id, iphys=spec.iphys)
    return out


def resolved_links(scenario: Scenario, model: LinkModel | None, source: str
                   ) -> dict[int, dict[Pair, dict[str, Any]]]:
    """Per step, every visible pair's properties per direction as the scenario's explicit
    values or link model give them (None: unshaped; a pair the model cannot link: {})."""
    resolver = LinkResolver(scenario, model, source=source)
    out: dict[int, dict[Pair, dict[str, Any]]] = {}
    for index, step in enumerate(scenario.steps):
        row: dict[Pair, dict[str, Any]] = {}
        for a, b in step.visible:
            there = resolver.properties_for(index, a, b)
            back = resolver.properties_for(index, b, a)
            row[pair(a, b)] = {"a_to_b": None if there is None else there.as_dict(),
                               "b_to_a": None if back is None else back.as_dict()}
        out[index] = row
    return out


# --- a scenario file -------------------------------------------------------------------


class ScenarioSource(Source):
    kind = "scenario"

    def __init__(self, path: Path, *, iphys: int = DEFAULT_IPHYS,
                 length_unit: str | None = None, link_model: LinkModel | None = None) -> None:
        self.scenario = load_scenario(path, nestednet_iphys=iphys, length_unit=length_unit)
        self.title = self.scenario.name or path.stem
        self.scenario_links = resolved_links(self.scenario, link_model, str(path))
        self._events = scenario_events(self.scenario)
        self._given = False

    def initial_nodes(self) -> list[str]:
        assert self.scenario is not None
        return list(self.scenario.node_names)

    def read_events(self) -> list[ev.Event]:
        if self._given:
            return []
        self._given = True
        return list(self._events)

    def node_details(self, name: str, state: ViewState) -> dict[str, Any]:
        return {**_scenario_node(name, self.scenario, state),
                "visible_peers": _visible_peers(name, state),
                "note": "a scenario alone: no lab, so no components or routes"}

    def link_details(self, a: str, b: str, state: ViewState) -> dict[str, Any]:
        step = state.step if state.step is not None else 0
        return {"a": a, "b": b, "step": step,
                "configured": self.scenario_links.get(step, {}).get(pair(a, b)),
                "measured": None, "note": "what the scenario resolves; no run measured it"}


# --- a run's directory ----------------------------------------------------------------


def events_path(run: Path) -> Path:
    """The events file of a run directory (or the file itself); UsageError if absent."""
    path = run / EVENTS_FILE if run.is_dir() else run
    if not path.is_file():
        raise UsageError(f"{run}: no {EVENTS_FILE} there" if run.is_dir() else
                         f"{run}: no such file or directory",
                         hint="give a run directory (/var/lib/nestednet/runs/LAB-TIME), its "
                              "events.jsonl, a scenario file or --lab NAME")
    return path


class RunDirSource(Source):
    kind = "run"

    def __init__(self, run: Path, scenario: Scenario | None = None) -> None:
        self.path = events_path(run)
        self.title = (run if run.is_dir() else run.parent).name
        self.scenario = scenario
        self.follower = follow(self.path)
        self.history: list[ev.Event] = []

    def initial_nodes(self) -> list[str]:
        return list(self.scenario.node_names) if self.scenario is not None else []

    def read_events(self) -> list[ev.Event]:
        new = self.follower.read()
        self.history += new
        return new

    def live(self) -> bool:
        """Written to in the last 15 s: a run still playing (steps are seconds apart)."""
        try:
            return time.time() - self.path.stat().st_mtime < 15
        except OSError:
            return False

    def node_details(self, name: str, state: ViewState) -> dict[str, Any]:
        return {**_scenario_node(name, self.scenario, state),
                "visible_peers": _visible_peers(name, state),
                "links": _links_of(name, state),
                "routes": _routes_from_events(name, self.history),
                "note": "from the run's events"}

    def link_details(self, a: str, b: str, state: ViewState) -> dict[str, Any]:
        link = state.links.get(pair(a, b))
        return {"a": a, "b": b, "configured": None if link is None else link.properties,
                "link": None if link is None else link.as_dict(), "measured": None,
                "note": "as the run's events applied it"}


# --- a lab ----------------------------------------------------------------------------


def run_dirs(lab: str, root: Path = RUNS_DIR) -> list[Path]:
    """The lab's run directories (<lab>-<YYYYmmdd-HHMMSS>[-k]), oldest first."""
    pattern = re.compile(rf"^{re.escape(lab)}-\d{{8}}-\d{{6}}(-\d+)?$")
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and pattern.match(p.name)]
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def port_counters(port: str, sys_net: Path = Path("/sys/class/net")) -> dict[str, int] | None:
    """A host port's kernel counters (None: not on this machine)."""
    stats = sys_net / port / "statistics"
    try:
        return {name: int((stats / name).read_text())
                for name in ("tx_bytes", "tx_packets", "tx_dropped", "rx_bytes", "rx_packets")}
    except (OSError, ValueError):
        return None


class LabSource(Source):
    """A lab, and the run playing on it (its newest run directory while its run marker
    is there)."""

    kind = "lab"

    def __init__(self, lab: str, scenario: Scenario | None = None,
                 labs_dir: Path = LABS_DIR, runs_dir: Path = RUNS_DIR) -> None:
        topo.check_lab_name(lab)
        self.lab = lab
        self.title = lab
        self.scenario = scenario
        self.labs_dir = labs_dir
        self.runs_dir = runs_dir
        meta = self._meta()
        self.shape = topo.Shape(meta["nodes"], meta["iphys"])
        self.follower: EventTail | None = None
        self.history: list[ev.Event] = []
        self._links: Any = None
        self._counters: dict[str, tuple[float, dict[str, int]]] = {}

    def _meta(self) -> dict[str, Any]:
        path = self.labs_dir / self.lab / "lab.json"
        try:
            meta = json.loads(path.read_text())
        except FileNotFoundError:
            labs = sorted(p.name for p in self.labs_dir.iterdir() if p.is_dir()) \
                if self.labs_dir.is_dir() else []
            raise UsageError(f"no lab {self.lab}" + (f" (labs: {', '.join(labs)})" if labs
                                                     else " (there are no labs)")) from None
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"{path}: cannot read the lab's record: {exc}") from None
        if meta.get("status") != "complete":
            raise UsageError(f"lab {self.lab} is not complete (status {meta.get('status')})",
                             hint="wait for its create to finish")
        return meta

    def initial_nodes(self) -> list[str]:
        return [topo.node_name(k) for k in self.shape.node_numbers()]

    def live(self) -> bool:
        return True

    def read_events(self) -> list[ev.Event]:
        marker = self.labs_dir / f"{self.lab}.run"
        try:
            began = marker.stat().st_mtime
        except FileNotFoundError:
            began = None
        if began is not None:
            # The run's directory is made after its marker: an older one is another run's.
            dirs = [d for d in run_dirs(self.lab, self.runs_dir)
                    if d.stat().st_mtime >= began - 1]
            newest = dirs[-1] / EVENTS_FILE if dirs else None
            if newest is not None and (self.follower is None or self.follower.path != newest):
                self.follower = follow(newest)
                self.history = []
                self.generation += 1
        if self.follower is None:
            return []
        new = self.follower.read()
        self.history += new
        return new

    def _lab_links(self) -> Any:
        if self._links is None:
            # Lazy: the lab runtime (OVS, pyroute2) stays out of the web layer's imports.
            from nestednet.lab import designs
            from nestednet.lab.record import LabRecord

            record = LabRecord(self.lab, self.labs_dir)
            self._links = designs.of(record.meta()).links(record)
        return self._links

    def _shaper(self) -> Any:
        # Lazy: as above.
        from nestednet.lab.record import LabRecord
        from nestednet.lab.shaping import LabShaper
        from nestednet.model.shaping_policy import RATE_ONLY, ShapingPolicy

        links = self._lab_links()
        return LabShaper(LabRecord(self.lab, self.labs_dir),
                         ShapingPolicy.choose(RATE_ONLY, False), tc_for=links.tc_for)

    def _port(self, end: topo.Endpoint) -> str:
        return topo.veth_name(self.lab, end.node, "inter-host", end.iphy)

    def _configured(self) -> dict[str, Any]:
        try:
            return json.loads((self.labs_dir / self.lab / "shaping.json").read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def _names(self) -> dict[int, str]:
        """Lab node number -> the name the view draws it by: a run's scenario names
        nodes in its `step` events (in node-number order), a bare lab by nK."""
        names = next((e.nodes for e in reversed(self.history) if e.event == ev.STEP
                      and e.nodes), None)
        if names and len(names) == self.shape.nodes:
            return {k: names[k - 1] for k in self.shape.node_numbers()}
        return {k: topo.node_name(k) for k in self.shape.node_numbers()}

    def _number(self, name: str) -> int:
        for number, drawn in self._names().items():
            if drawn == name:
                return number
        raise UsageError(f"no node {name!r} in lab {self.lab}")

    def links_now(self) -> list[LinkView]:
        links = self._lab_links()
        shaped = self._configured()
        names = self._names()
        out = []
        for a, b in links.links():
            props = {"a_to_b": shaped.get(self._port(b), {}).get("properties"),
                     "b_to_a": shaped.get(self._port(a), {}).get("properties")}
            out.append(LinkView(names[a.node], a.iphy, names[b.node], b.iphy, "manual",
                                props))
        return out

    def node_details(self, name: str, state: ViewState) -> dict[str, Any]:
        number = self._number(name)
        # Lazy: as above (a node's state comes from its engine, its routes over netlink).
        from nestednet.lab import designs
        from nestednet.lab.design import component_addresses
        from nestednet.lab.nodes import Lab
        from nestednet.model.addressing import plan_from_dict

        lab = Lab.open(self.lab)
        plan = plan_from_dict(lab.shape, lab.meta["plan"])
        design = designs.of(lab.meta)
        out: dict[str, Any] = {**_scenario_node(name, self.scenario, state),
                               "lab_node": topo.node_name(number),
                               "node_address": str(plan.node_address(number).ip),
                               "visible_peers": _visible_peers(name, state),
                               "links": _links_of(name, state)}
        try:
            status = design.node_status(lab, number, plan)
            out.update(state=status.get("state"), memory_mb=status.get("memory_mb"),
                       components=status.get("components", []))
        except Exception as exc:
            out["components"] = [{"component": topo.component_name(i), "state": "unknown",
                                  **component_addresses(plan, number, i)}
                                 for i in range(self.shape.iphys + 1)]
            out["state_error"] = str(exc)
        try:
            out["routes"] = self._routes(lab, design, number, plan)
        except Exception as exc:
            out["routes"] = _routes_from_events(name, self.history)
            out["routes_error"] = f"read from the run's events: {exc}"
        finally:
            design.close()
        return out

    def _routes(self, lab: Any, design: Any, number: int, plan: Any) -> list[dict[str, Any]]:
        """The GNAB's routes (its namespace is the node's view), read over netlink."""
        # Lazy: as above.
        from nestednet.adapters import netlink

        pid = design.gnab_pid(lab, number)
        rows = []
        with netlink.route(netlink.netns_path(pid)) as ipr:
            for r in ipr.get_routes(family=2, table=netlink.MAIN_TABLE):
                dst = f"{r.get_attr('RTA_DST') or '0.0.0.0'}/{r['dst_len']}"
                oif = r.get_attr("RTA_OIF")
                links = ipr.get_links(oif) if oif else []
                net = ipaddress.ip_network(dst, strict=False)
                rows.append({"dst": dst, "via": r.get_attr("RTA_GATEWAY"),
                             "dev": links[0].get_attr("IFLA_IFNAME") if links else None,
                             "to_node_address": net.version == 4 and net.subnet_of(plan.node)})
        return rows

    def link_details(self, a: str, b: str, state: ViewState) -> dict[str, Any]:
        ends = {}
        for link in self.links_now():
            if pair(link.a, link.b) == pair(a, b):
                first = topo.Endpoint(self._number(link.a), link.a_iphy)
                second = topo.Endpoint(self._number(link.b), link.b_iphy)
                ends = {"a_to_b": (link.a, first, second), "b_to_a": (link.b, second, first)}
                a, b = link.a, link.b
        if not ends:
            return {"a": a, "b": b, "up": False, "note": "no such link on the main bridge now"}
        shaped = self._configured()
        ports = {name: self._port(dst) for name, (_, _, dst) in ends.items()}
        kernel: Mapping[str, Any] = {}
        try:
            links = self._lab_links()
            kernel = self._shaper().read(list(ports.values()),
                                         {ports[n]: links.netns_of(d)
                                          for n, (_, _, d) in ends.items()})
        except Exception as exc:
            kernel = {"error": str(exc)}
        directions = {}
        now = time.monotonic()
        for name, (_, src, dst) in ends.items():
            port = ports[name]
            counters = port_counters(port)
            rate = None
            if counters is not None:
                before = self._counters.get(port)
                if before is not None and now > before[0]:
                    rate = round((counters["tx_bytes"] - before[1]["tx_bytes"]) * 8
                                 / (now - before[0]))
                self._counters[port] = (now, counters)
            directions[name] = {
                "from": f"{src}", "to": f"{dst}", "port": port,
                "configured": shaped.get(port, {}).get("properties"),
                "mode": shaped.get(port, {}).get("mode"),
                "kernel": kernel.get(port) if isinstance(kernel, Mapping) else None,
                "counters": counters, "measured_bps": rate}
        link = state.links.get(pair(a, b))
        return {"a": a, "b": b, "up": True, "directions": directions,
                "link": None if link is None else link.as_dict(),
                "kernel_error": kernel.get("error") if isinstance(kernel, Mapping) else None,
                "note": "measured_bps: the port's transmitted bytes since the last look"}
