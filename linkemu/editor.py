"""`linkemu edit`: the interactive link editor (thesis Fig. 4.8).

Pick a router, a client and a direction, see the current values, type new ones
(Enter keeps a value); each answer is checked with the same parsers as the links
file and applied in place at once. On a terminal it uses prompt_toolkit (with
completion of names); from a pipe (scripts, tmux send-keys) it reads plain lines,
so the same dialogue can be driven by a program.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TextIO

from linkemu import shaping
from linkemu.model import EmulatedLinks
from nestednet.errors import NestedNetError
from nestednet.model import units

ApplyChange = Callable[[str, str, dict[str, Any]], list[shaping.Change]]

PROPERTIES = (
    ("rate", "rate_bps", units.parse_rate, units.format_rate, "e.g. 10Mbit, 500kbit"),
    ("delay", "delay_us", units.parse_time, units.format_time, "e.g. 20ms, 500us, 0"),
    ("jitter", "jitter_us", units.parse_time, units.format_time, "e.g. 2ms, 0"),
    ("loss", "loss_pct", units.parse_loss, units.format_loss, "percent, e.g. 1%"),
)


class Prompter:
    """Asks one question at a time; prompt_toolkit on a terminal, plain lines otherwise."""

    def __init__(self, *, session: Any = None, stdin: TextIO | None = None,
                 out: Callable[[str], None] = print) -> None:
        self.session = session
        self.stdin = stdin
        self.say = out

    def ask(self, message: str, choices: Sequence[str] = ()) -> str:
        """The answer, stripped; EOFError at end of input."""
        if self.session is not None:
            from prompt_toolkit.completion import WordCompleter

            completer = WordCompleter(list(choices)) if choices else None
            return self.session.prompt(message, completer=completer).strip()
        self.say(message)
        line = (self.stdin.readline() if self.stdin is not None else input())
        if line == "":
            raise EOFError
        return line.strip()


def _choose(prompter: Prompter, what: str, options: Sequence[str]) -> str:
    if len(options) == 1:
        prompter.say(f"{what}: {options[0]}")
        return options[0]
    listing = "  ".join(f"{i}) {name}" for i, name in enumerate(options, start=1))
    while True:
        answer = prompter.ask(f"{what} [{listing}]: ", options)
        if answer in options:
            return answer
        if answer.isdigit() and 1 <= int(answer) <= len(options):
            return options[int(answer) - 1]
        prompter.say(f"  not a {what}: {answer!r} (choose one of {', '.join(options)})")


def _ask_value(prompter: Prompter, name: str, current: str, parse: Callable[[str], Any],
               example: str) -> Any | None:
    """The parsed new value, or None to keep the current one."""
    while True:
        answer = prompter.ask(f"  {name} [{current}] ({example}; Enter keeps): ")
        if answer == "" or answer == current:
            return None
        try:
            return parse(answer)
        except ValueError as exc:
            prompter.say(f"  invalid {name}: {exc}")


def edit_once(table: EmulatedLinks, prompter: Prompter, apply_change: ApplyChange) -> EmulatedLinks:
    """One round: choose a link direction, ask for values, apply; returns the updated table."""
    router = _choose(prompter, "router", list(table.routers()))
    links = [link for link in table.links if link.router == router]
    client = _choose(prompter, "client", [f"{link.client} ({link.client_ip})" for link in links])
    link = links[[f"{x.client} ({x.client_ip})" for x in links].index(client)]
    direction = _choose(prompter, "direction", ["forward", "backward", "both"])
    shown = ("forward", "backward") if direction == "both" else (direction,)
    for d in shown:
        values = shaping.describe(link.shape(d))
        prompter.say(f"{link.name} {d} now: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    base = link.shape(shown[0])
    changes: dict[str, Any] = {}
    for name, fieldname, parse, fmt, example in PROPERTIES:
        value = _ask_value(prompter, name, fmt(getattr(base, fieldname)), parse, example)
        if value is not None:
            changes[fieldname] = value
    if not changes:
        prompter.say("no change")
        return table
    try:
        done = apply_change(link.name, direction, changes)
    except NestedNetError as exc:
        prompter.say(f"not applied: {exc}")
        return table
    for change in done:
        new = shaping.describe(change.new)
        prompter.say(f"applied {change.link} {change.direction}: "
                     + ", ".join(f"{k} {v}" for k, v in new.items()))
        index = table.links.index(link)
        link = replace(link, **{change.direction: change.new})
        table = replace(table, links=(*table.links[:index], link, *table.links[index + 1:]))
    return table


def run(table: EmulatedLinks, apply_change: ApplyChange, *, interactive: bool = True,
        prompter: Prompter | None = None) -> EmulatedLinks:
    """Edit until the user says no more (or input ends); returns the final table."""
    if prompter is None:
        if interactive:
            from prompt_toolkit import PromptSession

            prompter = Prompter(session=PromptSession())
        else:
            import sys

            prompter = Prompter(stdin=sys.stdin)
    try:
        while True:
            table = edit_once(table, prompter, apply_change)
            if prompter.ask("another change? [y/N]: ").lower() not in ("y", "yes"):
                break
    except (EOFError, KeyboardInterrupt):
        prompter.say("")
    return table
