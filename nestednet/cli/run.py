"""`nestednet run`: play a scenario on a lab with the communication assistant, through the
API's `Run` (nestednet.api.run): parse, call, print."""

from __future__ import annotations

import dataclasses
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource
from rich.live import Live as RichLive
from rich.text import Text

from nestednet.api.run import RUNS_DIR, Run, RunRequest
from nestednet.cli.nodes import COMPONENT_CAPS_OPTION, ROUTING_OPTION
from nestednet.console import FiniteFloat, err_console, out_console, print_json, progress
from nestednet.errors import ExitStatus, UsageError
from nestednet.model.link_properties import describe_link_steps
from nestednet.model.run_report import (
    describe_actions,
    describe_fidelity,
    describe_host_flows,
    describe_negotiation,
    describe_path_delay,
    describe_routes,
)
from nestednet.model.scenario import LENGTH_UNITS, MAX_IPHYS
from nestednet.model.scenario_file import DEFAULT_IPHYS
from nestednet.model.shaping_policy import FULL, MODES
from nestednet.model.step_figures import StepFigures, StepTally

if TYPE_CHECKING:
    from nestednet.ca import session


def register(group: click.Group) -> None:
    group.add_command(run)


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--lab", default="nn", show_default=True,
              help="Lab to run on; created with the scenario's shape if it does not exist.")
@click.option("--speed", type=FiniteFloat(min=0, min_open=True), default=1.0,
              show_default=True, help="Scenario seconds per wall-clock second.")
@click.option("--until", type=FiniteFloat(min=0), metavar="T",
              help="Stop at scenario time T instead of the scenario's end.")
@click.option("--events", type=click.Path(dir_okay=False, path_type=Path),
              help="Event log (JSON lines); default events.jsonl in a new directory "
                   f"{RUNS_DIR}/<lab>-<timestamp>/, which outlives the lab (--rm).")
@click.option("--rm", "remove_lab", is_flag=True,
              help="Delete the lab when the run ends (the results are kept).")
@click.option("--iphys", type=click.IntRange(min=1, max=MAX_IPHYS), default=None,
              help="iPHYs per node for NestedNet-format scenarios (which do not say); "
                   f"default: the existing lab's count, else {DEFAULT_IPHYS}.")
@click.option("--hello-timeout", type=FiniteFloat(min=1), default=90, show_default=True,
              help="Seconds to wait for every GNAB agent's HELLO.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write a connectivity picture (PNG) per step into this directory.")
@click.option("--link-model", "link_model", type=click.Path(dir_okay=False, path_type=Path),
              help="Link-model file (scenarios/models/): rate, delay, jitter and loss of "
                   "links the scenario gives no explicit values for; overrides its "
                   "link_model.")
@click.option("--length-unit", type=click.Choice(sorted(LENGTH_UNITS)),
              help="Unit of the positions, for a file that does not state one (the "
                   "NestedNet format never does); distance-based models need it.")
@click.option("--shaping", "shaping_mode", type=click.Choice(MODES), default=FULL,
              show_default=True,
              help="rate-only: shape the rate alone (HTB) and leave delay, jitter and loss "
                   "out, on a kernel without sch_netem; recorded in the events.")
@click.option("--keep-order", is_flag=True,
              help="Jitter without reordering: netem paced at each link's rate.")
@ROUTING_OPTION
@COMPONENT_CAPS_OPTION
@click.option("--allow-faults", is_flag=True,
              help="Let the scenario's crash and churn actions freeze nodes of a lab this "
                   "run did not create (refused otherwise).")
@click.option("--resume", "resume_dir", metavar="RUN_DIR",
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Take over a run whose process died (killed, machine asleep), from its "
                   "directory (printed last): its own options, its "
                   "links kept, play going on from the scenario time it is now.")
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
@click.pass_context
def run(ctx: click.Context, scenario: Path | None, lab: str, speed: float,
        until: float | None, events: Path | None, remove_lab: bool, iphys: int | None,
        hello_timeout: float, as_json: bool, resume_dir: Path | None = None,
        plot_dir: Path | None = None, link_model: Path | None = None,
        length_unit: str | None = None, shaping_mode: str = FULL,
        keep_order: bool = False, routing: str = "none",
        component_caps: tuple[str, ...] | None = None, allow_faults: bool = False) -> None:
    """Play SCENARIO on a lab: the CA negotiates links with every GNAB as visibility changes.

    \b
    Steps: create the lab if needed (shape from the scenario), start the CA on the
    lab's control net, wait for every GNAB's HELLO, then play the time steps in
    real time (x --speed). One line per step, printed once the step is over, gives
    its figures as the events file has them. Ctrl-C stops promptly, the CA removes
    the links (flows) it installed, the summary so far is printed, exit 130
    (SIGTERM does the same, exit 143).
    The events file is kept after the lab; the last line is the run's directory
    (its record run.json, and its events unless --events said otherwise), which
    `nestednet report` and `run --resume` take.
    A run whose process died (SIGKILL, a closed laptop) is taken over with
    --resume RUN_DIR: the same options, the links it had, play from the time now.
    --routing and --component-caps apply when run creates the lab; an existing lab
    keeps what it was created with.

    
    Links with properties (explicit per step, or a link model): each direction is
    shaped on the receiving iPHY's port before the flows go in (HTB rate, netem
    delay/jitter/loss), changed in place at every step while the link stays up,
    removed when it goes down; link_up and link_update events carry the values.
    A kernel without sch_netem refuses delay, jitter and loss (exit 2) unless
    --shaping rate-only. Everything is checked before the lab is touched.

    The scenario's "actions" (scenarios/actions.schema.json) play with the steps:
    link-down/up, flap, partition, degrade, crash/restart, churn, exec, ping and
    iperf; their results are events in the run directory (`nestednet report DIR`).

    \b
    Examples:
      nestednet run scenarios/small-4x2.json --lab demo --speed 2 --rm
      nestednet run scenarios/demo-12x4.json --until 30 --events /tmp/ev.jsonl
      nestednet run scenarios/thesis-fig-3.11.json --lab nn   # iPHYs: the lab's
      nestednet run scenarios/uav-swarm-2g4.json --shaping rate-only   # no netem here
      nestednet run scenarios/thesis-fig-3.11.json --link-model \
          scenarios/models/wifi-2g4.json --length-unit m
      nestednet run --resume /var/lib/nestednet/runs/demo-20261126-101500
    """
    if resume_dir is not None:
        given = [f"--{name.replace('_', '-')}" for name in ctx.params
                 if name not in ("resume_dir", "as_json")
                 and ctx.get_parameter_source(name) is not ParameterSource.DEFAULT]
        if given:
            raise UsageError(f"--resume takes the run's own options from "
                             f"{resume_dir}/run.json; leave out {', '.join(given)}")
        play(Run.resume(resume_dir, progress=progress), None, as_json)
        return
    if scenario is None:
        raise UsageError("give a SCENARIO to play, or --resume RUN_DIR")
    execute(RunRequest(
        scenario=scenario, lab=lab, speed=speed, until=until, events=events,
        remove_lab=remove_lab, iphys=iphys, hello_timeout=hello_timeout, plot_dir=plot_dir,
        link_model=link_model, length_unit=length_unit, shaping_mode=shaping_mode,
        keep_order=keep_order, routing=routing, component_caps=component_caps,
        allow_faults=allow_faults), as_json)


def execute(request: RunRequest, as_json: bool) -> None:
    """Play ``request`` with the live display, print the summary; exit 130 after Ctrl-C
    (143 after SIGTERM).

    `run` and `demo` both end here, each with its own typed request.
    """
    play(Run(request, progress=progress), request.plot_dir, as_json)


def play(active: Run, plot_dir: Path | None, as_json: bool) -> None:
    """Start ``active``, show it, print its summary; exit 130 after Ctrl-C, 143 after
    SIGTERM."""
    with active:
        stopped_by = _play(active)
    summary = active.summary()
    _print_summary(summary, plot_dir or active.request.plot_dir, as_json)
    if stopped_by is not None:
        sys.exit(ExitStatus.INTERRUPTED if stopped_by == signal.SIGINT else 128 + stopped_by)


def _play(active: Run) -> int | None:
    """Show each step of a started run as it ends; the signal that stopped it, if any."""
    live, tally = active.live, StepTally()
    with (_signals_stop(active.stop) as stopped_by,
          _status_display(lambda: _status_line(live, tally)) as refresh):
        warned = False
        while active.wait(0.25):
            _print_steps(tally.add(active.new_events()), live)
            if stopped_by and not warned:
                warned = True
                why = "Ctrl-C" if stopped_by[0] == signal.SIGINT else "SIGTERM"
                err_console.print(f"stopping ({why}): removing the run's links ...")
            refresh()
    _print_steps(tally.add(active.new_events()) + tally.finish(), live)
    return stopped_by[0] if stopped_by else None


@contextmanager
def _signals_stop(stop: Callable[[], None]) -> Iterator[list[int]]:
    """While inside, SIGINT and SIGTERM call ``stop`` (and append to the yielded list)
    instead of raising or killing: a run stopped by `kill`, `timeout` or a service
    manager removes its links as after Ctrl-C (a SIGTERM'd soak run left its links, its
    run marker and its clock).

    A KeyboardInterrupt could land anywhere in the main thread (even inside
    Thread.join, leaving it unsure whether the run thread ended); a flag the loop
    polls cannot.
    """
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def _status_display(status: Callable[[], Text]) -> Iterator[Callable[[], None]]:
    """A live status line on a terminal; nothing otherwise (step lines are printed anyway)."""
    if not err_console.is_terminal:
        yield lambda: None
        return
    with RichLive(status(), console=err_console, refresh_per_second=4,
                  transient=True) as view:
        yield lambda: view.update(status())


def _status_line(live: session.Live, tally: StepTally) -> Text:
    if live.phase != "playing":
        return Text(f"{live.phase} ...")
    now = tally.current
    so_far = (f"  step {now.step + 1}/{live.steps} so far: requests {now.requests}, new "
              f"{now.links_up}, refused {now.refused}, down {now.links_down}"
              if now is not None else "")
    return Text(f"t={live.scenario_time:6.1f}/{live.duration:.0f} s  links up "
                f"{now.links_after if now else 0}{so_far}")


def _print_steps(done: list[StepFigures], live: session.Live) -> None:
    for fig in done:
        err_console.print(
            f"t={fig.scenario_time:6.1f} s  step {fig.step + 1}/{live.steps}  requests "
            f"{fig.requests}, new {fig.links_up}, refused {fig.refused}, down "
            f"{fig.links_down}; links up {fig.links_after}", soft_wrap=True, highlight=False)


def _print_summary(summary: session.RunSummary, plot_dir: Path | None, as_json: bool) -> None:
    if as_json:
        print_json({**dataclasses.asdict(summary),
                    "plots": str(plot_dir) if plot_dir else None})
        return
    state = "interrupted" if summary.interrupted else "finished"
    out_console.print(
        f"run {state}: lab {summary.lab}, {summary.steps_played} steps, scenario time "
        f"{summary.scenario_time:.1f} s; links made {summary.links_up}, refused "
        f"{summary.links_failed}, taken down {summary.links_down}, requests "
        f"{summary.requests}", highlight=False, soft_wrap=True)
    out_console.print(describe_negotiation(summary.negotiation), highlight=False,
                      soft_wrap=True)
    if summary.shaping:
        left_out = summary.shaping["dropped"]
        out_console.print(f"shaping: {summary.shaping['mode']}"
                          + (f" (left out: {', '.join(left_out)})" if left_out else ""),
                          highlight=False)
        for line in describe_link_steps(summary.link_properties):
            out_console.print(line, highlight=False, soft_wrap=True)
    if (hosts_line := describe_host_flows(summary.host_flows)) is not None:
        out_console.print(hosts_line, highlight=False, soft_wrap=True)
    out_console.print(describe_routes(summary.routing, summary.routes),
                      highlight=False, soft_wrap=True)
    if summary.fidelity:
        out_console.print(describe_fidelity(summary.fidelity), highlight=False,
                          soft_wrap=True)
    for host, lost in sorted(summary.lost_hosts.items()):
        out_console.print(f"host {host} lost mid-run: nodes {', '.join(lost['nodes'])} dead, "
                          f"{lost['links_down']} of their links taken down; the run went on "
                          "on the other hosts", highlight=False, soft_wrap=True)
    if summary.oom:
        out_console.print("out of memory (killed by the kernel at the component's limit; "
                          "links unchanged): " + ", ".join(
                              f"{where} {kills} kill{'s' if kills != 1 else ''}"
                              for where, kills in sorted(summary.oom.items())),
                          highlight=False, soft_wrap=True)
    if summary.actions:
        out_console.print(describe_actions(summary.actions), highlight=False,
                          soft_wrap=True)
    if summary.path_delay:
        out_console.print(describe_path_delay(summary.path_delay), highlight=False,
                          soft_wrap=True)
    if summary.removed_lab:
        out_console.print(f"lab {summary.lab} deleted (--rm); its results are kept")
    elif summary.created_lab:
        out_console.print(f"lab {summary.lab} kept: `nestednet delete --lab {summary.lab}`")
    pictures = f"; pictures in {plot_dir}" if plot_dir else ""
    out_console.print(f"events in {summary.events}{pictures}", highlight=False, soft_wrap=True)
    # Last, and alone on its line, so `nestednet report "$(... | tail -n 1)"` works.
    if summary.run_dir:
        out_console.print(summary.run_dir, highlight=False, soft_wrap=True)
