"""Errors that the command-line layer turns into a message and an exit code.

Two kinds matter to a user: what they typed or gave us is wrong (exit 2, nothing
was changed), and the machine is not in a state we can work with (exit 1).
"""


class NestedNetError(Exception):
    """A failure with a message written for the user."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UsageError(NestedNetError):
    """Bad input: a file, a name or an option that cannot be used as given."""

    exit_code = 2


class EnvironmentProblem(NestedNetError):
    """The machine lacks something (engine down, not root, image missing)."""

    exit_code = 1
