"""`nestednet run`: play a scenario on a lab with the communication assistant."""

from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path

import click
from rich.live import Live as RichLive
from rich.text import Text

from nestednet.ca import session
from nestednet.cli.output import err_console, out_console, print_json, progress
from nestednet.model.scenario_file import DEFAULT_IPHYS, load_scenario


def register(group: click.Group) -> None:
    group.add_command(run)


def _status_line(live: session.Live) -> Text:
    p = live.progress
    if live.phase != "playing":
        return Text(f"{live.phase} ...")
    return Text(f"t={live.scenario_time:6.1f}/{live.duration:.0f} s  step {max(live.step, 0) + 1}"
                f"/{live.steps}  links up {live.links}  this step: requests {p.requests}, "
                f"new {p.links_up}, refused {p.links_failed}, down {p.links_down}")


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--lab", default="nn", show_default=True,
              help="Lab to run on; created with the scenario's shape if it does not exist.")
@click.option("--speed", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Scenario seconds per wall-clock second.")
@click.option("--until", type=click.FloatRange(min=0), metavar="T",
              help="Stop at scenario time T instead of the scenario's end.")
@click.option("--events", type=click.Path(dir_okay=False, path_type=Path),
              help="Event log (JSON lines); default events.jsonl in the lab's directory.")
@click.option("--rm", "remove_lab", is_flag=True, help="Delete the lab when the run ends.")
@click.option("--iphys", type=click.IntRange(min=1), default=DEFAULT_IPHYS, show_default=True,
              help="iPHYs per node for NestedNet-format scenarios (which do not say).")
@click.option("--hello-timeout", type=click.FloatRange(min=1), default=90, show_default=True,
              help="Seconds to wait for every GNAB agent's HELLO.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write a connectivity picture (PNG) per step into this directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
def run(scenario: Path, lab: str, speed: float, until: float | None, events: Path | None,
        remove_lab: bool, iphys: int, hello_timeout: float, as_json: bool,
        plot_dir: Path | None = None) -> None:
    """Play SCENARIO on a lab: the CA negotiates links with every GNAB as visibility changes.

    \b
    Steps: create the lab if needed (shape from the scenario), start the CA on the
    lab's control net, wait for every GNAB's HELLO, then play the time steps in
    real time (x --speed) with a live summary. Ctrl-C stops cleanly; the CA
    removes the flows it installed either way.

    \b
    Examples:
      nestednet run scenarios/small-4x2.json --lab demo --speed 2 --rm
      nestednet run scenarios/demo-12x4.json --until 30 --events /tmp/ev.jsonl
    """
    loaded = load_scenario(scenario, nestednet_iphys=iphys)
    options = session.RunOptions(lab=lab, speed=speed, until=until, events=events,
                                 remove_lab=remove_lab, hello_timeout=hello_timeout,
                                 plot_dir=plot_dir)
    options.created_lab = session.ensure_lab(loaded, options, notify=progress)
    stop = threading.Event()
    live = session.Live()
    outcome: dict = {}

    def work() -> None:
        try:
            outcome["summary"] = session.run(loaded, options, stop, live, notify=progress)
        except BaseException as exc:  # handed to the main thread, which reports it
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="nestednet-run")
    worker.start()
    interrupted = False
    try:
        if err_console.is_terminal:
            with RichLive(_status_line(live), console=err_console, refresh_per_second=4) as view:
                while worker.is_alive():
                    worker.join(0.25)
                    view.update(_status_line(live))
        else:
            shown = None
            while worker.is_alive():
                worker.join(0.25)
                if live.phase == "playing" and live.step != shown:
                    shown = live.step
                    err_console.print(_status_line(live), soft_wrap=True)
    except KeyboardInterrupt:
        interrupted = True
        err_console.print("stopping (Ctrl-C) ...")
        stop.set()
        worker.join()
    if "error" in outcome:
        raise outcome["error"]
    summary = outcome["summary"]
    if as_json:
        print_json(dataclasses.asdict(summary))
    else:
        state = "interrupted" if summary.interrupted else "finished"
        out_console.print(
            f"run {state}: lab {summary.lab}, {summary.steps_played} steps, scenario time "
            f"{summary.scenario_time:.1f} s; links made {summary.links_up}, refused "
            f"{summary.links_failed}, taken down {summary.links_down}, requests "
            f"{summary.requests}; events in {summary.events}")
        out_console.print(session.describe_negotiation(summary.negotiation))
        if summary.removed_lab:
            out_console.print(f"lab {summary.lab} deleted (--rm)")
        elif summary.created_lab:
            out_console.print(f"lab {summary.lab} kept: `nestednet delete --lab {summary.lab}`")
    if interrupted:
        sys.exit(130)
