"""What both command lines (nestednet, linkemu) share: errors to stderr with their exit
codes, JSON for scripts, progress lines."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from nestednet.errors import ExitStatus, NestedNetError

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)


class ErrorHandlingGroup(click.Group):
    """Turns NestedNetError into `error: message` (+ hint) and its exit code, and a
    Ctrl-C that nothing else handled into exit 130 (click would say "Aborted!", exit 1)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            err_console.print("interrupted (Ctrl-C)", soft_wrap=True)
            sys.exit(ExitStatus.INTERRUPTED)
        except NestedNetError as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True,
                              soft_wrap=True)
            if exc.hint:
                err_console.print(f"  hint: {exc.hint}", markup=False, soft_wrap=True)
            sys.exit(exc.exit_code)


class FiniteFloat(click.FloatRange):
    """A float option that refuses nan and inf (FloatRange lets nan through: every
    comparison with it is false)."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number

    def _describe_range(self) -> str:
        # click describes a range with no bounds as "x<=None" in --help.
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def progress(message: str) -> None:
    err_console.print(f"[dim]·[/] {escape(message)}", soft_wrap=True)
