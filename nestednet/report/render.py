"""A run's report page: matplotlib figures (PNG) and tables, as Markdown or HTML.

HTML embeds the PNGs (base64), so the page is one file to send; Markdown writes them
into a ``<name>-files`` directory beside the page and links them.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nestednet.errors import UsageError
from nestednet.lab import runs
from nestednet.model import path_delay
from nestednet.model.actions import actions_summary
from nestednet.model.events import Event, negotiation_summary, read_events, route_summary
from nestednet.report import series

EVENTS_FILE = "events.jsonl"
_SPAN_COLOURS = {"link-down": "tab:red", "flap": "tab:orange", "partition": "tab:purple",
                 "crash": "black", "churn": "tab:gray", "degrade": "tab:olive"}


@dataclass
class Page:
    title: str
    sections: list[tuple[str, list[Any]]] = field(default_factory=list)
    """(heading, parts); a part is text, a table (list of rows, first the header) or a
    figure (name, PNG bytes)."""


def events_path(run: Path) -> Path:
    """The events file of a run directory (or the file itself): its events.jsonl, else
    the file its record (run.json) names, for a run given ``--events`` elsewhere."""
    path = run / EVENTS_FILE if run.is_dir() else run
    if run.is_dir() and not path.is_file() and (run / runs.RUN_RECORD).is_file():
        named = runs.read_run_record(run).get("events")
        if isinstance(named, str):
            path = Path(named)
    if not path.is_file():
        raise UsageError(f"{run}: no {EVENTS_FILE} here",
                         hint="give the directory `nestednet run` printed last")
    return path


def build(run: Path) -> Page:
    """The report of one run, from its events file."""
    events = read_events(events_path(run))
    if not events:
        raise UsageError(f"{run}: the events file is empty")
    end = max(e.scenario_time for e in events)
    spans = series.fault_spans(events, end)
    page = Page(f"NestedNet run report: {run}")
    step_list = series.steps(events)
    page.sections.append(("Steps", [[["step", "time s", "visible pairs (after cuts)"]]
                                    + [[i + 1, f"{t:.1f}", n] for i, t, n in step_list]]))
    parts: list[Any] = [("timeline", _timeline_png(events, spans, step_list, end))]
    if spans:
        parts.append([["fault", "from s", "until s"]]
                     + [[s.label, f"{s.start:.1f}", f"{s.end:.1f}"] for s in spans])
    page.sections.append(("Links, routes and faults over time", parts))
    routes = route_summary(events)
    if routes:
        page.sections.append(("Route changes and convergence", [
            [["step", "changes", "converged s"]]
            + [[r["step"] + 1, r["changes"],
                "-" if r["converged_s"] is None else f"{r['converged_s']:.1f}"]
               for r in routes]]))
    summary = actions_summary(events)
    measured: list[Any] = []
    for m in series.pings(events):
        measured.append((f"ping-{m.index}", _ping_png(m, spans, step_list)))
        figures = summary["ping"][m.index]
        measured.append(f"ping[{m.index}] {' -> '.join(m.nodes)}: {figures['answered']}/"
                        f"{figures['probes']} answered ({figures['loss_pct']:g} % lost), RTT "
                        f"p50 {_ms(figures['rtt_ms_p50'])}, max {_ms(figures['rtt_ms_max'])}")
    for m in series.iperfs(events):
        measured.append((f"iperf-{m.index}", _iperf_png(m, spans, step_list)))
        figures = summary["iperf"][m.index]
        measured.append(f"iperf[{m.index}] {' -> '.join(m.nodes)}: mean "
                        f"{(figures['mean_bps'] or 0) / 1e6:.2f} Mbit/s over "
                        f"{figures['intervals']} intervals")
    if measured:
        page.sections.append(("Measurements", measured))
    checks = series.fidelity(events)
    if checks:
        page.sections.append(("Fidelity: what the kernel holds against what was configured",
                              _fidelity_table(checks)))
    compared = path_delay.summary(events)
    if compared:
        page.sections.append(("Fidelity: measured RTT against the configured path delay",
                              _path_delay_parts(compared)))
    negotiation = negotiation_summary(events)
    page.sections.append(("Negotiation", [
        f"link requests {negotiation.get('requests', 0)}, refused "
        f"{negotiation.get('refused', 0)}",
        "```\n" + json.dumps(negotiation, indent=1) + "\n```"]))
    return page


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _fidelity_table(checks: list[dict[str, Any]]) -> list[Any]:
    """Matched count, then every mismatch and the first matches (up to 12 rows)."""
    matched = sum(1 for c in checks if c.get("matched"))
    rows = [["step", "direction", "port", "configured rate", "kernel rate", "drops",
             "backlog pkts", "matched"]]
    ordered = sorted(checks, key=lambda c: bool(c.get("matched")))
    for c in ordered:
        if c.get("matched") and len(rows) >= 13:
            break
        kernel = c.get("kernel") or {}
        rows.append([c.get("checked_step", 0) + 1, c.get("direction"), c.get("port"),
                     (c.get("configured") or {}).get("rate_bps"), kernel.get("rate_bps"),
                     kernel.get("class_dropped"), kernel.get("backlog_packets"),
                     "yes" if c.get("matched") else "NO: " + "; ".join(c["differences"])])
    return [f"{matched} of {len(checks)} shaped directions matched at their step's end",
            rows]


def _path_delay_parts(compared: dict[str, Any]) -> list[Any]:
    """The rule, then per ping one row per step: its path, configured and measured RTT."""
    bound = compared["bound"]
    parts: list[Any] = [
        "Each answered probe is compared with the sum of the one-way delays configured "
        "on the links its route crossed there and back (routes from the route events, "
        f"delays from link_up/link_update). Bound, fixed in advance: {bound['rule']} "
        f"(base {bound['base_ms']:g} ms, {bound['per_direction_ms']:g} ms per direction, "
        f"{bound['below_ms']:g} ms below)."]
    for ping in compared["pings"]:
        parts.append(f"ping[{ping['index']}] {' -> '.join(ping['nodes'])}: "
                     f"{ping['compared'] - ping['outside']} of {ping['compared']} compared "
                     f"probes within bound ({ping['answered']} answered, {ping['probes']} "
                     "sent)")
        rows = [["step", "from s", "path there / back", "configured RTT", "measured p50",
                 "error p50", "bound", "compared", "outside", "verdict"]]
        for r in ping["steps"]:
            bound_ms = "-" if r["bound_ms"] is None else \
                f"{r['bound_ms'][0]:.1f}..{r['bound_ms'][1]:.1f}"
            rows.append([
                "-" if r["step"] is None else r["step"] + 1, f"{r['from_s']:.1f}",
                f"{r['forward']} / {r['back']}" if r["forward"] else "no path known",
                _ms(r["configured_ms"]), _ms(r["measured_ms"]), _ms(r["error_ms"]), bound_ms,
                r["compared"], r["outside"],
                "PARTS" if r["parts"] else ("agrees" if r["compared"] else "-")])
        parts.append(rows)
    return parts


def _figure(height: float = 3.0, rows: int = 1) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, height * rows))
    axes = [fig.add_subplot(rows, 1, i + 1) for i in range(rows)]
    return fig, axes


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=90)
    return out.getvalue()


def _marks(ax: Any, spans: Sequence[series.Span], steps: Sequence[tuple[int, float, int]],
           legend: bool = False) -> None:
    """Step starts as dotted lines, fault windows shaded by kind."""
    for _, t, _ in steps:
        ax.axvline(t, color="grey", linestyle=":", linewidth=0.8)
    seen: set[str] = set()
    for s in spans:
        colour = _SPAN_COLOURS.get(s.kind, "tab:brown")
        ax.axvspan(s.start, s.end, color=colour, alpha=0.15,
                   label=s.kind if legend and s.kind not in seen else None)
        seen.add(s.kind)


def _timeline_png(events: Sequence[Event], spans: Sequence[series.Span],
                  steps: Sequence[tuple[int, float, int]], end: float) -> bytes:
    fig, (links, routes, rates) = _figure(2.4, 3)
    counts = series.link_counts(events)
    links.step([t for t, _ in counts] + [end], [n for _, n in counts] + [counts[-1][1]],
               where="post", label="links up")
    links.step([t for _, t, _ in steps] + [end], [n for *_, n in steps]
               + [steps[-1][2] if steps else 0], where="post", label="visible pairs (step)",
               linestyle="--")
    links.set_ylabel("count")
    _marks(links, spans, steps, legend=True)
    links.legend(loc="upper right", fontsize=7, ncol=4)
    changes = series.route_changes(events)
    routes.bar([t + 0.5 for t, _ in changes], [n for _, n in changes], width=0.9)
    routes.set_ylabel("route changes / s")
    _marks(routes, spans, steps)
    rate = series.link_rates(events)
    if rate:
        rates.plot([t for t, _ in rate], [r / 1e6 for _, r in rate], ".", markersize=3)
    rates.set_ylabel("link rate set (Mbit/s)")
    rates.set_xlabel("scenario time (s)")
    _marks(rates, spans, steps)
    for ax in (links, routes, rates):
        ax.set_xlim(0, end)
    return _png(fig)


def _ping_png(m: series.Measurement, spans: Sequence[series.Span],
              steps: Sequence[tuple[int, float, int]]) -> bytes:
    fig, (rtt, share) = _figure(2.4, 2)
    answered = [(t, v) for t, v in zip(m.times, m.values, strict=True) if v is not None]
    lost = [t for t, v in zip(m.times, m.values, strict=True) if v is None]
    rtt.plot([t for t, _ in answered], [v for _, v in answered], ".", markersize=3,
             label="RTT")
    top = max((v for _, v in answered), default=1.0)
    rtt.plot(lost, [top * 1.1] * len(lost), "x", color="tab:red", markersize=3,
             label="no answer")
    rtt.set_ylabel("RTT (ms)")
    rtt.set_title(f"ping[{m.index}] {' -> '.join(m.nodes)}", fontsize=9)
    rtt.legend(loc="upper right", fontsize=7)
    bins = series.answered_share(m)
    share.step([t for t, _ in bins], [100 * v for _, v in bins], where="post")
    share.set_ylabel("answered (%)")
    share.set_ylim(-5, 105)
    share.set_xlabel("scenario time (s)")
    for ax in (rtt, share):
        _marks(ax, spans, steps)
    return _png(fig)


def _iperf_png(m: series.Measurement, spans: Sequence[series.Span],
               steps: Sequence[tuple[int, float, int]]) -> bytes:
    fig, (ax,) = _figure(2.6)
    ax.step(m.times, [v / 1e6 for v in m.values if v is not None], where="pre")
    ax.set_ylabel("throughput (Mbit/s)")
    ax.set_xlabel("scenario time (s)")
    ax.set_title(f"iperf[{m.index}] {' -> '.join(m.nodes)}", fontsize=9)
    _marks(ax, spans, steps)
    return _png(fig)


def write(page: Page, out: Path) -> list[Path]:
    """Write the page (.md or .html by suffix); the files written."""
    if out.suffix not in (".md", ".html"):
        raise UsageError(f"{out}: the report is .md or .html")
    return _write_html(page, out) if out.suffix == ".html" else _write_md(page, out)


def _write_md(page: Page, out: Path) -> list[Path]:
    files = out.with_name(out.stem + "-files")
    files.mkdir(parents=True, exist_ok=True)
    lines, written = [f"# {page.title}", ""], []
    for heading, parts in page.sections:
        lines += [f"## {heading}", ""]
        for part in parts:
            if isinstance(part, tuple):
                png = files / f"{part[0]}.png"
                png.write_bytes(part[1])
                written.append(png)
                lines += [f"![{part[0]}]({files.name}/{png.name})", ""]
            elif isinstance(part, list):
                lines += ["| " + " | ".join(str(c) for c in part[0]) + " |",
                          "|" + "---|" * len(part[0])]
                lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in part[1:]]
                lines.append("")
            else:
                lines += [str(part), ""]
    out.write_text("\n".join(lines))
    return [out, *written]


def _write_html(page: Page, out: Path) -> list[Path]:
    body = [f"<h1>{html.escape(page.title)}</h1>"]
    for heading, parts in page.sections:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        for part in parts:
            if isinstance(part, tuple):
                data = base64.b64encode(part[1]).decode()
                body.append(f'<img alt="{part[0]}" src="data:image/png;base64,{data}">')
            elif isinstance(part, list):
                head = "".join(f"<th>{html.escape(str(c))}</th>" for c in part[0])
                rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row)
                               + "</tr>" for row in part[1:])
                body.append(f"<table><tr>{head}</tr>{rows}</table>")
            elif str(part).startswith("```"):
                body.append(f"<pre>{html.escape(str(part).strip('`'))}</pre>")
            else:
                body.append(f"<p>{html.escape(str(part))}</p>")
    style = ("body{font-family:sans-serif;max-width:60em;margin:auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}")
    out.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>"
                   f"{html.escape(page.title)}</title><style>{style}</style></head><body>"
                   + "\n".join(body) + "</body></html>")
    return [out]
