"""The 3-D connectivity picture (seed thesis Fig. 3.9): nodes, visible pairs, links.

A frame is one step: node positions, the pairs that see each other (drawn faint) and
the links established (drawn bold, with the iPHY used at each end). Frames come from
a scenario, an events file written by a run, or both; building them is pure, only
``render_png``/``render_gif`` write files. Matplotlib is driven through its Agg
canvas directly (no pyplot), so nothing depends on a display or global state.

Links shown for a step are those up just before the next step begins, i.e. once the
step has settled (events with scenario_time before the next step's time).
Scenarios given as explicit pairs have no positions: their nodes are laid out on a
circle, the same for every frame.

With a label kind ("delay" or "rate"), every visible pair is coloured on one scale
for all frames and labelled with the property of its link (link_resolver.py: the
explicit value, else the link model); "a→b/b→a" when the two directions differ.

Orbital scenarios (positions in the ITRS frame, km) are drawn with the Earth: a
sphere in 3-D, or with ``map_view`` a longitude/latitude map (geodetic, WGS84);
satellites are dots, ground stations triangles, and pairs are coloured by their link
class (isl, gsl, default) unless a label kind colours them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestednet.errors import UsageError
from nestednet.model import events as ev
from nestednet.model.line_of_sight import Pair, Position
from nestednet.model.link_properties import LinkProperties
from nestednet.model.link_resolver import LinkResolver
from nestednet.model.scenario import Scenario, link_class

VISIBLE_STYLE = {"color": "#8a97a6", "linewidth": 0.9, "alpha": 0.55, "linestyle": "--"}
LINK_STYLE = {"color": "#c0392b", "linewidth": 3.0, "alpha": 0.95}
PATH_STYLE = {"color": "#f1c40f", "linewidth": 7.0, "alpha": 0.6}
NODE_COLOR = "#1f3b57"
CLASS_COLORS = {"isl": "#2874a6", "gsl": "#e67e22", "default": "#7f8c8d"}
EARTH_RADIUS_KM = 6371.0
"""The drawn sphere (mean radius); only a picture."""
GROUND_COLOR = "#b03a2e"


@dataclass(frozen=True)
class Frame:
    """Everything one picture shows."""

    time: float
    index: int
    count: int
    positions: Mapping[str, Position]
    visible: frozenset[Pair]
    links: Mapping[Pair, ev.LinkState] | None
    """None when no events were given (links unknown, not 'no links')."""
    title: str = ""
    laid_out: bool = False
    """True when positions are a circle layout, not real coordinates."""
    labels: Mapping[Pair, PairLabel] | None = None
    """Per visible pair, the value that colours it and the text beside it."""
    label_kind: str = ""
    path: tuple[tuple[str, str], tuple[str, ...] | None] | None = None
    """((from, to), the nodes along a fewest-hops path over the links, or None: none)."""
    earth: bool = False
    """Positions are Earth-fixed (ITRS) km: draw the Earth and colour by link class."""
    kinds: Mapping[str, str] | None = None
    """Node name -> "satellite" / "ground" (orbital scenarios)."""
    classes: Mapping[Pair, str] | None = None
    """Visible pair -> its link class (isl, gsl, default)."""


LABEL_KINDS = ("delay", "rate")
LABEL_UNITS = {"delay": "ms", "rate": "Mbit/s"}
COLORMAP = "viridis"


@dataclass(frozen=True)
class PairLabel:
    """How one visible pair is coloured (``value``, None: no link) and labelled."""

    value: float | None
    text: str


def _quantity(props: LinkProperties | None, kind: str) -> float | None:
    if props is None:
        return None
    if kind == "delay":
        return props.delay_us / 1000
    return None if props.rate_bps is None else props.rate_bps / 1e6


def pair_labels(resolver: LinkResolver, step: int, kind: str) -> dict[Pair, PairLabel]:
    """Each visible pair's delay (ms) or rate (Mbit/s); both directions when they differ."""
    out = {}
    for a, b in sorted(resolver.scenario.steps[step].visible):
        there = _quantity(resolver.properties_for(step, a, b), kind)
        back = _quantity(resolver.properties_for(step, b, a), kind)
        texts = ["-" if v is None else f"{v:.3g}" for v in (there, back)]
        known = [v for v in (there, back) if v is not None]
        out[(a, b)] = PairLabel(value=max(known) if known else None,
                                text=texts[0] if there == back else "/".join(texts))
    return out


def circle_layout(names: Sequence[str]) -> dict[str, Position]:
    """Nodes evenly on a unit-ish circle (radius 10), in the given order."""
    n = max(len(names), 1)
    return {name: (10 * math.cos(2 * math.pi * i / n), 10 * math.sin(2 * math.pi * i / n), 0.0)
            for i, name in enumerate(names)}


def frames_from_scenario(scenario: Scenario, events: Sequence[ev.Event] | None = None,
                         *, resolver: LinkResolver | None = None,
                         label: str = "") -> list[Frame]:
    """One frame per step; links from the events when given; labels from ``resolver``."""
    if label and label not in LABEL_KINDS:
        raise UsageError(f"unknown label {label!r}: choose one of {', '.join(LABEL_KINDS)}")
    if label and resolver is None:
        resolver = LinkResolver(scenario)
    layout = None if scenario.has_positions else circle_layout(scenario.node_names)
    earth = is_orbital(scenario)
    kinds = {n.name: n.kind for n in scenario.nodes if n.kind}
    frames = []
    for i, step in enumerate(scenario.steps):
        end = scenario.steps[i + 1].time if i + 1 < len(scenario.steps) else None
        links = ev.links_before(events, end) if events is not None else None
        frames.append(Frame(time=step.time, index=i, count=len(scenario.steps),
                            positions=step.positions if layout is None else layout,
                            visible=step.visible, links=links, title=scenario.name,
                            laid_out=layout is not None,
                            labels=pair_labels(resolver, i, label) if label and resolver
                            else None, label_kind=label, earth=earth, kinds=kinds or None,
                            classes={p: link_class(scenario.node(p[0]), scenario.node(p[1]))
                                     for p in step.visible}))
    return frames


def is_orbital(scenario: Scenario) -> bool:
    """Positions in the Earth-fixed frame, in km: the Earth can be drawn under them."""
    return scenario.frame == "ITRS" and scenario.length_unit == "km" and scenario.has_positions


def frames_from_events(events: Sequence[ev.Event], title: str = "") -> list[Frame]:
    """One frame per ``step`` record, for an events file read on its own."""
    steps = [e for e in events if e.event == ev.STEP]
    if not steps:
        raise UsageError("the events file has no 'step' records to draw",
                         hint="pass the scenario too: nestednet graph SCENARIO --events FILE")
    names = sorted({n for e in steps for n in e.nodes} | {n for e in steps for p in e.visible
                                                          for n in p})
    layout = circle_layout(names)
    with_positions = all(e.positions is not None and set(names) <= set(e.positions)
                         for e in steps)
    frames = []
    for i, step in enumerate(steps):
        end = steps[i + 1].scenario_time if i + 1 < len(steps) else None
        positions = step.positions if with_positions and step.positions is not None else layout
        frames.append(Frame(time=step.scenario_time, index=i, count=len(steps),
                            positions=positions, visible=frozenset(step.visible),
                            links=ev.links_before(events, end), title=title,
                            laid_out=not with_positions))
    return frames


def frame_at(frames: Sequence[Frame], t: float) -> Frame:
    """The frame of the step in effect at time t."""
    chosen = None
    for f in frames:
        if f.time <= t:
            chosen = f
    if chosen is None:
        raise UsageError(f"--at {t:g}: before the first step (t = {frames[0].time:g} s)")
    return chosen


def value_range(frames: Sequence[Frame]) -> tuple[float, float] | None:
    """The colour scale: the smallest and largest labelled value over all frames."""
    values = [lab.value for f in frames for lab in (f.labels or {}).values()
              if lab.value is not None]
    return (min(values), max(values)) if values else None


def render_png(frame: Frame, path: str | Path, *, dpi: int = 110,
               bounds: tuple[Position, Position] | None = None,
               map_view: bool = False) -> None:
    figure, axes = _figure(map_view)
    scale = _colour_scale(figure, [frame])
    _draw_any(axes, frame, bounds or _bounds([frame]), scale, map_view)
    _save(lambda: figure.savefig(str(path), dpi=dpi), path)


def render_gif(frames: Sequence[Frame], path: str | Path, *, dpi: int = 80,
               seconds_per_frame: float = 1.0, map_view: bool = False) -> None:
    """An animated GIF, one frame per step, on fixed axes so motion reads right."""
    from matplotlib.animation import PillowWriter

    figure, axes = _figure(map_view)
    bounds = _bounds(frames)
    scale = _colour_scale(figure, frames)
    writer = PillowWriter(fps=1.0 / seconds_per_frame)

    def write() -> None:
        with writer.saving(figure, str(path), dpi):
            for frame in frames:
                axes.clear()
                _draw_any(axes, frame, bounds, scale, map_view)
                writer.grab_frame()

    _save(write, path)


def _save(action: Callable[[], object], path: str | Path) -> None:
    try:
        action()
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _figure(map_view: bool = False) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if map_view:
        figure = Figure(figsize=(10, 5.6))
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        figure.subplots_adjust(left=0.07, right=0.98, bottom=0.09, top=0.92)
        return figure, axes
    figure = Figure(figsize=(8, 6.5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(projection="3d")
    figure.subplots_adjust(left=0, right=1, bottom=0.02, top=0.93)
    return figure, axes


def _draw_any(axes: Any, frame: Frame, bounds: tuple[Position, Position], scale: Any,
              map_view: bool) -> None:
    if map_view:
        _draw_map(axes, frame, scale)
    elif frame.earth:
        _draw_earth(axes, frame, scale)
    else:
        _draw(axes, frame, bounds, scale)


def _colour_scale(figure: Any, frames: Sequence[Frame]) -> Any:
    """A ScalarMappable over every frame's labelled values, with its colour bar; or None."""
    span = value_range(frames)
    if span is None:
        return None
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    scale = ScalarMappable(Normalize(*span) if span[0] < span[1]
                           else Normalize(span[0] - 1, span[1] + 1), COLORMAP)
    kind = frames[0].label_kind
    figure.colorbar(scale, ax=figure.axes[0], shrink=0.6, pad=0.1,
                    label=f"{kind} ({LABEL_UNITS[kind]})")
    return scale


def _bounds(frames: Sequence[Frame]) -> tuple[Position, Position]:
    points = [p for f in frames for p in f.positions.values()] or [(0.0, 0.0, 0.0)]
    lo = tuple(min(p[k] for p in points) for k in range(3))
    hi = tuple(max(p[k] for p in points) for k in range(3))
    return (lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2])


def _style(base: Mapping[str, Any], frame: Frame, pair: Pair, scale: Any) -> dict[str, Any]:
    """``base``, recoloured by the pair's labelled value when there is one."""
    label = (frame.labels or {}).get(pair)
    if scale is None or label is None or label.value is None:
        return dict(base)
    return dict(base) | {"color": scale.to_rgba(label.value), "alpha": 0.95}


def _draw_labels(axes: Any, frame: Frame) -> None:
    pos = frame.positions
    for (a, b), label in sorted((frame.labels or {}).items()):
        if a in pos and b in pos:
            mid = [(pos[a][k] + pos[b][k]) / 2 for k in range(3)]
            axes.text(*mid, label.text, fontsize=6.5, color="#333333", ha="center",
                      va="center", zorder=6, bbox={"boxstyle": "round,pad=0.1",
                                                   "facecolor": "white", "edgecolor": "none",
                                                   "alpha": 0.7})


def _draw(axes: Any, frame: Frame, bounds: tuple[Position, Position],
          scale: Any = None) -> None:
    from matplotlib.lines import Line2D

    pos = frame.positions
    links = frame.links or {}
    for a, b in sorted(frame.visible):
        if (a, b) in links or a not in pos or b not in pos:
            continue
        axes.plot(*zip(pos[a], pos[b], strict=True), **_style(VISIBLE_STYLE, frame, (a, b),
                                                              scale))
    span = max(bounds[1][0] - bounds[0][0], bounds[1][1] - bounds[0][1], 1e-9)
    for (a, b), link in sorted(links.items()):
        if a not in pos or b not in pos:
            continue
        axes.plot(*zip(pos[a], pos[b], strict=True), **_style(LINK_STYLE, frame, (a, b),
                                                              scale))
        for node, iphy, other in ((link.a, link.a_iphy, link.b), (link.b, link.b_iphy, link.a)):
            p, q = pos[node], pos[other]
            at = [p[k] + (q[k] - p[k]) * 0.22 for k in range(3)]
            axes.text(*at, f"i{iphy}", fontsize=6.5, color=LINK_STYLE["color"],
                      ha="center", va="center", zorder=6,
                      bbox={"boxstyle": "round,pad=0.12", "facecolor": "white",
                            "edgecolor": "none", "alpha": 0.85})
    path_label = _draw_path(axes, frame)
    names = sorted(pos)
    xs, ys, zs = (list(c) for c in zip(*(pos[n] for n in names), strict=True)) if names \
        else ([], [], [])
    axes.scatter(xs, ys, zs, s=70, color=NODE_COLOR, depthshade=False, zorder=5)
    for n in names:
        x, y, z = pos[n]
        axes.text(x, y, z + span * 0.025, n, fontsize=8.5, color=NODE_COLOR,
                  ha="center", va="bottom", fontweight="bold")

    _draw_labels(axes, frame)
    _limits(axes, bounds, frame.laid_out)
    visible_count = len(frame.visible)
    handles = [Line2D([], [], **VISIBLE_STYLE, label=f"visible pairs ({visible_count})")]
    if frame.links is not None:
        handles.append(Line2D([], [], **LINK_STYLE, label=f"links ({len(links)})"))
    if path_label:
        handles.append(Line2D([], [], **PATH_STYLE, label=path_label))
    axes.legend(handles=handles, loc="upper left", fontsize=8, frameon=False)
    head = f"{frame.title} — " if frame.title else ""
    note = "" if frame.links is not None else "   (no events: links not shown)"
    axes.set_title(f"{head}t = {frame.time:g} s   step {frame.index + 1}/{frame.count}{note}",
                   fontsize=10)


def with_path(frame: Frame, a: str, b: str) -> Frame:
    """``frame`` with the fewest-hops path from ``a`` to ``b`` over its links to draw."""
    path = ev.path_over_links((frame.links or {}).keys(), a, b)
    return dataclasses.replace(frame, path=((a, b), None if path is None else tuple(path)))


def _draw_path(axes: Any, frame: Frame) -> str:
    """Draw the frame's path under the links; returns its legend text ("" if none asked)."""
    if frame.path is None:
        return ""
    (a, b), nodes = frame.path
    if nodes is None:
        return f"no path {a} -> {b}"
    pos = frame.positions
    for x, y in itertools.pairwise(nodes):
        if x in pos and y in pos:
            axes.plot(*zip(pos[x], pos[y], strict=True), **PATH_STYLE, zorder=1)
    return f"path {a} -> {b} ({len(nodes) - 1} hops)"


def _limits(axes: Any, bounds: tuple[Position, Position], laid_out: bool) -> None:
    lo, hi = bounds
    spans = [hi[k] - lo[k] for k in range(3)]
    flat = max(spans[0], spans[1], 1.0)
    pads = [max(s * 0.06, flat * 0.03) for s in spans]
    for k, setter in enumerate((axes.set_xlim, axes.set_ylim, axes.set_zlim)):
        setter(lo[k] - pads[k], hi[k] + pads[k])
    z_box = max(spans[2], flat * 0.25)
    axes.set_box_aspect((max(spans[0], 1e-9), max(spans[1], 1e-9), z_box))
    if laid_out:
        axes.set_axis_off()
        axes.view_init(elev=60, azim=-90)
    else:
        axes.set_xlabel("x", fontsize=8)
        axes.set_ylabel("y", fontsize=8)
        axes.set_zlabel("z", fontsize=8)
        axes.tick_params(labelsize=7)


def _class_style(frame: Frame, pair: Pair, linked: bool, scale: Any) -> dict[str, Any]:
    """A pair's line: its class's colour (or its label's), bold when a link is up."""
    cls = (frame.classes or {}).get(pair, "default")
    base = {"color": CLASS_COLORS.get(cls, CLASS_COLORS["default"]),
            "linewidth": 2.6 if linked else (1.8 if cls == "gsl" else 0.9),
            "alpha": 0.95 if linked or cls == "gsl" else 0.6,
            "linestyle": "-" if linked or frame.links is None else "--"}
    return _style(base, frame, pair, scale)


def _class_handles(frame: Frame) -> list[Any]:
    from matplotlib.lines import Line2D

    counts: dict[str, int] = {}
    for pair in frame.visible:
        cls = (frame.classes or {}).get(pair, "default")
        counts[cls] = counts.get(cls, 0) + 1
    handles = [Line2D([], [], color=CLASS_COLORS[c], linewidth=2, label=f"{c} ({counts[c]})")
               for c in CLASS_COLORS if c in counts]
    if frame.links is not None:
        handles.append(Line2D([], [], color="black", linewidth=2.2,
                              label=f"links up ({len(frame.links)}; bold)"))
    return handles


def _title(axes: Any, frame: Frame, extra: str = "") -> None:
    head = f"{frame.title} — " if frame.title else ""
    note = "" if frame.links is not None else "   (no events: links not shown)"
    axes.set_title(f"{head}t = {frame.time:g} s   step {frame.index + 1}/{frame.count}"
                   f"{extra}{note}", fontsize=10)


def _draw_earth(axes: Any, frame: Frame, scale: Any) -> None:
    """The Earth as a sphere (wireframe meridians and parallels), nodes and pairs on it."""
    import numpy as np

    axes.computed_zorder = False
    u = np.linspace(0, 2 * np.pi, 48)
    v = np.linspace(0, np.pi, 24)
    r = EARTH_RADIUS_KM
    axes.plot_surface(r * np.outer(np.cos(u), np.sin(v)), r * np.outer(np.sin(u), np.sin(v)),
                      r * np.outer(np.ones_like(u), np.cos(v)), color="#aed6f1", alpha=0.45,
                      linewidth=0, shade=False, zorder=0)
    axes.plot_wireframe(r * np.outer(np.cos(u), np.sin(v)), r * np.outer(np.sin(u), np.sin(v)),
                        r * np.outer(np.ones_like(u), np.cos(v)), color="#85929e",
                        linewidth=0.3, alpha=0.6, rstride=4, cstride=4, zorder=1)
    pos = frame.positions
    links = frame.links or {}
    for a, b in sorted(frame.visible):
        if a in pos and b in pos:
            axes.plot(*zip(pos[a], pos[b], strict=True), zorder=2,
                      **_class_style(frame, (a, b), (a, b) in links, scale))
    kinds = frame.kinds or {}
    sats = [n for n in sorted(pos) if kinds.get(n) != "ground"]
    ground = [n for n in sorted(pos) if kinds.get(n) == "ground"]
    if sats:
        axes.scatter(*zip(*(pos[n] for n in sats), strict=True), s=14, color=NODE_COLOR,
                     depthshade=False, zorder=5)
    if ground:
        axes.scatter(*zip(*(pos[n] for n in ground), strict=True), s=60, marker="^",
                     color=GROUND_COLOR, depthshade=False, zorder=6)
    for n in ground + (sats if len(sats) <= 20 else []):
        x, y, z = pos[n]
        axes.text(x * 1.04, y * 1.04, z * 1.04, n, fontsize=7.5, fontweight="bold",
                  color=GROUND_COLOR if n in ground else NODE_COLOR, ha="center", zorder=10,
                  bbox={"boxstyle": "round,pad=0.1", "facecolor": "white",
                        "edgecolor": "none", "alpha": 0.7})
    _draw_path(axes, frame)
    extent = max(max(abs(c) for p in pos.values() for c in p), EARTH_RADIUS_KM) * 1.02
    for setter in (axes.set_xlim, axes.set_ylim, axes.set_zlim):
        setter(-extent, extent)
    axes.set_box_aspect((1, 1, 1))
    axes.set_axis_off()
    ground_view = [pos[n] for n in ground] or list(pos.values())
    mean = [sum(p[k] for p in ground_view) / len(ground_view) for k in range(3)]
    axes.view_init(elev=math.degrees(math.atan2(mean[2], math.hypot(mean[0], mean[1]))),
                   azim=math.degrees(math.atan2(mean[1], mean[0])))
    axes.legend(handles=_class_handles(frame), loc="upper left", fontsize=8, frameon=False)
    _title(axes, frame)


def _draw_map(axes: Any, frame: Frame, scale: Any) -> None:
    """Longitude/latitude (geodetic, WGS84) of every node; pairs as straight map lines,
    split at the antimeridian."""
    # Lazy: the orbit libraries load only for a map of an orbital scenario
    from nestednet.orbits.propagate import geodetic_latlon

    names = sorted(frame.positions)
    lat, lon = geodetic_latlon([frame.positions[n] for n in names])
    where = {n: (float(lon[i]), float(lat[i])) for i, n in enumerate(names)}
    links = frame.links or {}
    for a, b in sorted(frame.visible):
        (x1, y1), (x2, y2) = where[a], where[b]
        style = _class_style(frame, (a, b), (a, b) in links, scale)
        if abs(x2 - x1) <= 180:
            axes.plot([x1, x2], [y1, y2], **style)
        else:
            shift = 360 if x2 < x1 else -360
            axes.plot([x1, x2 + shift], [y1, y2], **style)
            axes.plot([x1 - shift, x2], [y1, y2], **style)
    kinds = frame.kinds or {}
    sats = [n for n in names if kinds.get(n) != "ground"]
    ground = [n for n in names if kinds.get(n) == "ground"]
    if sats:
        axes.scatter(*zip(*(where[n] for n in sats), strict=True), s=14, color=NODE_COLOR,
                     zorder=5)
    if ground:
        axes.scatter(*zip(*(where[n] for n in ground), strict=True), s=70, marker="^",
                     color=GROUND_COLOR, zorder=6)
    for n in ground + (sats if len(sats) <= 20 else []):
        axes.annotate(n, where[n], textcoords="offset points", xytext=(0, 6), ha="center",
                      fontsize=7.5, fontweight="bold",
                      color=GROUND_COLOR if n in ground else NODE_COLOR)
    axes.set_xlim(-180, 180)
    axes.set_ylim(-90, 90)
    axes.set_xticks(range(-180, 181, 30))
    axes.set_yticks(range(-90, 91, 30))
    axes.grid(color="#d5d8dc", linewidth=0.6)
    axes.axhline(0, color="#aab7b8", linewidth=0.8)
    axes.set_xlabel("longitude (°)", fontsize=8)
    axes.set_ylabel("geodetic latitude (°)", fontsize=8)
    axes.tick_params(labelsize=7)
    axes.set_facecolor("#f4f9fd")
    axes.legend(handles=_class_handles(frame), loc="lower left", fontsize=8, framealpha=0.8)
    _title(axes, frame)
