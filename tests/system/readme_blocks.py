"""The ```sh blocks of the README and of the documentation pages it leads to (docs/*.md:
the command reference and the multi-host walk-through live there), and the readme-test
marker before each (see test_readme.py): read by the host suite
(tests/system/test_readme.py) and the multihost suite."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCUMENTS = (README, *sorted((ROOT / "docs").glob("*.md")))
"""Where the blocks are: the front door and the pages of the documentation."""
MARKER = re.compile(r"<!--\s*readme-test:\s*(.+?)\s*-->")


@dataclass(frozen=True)
class Command:
    line: int
    """1-based line of the README where the command starts."""
    text: str


@dataclass(frozen=True)
class Block:
    line: int
    mode: str
    commands: tuple[Command, ...]
    source: str = "README.md"
    """The file it is in, relative to the repository."""


def blocks(text: str, source: str = "README.md") -> list[Block]:
    """Every ```sh block with the marker before it (mode "" when there is none)."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "```sh":
            i += 1
            continue
        above = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.fullmatch(above.strip())
        start, i = i, i + 1
        body: list[tuple[int, str]] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append((i + 1, lines[i]))
            i += 1
        found.append(Block(start + 1, marker.group(1) if marker else "", _commands(body),
                           source))
        i += 1
    return found


def _commands(body: list[tuple[int, str]]) -> tuple[Command, ...]:
    """Command lines without comments; an indented line continues the one before."""
    out: list[Command] = []
    for number, raw in body:
        text = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not text.strip():
            continue
        if raw[:1].isspace() and out:
            out[-1] = Command(out[-1].line, f"{out[-1].text} {text.strip()}")
        else:
            out.append(Command(number, text.strip()))
    return tuple(out)


def _readme_blocks() -> list[Block]:
    return blocks(README.read_text(encoding="utf-8"))


def readme_blocks() -> list[Block]:
    """Every block of the README and the documentation pages, in that order."""
    return [block for path in DOCUMENTS
            for block in blocks(path.read_text(encoding="utf-8"),
                                str(path.relative_to(ROOT)))]
