"""One line of the capability report."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Check:
    """One line of the capability report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    needed_for_create: bool = False

    def as_dict(self) -> dict:
        return asdict(self)
