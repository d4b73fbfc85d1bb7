"""Errors that the command-line layer turns into a message and an exit code, and the
exit codes themselves.

Two kinds of error matter to a user: what they typed or gave us is wrong (exit 2,
nothing was changed), and the machine is not in a state we can work with (exit 1).
"""

from enum import IntEnum


class ExitStatus(IntEnum):
    """Every exit code a NestedNet or linkemu command chooses (`exec` passes through the
    component's own)."""

    OK = 0
    FAILURE = 1
    """The machine is not in a state we can work with, or a check or experiment failed."""
    USAGE = 2
    """Bad input; nothing was changed."""
    INTERRUPTED = 130
    """Ctrl-C (128 + SIGINT), after cleaning up."""


class NestedNetError(Exception):
    """A failure with a message written for the user."""

    exit_code = ExitStatus.FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class InputError(NestedNetError):
    """Bad input: a file, a name or an option that cannot be used as given.

    Its message says where the problem sits (``scenario.json: steps[3].visible[2]:
    unknown node 'n13'``); nothing was started or changed. The command line exits 2.
    """

    exit_code = ExitStatus.USAGE


UsageError = InputError
"""The name the code base raises it under (the command line's "usage error")."""


class Interrupted(NestedNetError):
    """Ctrl-C, after what was under way was undone or finished; the message says which."""

    exit_code = ExitStatus.INTERRUPTED


class EnvironmentProblem(NestedNetError):
    """The machine lacks something (engine down, not root, image missing)."""

    exit_code = ExitStatus.FAILURE
