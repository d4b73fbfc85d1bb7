"""`Lab`: one handle on one lab, to create or open it, reach its nodes, link them and
delete it, from Python.

The handle reads the lab's record (lab.json) once, when it is created or opened, and
hands that one reading down to everything it calls (the node design, the links, the
shaping), so a script and the command line see the same lab the same way. No call
prints; `create` reports progress through an optional callback.

A lab made with `Lab.create` inside a ``with`` block is deleted when the block ends,
unless ``keep=True``; one reached with `Lab.open` is kept unless ``keep=False``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestednet.adapters import docker_engine
from nestednet.api.links import (
    Link,
    LinkValue,
    link_from_row,
    parse_link_properties,
    properties_given,
)
from nestednet.api.nodes import Component, Node
from nestednet.api.process import Write
from nestednet.api.run import Run, RunRequest
from nestednet.errors import InputError
from nestednet.lab import components as lab_components
from nestednet.lab import create as lab_create
from nestednet.lab import designs, record, shaping, teardown
from nestednet.lab import status as lab_status
from nestednet.lab.links import LabLinks, broken_because
from nestednet.lab.nodes import Lab as LabHandle
from nestednet.model import link_rules
from nestednet.model import scenario as model_scenario
from nestednet.model import topology as topo
from nestednet.model.addressing import AddressPlan, plan_from_dict
from nestednet.model.component_spec import (
    COMPONENT_CAPS,
    parse_component_caps,
    parse_component_images,
)
from nestednet.model.placement import DEFAULT_STRATEGY, HostSet, load_hosts
from nestednet.model.shaping_policy import FULL
from nestednet.routing import strategies

Progress = Callable[[str, int], None]
"""Called with (phase, node number) each time a node finishes a phase of `Lab.create`."""


@dataclass(frozen=True)
class CreatePlan:
    """What `Lab.check` found: the request as the lab runtime takes it, and how it will
    be built (the design's per-node phases, for a progress display)."""

    request: lab_create.CreateRequest
    kind: str
    """The node design: ``nested``, ``flat`` or ``swarm`` (several hosts)."""
    title: str
    """How the command line names a lab of this design ("" or "flat ")."""
    phases: tuple[str, ...]
    """Per-node build phases, in order; `Lab.create`'s progress callback names them."""


def _caps(value: Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return COMPONENT_CAPS
    if isinstance(value, str):
        raise InputError(f"component_caps={value!r}: give a list of names, e.g. "
                         "['NET_ADMIN'] (or [] for none), not a string")
    return parse_component_caps(",".join(value)) if value else ()


def _images(value: Mapping[str, str] | Iterable[str] | None) -> tuple[tuple[str, str], ...]:
    if not value:
        return ()
    if isinstance(value, str):
        raise InputError(f"images={value!r}: give {{'gnab': IMAGE, 'iphy': IMAGE}}")
    items = ([f"{k}={v}" for k, v in value.items()] if isinstance(value, Mapping)
             else list(value))
    return parse_component_images(items)


def _hosts(value: str | Path | HostSet | None) -> HostSet | None:
    if value is None or isinstance(value, HostSet):
        return value
    return load_hosts(Path(value))


class Lab:
    """A lab of N nodes, each a GNAB plus M iPHYs (see `nestednet create --help`)."""

    def __init__(self, handle: LabHandle, *, keep: bool = True) -> None:
        """Use `Lab.create` or `Lab.open`."""
        self._handle = handle
        self._design = designs.of(handle.meta)
        self._plan: AddressPlan = plan_from_dict(handle.shape, handle.meta["plan"])
        self._links: LabLinks | None = None
        self.keep = keep
        """Whether leaving a ``with`` block keeps the lab (else it is deleted)."""
        self._deleted = False

    # --- making and finding labs -------------------------------------------------

    @classmethod
    def check(cls, name: str, *, nodes: int, iphys: int, routing: str = strategies.DEFAULT,
              flat: bool = False, hosts: str | Path | HostSet | None = None,
              images: Mapping[str, str] | Iterable[str] | None = None,
              cpus: float | None = None, memory: int | None = None,
              component_caps: Sequence[str] | None = None, jobs: int | None = None,
              placement: str = DEFAULT_STRATEGY, pins: Sequence[str] = ()) -> CreatePlan:
        """Check `create`'s arguments without making anything: InputError on the first
        problem, else what `create` would build."""
        if hosts is None and (pins or placement != DEFAULT_STRATEGY):
            raise InputError("--place and --pack need --hosts FILE")
        if flat and hosts is not None:
            raise InputError("--flat and --hosts cannot be combined",
                             hint="labs over several hosts are nested")
        if isinstance(pins, str):
            raise InputError(f"pins={pins!r}: give a list of NODE=HOST items")
        design = designs.named("flat" if flat else "swarm" if hosts is not None else "nested")
        request = lab_create.CreateRequest(
            lab=name, nodes=nodes, iphys=iphys, cpus=cpus, memory_mb=memory,
            design=design.kind, routing=routing, component_caps=_caps(component_caps),
            images=_images(images), jobs=jobs if jobs is not None else lab_create.DEFAULT_JOBS,
            hosts=_hosts(hosts), placement=placement, pins=tuple(pins))
        lab_create.validate(request)
        return CreatePlan(request, design.kind, design.title, tuple(design.phases))

    @classmethod
    def create(cls, name: str, *, nodes: int, iphys: int, routing: str = strategies.DEFAULT,
               flat: bool = False, hosts: str | Path | HostSet | None = None,
               images: Mapping[str, str] | Iterable[str] | None = None,
               cpus: float | None = None, memory: int | None = None,
               component_caps: Sequence[str] | None = None, jobs: int | None = None,
               placement: str = DEFAULT_STRATEGY, pins: Sequence[str] = (),
               keep: bool = False, progress: Progress | None = None) -> Lab:
        """Build a lab and return its handle (everything is rolled back on failure).

        ``routing``: none, direct or babel (routes to node addresses across links).
        ``flat``: the Containernet-style baseline (one container per node).
        ``hosts``: a hosts file (or `HostSet`) to spread the nodes over several hosts.
        ``images``: your own image per role, ``{"iphy": "me/iphy:1"}``.
        ``cpus``, ``memory``: limits per component (MB). ``keep``: see the class.
        """
        plan = cls.check(name, nodes=nodes, iphys=iphys, routing=routing, flat=flat,
                         hosts=hosts, images=images, cpus=cpus, memory=memory,
                         component_caps=component_caps, jobs=jobs, placement=placement,
                         pins=pins)
        return cls.build(plan, keep=keep, progress=progress)

    @classmethod
    def build(cls, plan: CreatePlan, *, keep: bool = False,
              progress: Progress | None = None) -> Lab:
        """Build the lab `check` planned (`create` is `check` then `build`)."""
        meta = lab_create.create(plan.request, progress or (lambda _phase, _node: None))
        lab_record = record.LabRecord(plan.request.lab)
        handle = LabHandle(lab_record, meta, topo.Shape(meta["nodes"], meta["iphys"]),
                           docker_engine.connect())
        return cls(handle, keep=keep)

    @classmethod
    def open(cls, name: str, *, keep: bool = True) -> Lab:
        """The existing, complete lab ``name``; InputError naming the labs there are."""
        return cls(LabHandle.open(name), keep=keep)

    @staticmethod
    def names() -> list[str]:
        """The labs on this machine (complete or not)."""
        return record.existing_labs()

    @staticmethod
    def exists(name: str) -> bool:
        """Whether lab ``name`` has a record on this machine (complete or not)."""
        return record.LabRecord(name).exists()

    # --- what it is --------------------------------------------------------------

    @property
    def name(self) -> str:
        """The lab's name (its containers are ``<name>-n<i>``)."""
        return self._handle.record.lab

    @property
    def shape(self) -> topo.Shape:
        """``shape.nodes`` and ``shape.iphys``."""
        return self._handle.shape

    @property
    def kind(self) -> str:
        """The node design: ``nested``, ``flat`` or ``swarm``."""
        return self._design.kind

    @property
    def routing(self) -> str:
        """How routes to node addresses appear: none, direct or babel."""
        return self._handle.meta.get("routing", "none")

    @property
    def meta(self) -> dict[str, Any]:
        """The lab's record (lab.json) as read when this handle was made."""
        return dict(self._handle.meta)

    @property
    def nodes(self) -> list[Node]:
        """Its nodes, n1 first."""
        return [Node(self, k) for k in self.shape.node_numbers()]

    def node(self, node: str | int) -> Node:
        """Node ``"n3"`` (or 3); InputError when the lab has no such node."""
        name = topo.node_name(node) if isinstance(node, int) else node
        return Node(self, self.shape.check_node(name))

    def component(self, endpoint: str) -> Component:
        """``"n3:iphy2"`` (or ``"n3:gnab"``)."""
        node, sep, comp = endpoint.partition(":")
        if not sep:
            raise InputError(f"bad component {endpoint!r}: write NODE:COMPONENT, e.g. n1:iphy2")
        return self.node(node).component(comp)

    def status(self) -> dict[str, Any]:
        """Nodes, components and their state, addresses, links, memory: what
        `nestednet status --json` prints."""
        return lab_status.status(self._handle)

    # --- links -------------------------------------------------------------------

    def link(self, a: str | Component, b: str | Component, *, rate: LinkValue = None,
             delay: LinkValue = None, jitter: LinkValue = None, loss: LinkValue = None,
             shaping_mode: str = FULL, keep_order: bool = False) -> Link:
        """Link iPHY ``a`` to iPHY ``b`` (``"n1:iphy1"`` or a `Component`), shaped alike
        both ways when any of ``rate`` ("20Mbit"), ``delay`` ("5ms"), ``jitter`` or
        ``loss`` ("1%") is given. The shaping goes in before the flows."""
        given = properties_given(rate=rate, delay=delay, jitter=jitter, loss=loss)
        properties = parse_link_properties(given) if given else None
        ends = self._endpoint(a), self._endpoint(b)
        links = self._lab_links()
        made = shaping.add_link(links, self._shaper(shaping_mode, keep_order), *ends,
                                properties)
        return Link(self, *made)

    def links(self) -> list[Link]:
        """The links present now, each with its configured and kernel-held properties
        per direction and, when an end's node died, why it carries nothing."""
        links = self._lab_links()
        present = links.links()
        dead = self.dead_nodes() if present else set()
        rows = shaping.list_links(links, self._shaper(FULL))
        return [link_from_row(self, x, {**row, "broken": broken_because(x, dead)})
                for x, row in zip(present, rows, strict=True)]

    def get_link(self, a: str | Component, b: str | Component) -> Link:
        """The existing link between ``a`` and ``b``; InputError when there is none."""
        found = link_rules.find_link(self._lab_links().links(), self._endpoint(a),
                                     self._endpoint(b))
        return Link(self, *found)

    def dead_nodes(self) -> set[int]:
        """Numbers of the nodes whose parent is not running (killed, stopped, gone)."""
        return self._design.dead_nodes(self._handle)

    # --- scenarios ---------------------------------------------------------------

    def run(self, scenario: str | Path | model_scenario.Scenario, *, speed: float = 1.0,
            until: float | None = None, link_model: str | Path | None = None,
            shaping: str = FULL, keep_order: bool = False, events: str | Path | None = None,
            length_unit: str | None = None, hello_timeout: float = 90.0,
            plot_dir: str | Path | None = None,
            progress: Callable[[str], None] | None = None) -> Run:
        """Start playing ``scenario`` (a file, or a `Scenario`) on this lab and return the
        running `Run` (use it in a ``with`` block, or call `Run.summary` to wait).

        ``speed``: scenario seconds per wall-clock second; ``until``: stop at this
        scenario time; ``link_model``: a link-model file for links the scenario gives
        no values for; ``shaping``: full, or rate-only on a kernel without sch_netem;
        ``events``: the events file (default: a new results directory).
        """
        request = RunRequest(scenario=scenario if isinstance(scenario, model_scenario.Scenario)
                             else Path(scenario), lab=self.name, speed=speed, until=until,
                             events=None if events is None else Path(events),
                             hello_timeout=hello_timeout,
                             plot_dir=None if plot_dir is None else Path(plot_dir),
                             link_model=None if link_model is None else Path(link_model),
                             length_unit=length_unit, shaping_mode=shaping,
                             keep_order=keep_order)
        return Run(request, progress=progress, _lab=self).begin()

    # --- lifetime ----------------------------------------------------------------

    def delete(self) -> int:
        """Remove everything the lab made; returns how many resources were removed."""
        removed = teardown.delete_lab(self._handle.record, client=self._handle.client)
        self._deleted = True
        self.close()
        return len(removed.items)

    def close(self) -> None:
        """Release this handle's connections (the lab stays)."""
        self._design.close()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.keep or self._deleted:
            self.close()
        else:
            self.delete()

    def __repr__(self) -> str:
        return f"<Lab {self.name}: {self.shape.nodes} x {self.shape.iphys} {self.kind}>"

    # --- for Node, Component, Link and the command line --------------------------

    def _endpoint(self, end: str | Component) -> topo.Endpoint:
        text = end.endpoint if isinstance(end, Component) else end
        return topo.parse_endpoint(text, self.shape)

    def _lab_links(self) -> LabLinks:
        if self._links is None:
            self._links = self._design.links(self._handle.record, self._handle.meta)
        return self._links

    def _shaper(self, mode: str, keep_order: bool = False) -> shaping.LabShaper:
        # Fresh each time: its state file may have been changed by another process.
        return shaping.lab_shaper(self._handle.record, mode, keep_order, self._lab_links())

    def _exec(self, node: str, component: str, argv: list[str], out: Write,
              err: Write) -> int:
        return lab_components.exec_in(self._handle, node, component, argv, out, err)

    def _swap(self, node: str, component: str, path: Path, restart: bool) -> dict:
        return lab_components.swap(self._handle, node, component, path, restart=restart)

    def _node_status(self, number: int) -> dict[str, Any]:
        self._design.before_use(self._handle)
        return self._design.node_status(self._handle, number, self._plan)


def delete(name: str) -> int | None:
    """Delete lab ``name`` even when it is not complete (a crashed create); the number
    of resources removed, or None when there is no such lab."""
    removed = delete_detailed(name)
    return None if removed is None else len(removed.items)


def delete_detailed(name: str) -> teardown.Removed | None:
    """As `delete`, with what was removed (``items``) and what could not be
    (``kept``: the part on a host that did not answer, recorded for `cleanup --hosts`)."""
    lab_record = record.LabRecord(name)
    if not lab_record.exists():
        return None
    return teardown.delete_lab(lab_record)


def cleanup(*, dry_run: bool = False,
            hosts: str | Path | HostSet | None = None) -> teardown.Removed:
    """Remove the leftovers of crashed creates and runs (`nestednet cleanup`): only what
    carries NestedNet's marks; complete labs are kept. With ``hosts`` (a hosts file),
    instead: the parts of deleted labs left on those hosts while they were not
    reachable (nothing on this machine is looked at)."""
    if hosts is not None:
        return teardown.cleanup_hosts(_hosts(hosts), dry_run=dry_run)
    return teardown.cleanup(dry_run=dry_run)
