"""Two-line element sets: read (2 or 3 lines per object) and write.

Column layout and numeric fields are checked by the ``sgp4`` library's own TLE
reader (``sgp4.io.twoline2rv``, which names the official layout when a line does
not match it), checksums with ``sgp4.io.compute_checksum``; the element set used
for propagation is the C++ ``Satrec`` built from the same two lines. Every problem
names the file, the line number and the object, so a user can fix a catalogue of
thousands of objects.

Node names come from the name line, sanitised to the node-name rule (runs of other
characters become ``-``; a CelesTrak ``0 `` prefix is dropped); objects without a
name line, or whose name keeps nothing usable, are ``s<catalogue number>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sgp4 import io as sgp4_io
from sgp4.api import WGS72, Satrec
from sgp4.earth_gravity import wgs72
from sgp4.exporter import export_tle

from nestednet.errors import UsageError
from nestednet.model.scenario import NODE_NAME_PATTERN

TLE_LINE_LENGTH = 69
MAX_TLE_BYTES = 8 * 1024 * 1024
"""About 50,000 objects: ten times CelesTrak's whole active catalogue."""
_NAME_RE = re.compile(NODE_NAME_PATTERN)
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Tle:
    """One object: its node name, its two lines, where it came from."""

    name: str
    line1: str
    line2: str
    source: str = ""
    line_number: int = 0
    """Line number (1-based) of the object's first line (its name line if it has one)."""

    @property
    def catalog_number(self) -> int:
        return self.satrec().satnum

    def satrec(self) -> Satrec:
        return Satrec.twoline2rv(self.line1, self.line2, WGS72)


def node_name(raw: str, catalog_number: int) -> str:
    """A TLE name line as a node name; ``s<catalog number>`` when nothing usable is left."""
    text = raw.strip()
    if text.startswith("0 "):
        text = text[2:]
    text = _BAD_CHARS.sub("-", text.strip()).strip("-")
    if text and not text[0].isalpha():
        text = f"s{text}"
    text = text[:32].rstrip("-")
    return text if _NAME_RE.match(text) else f"s{catalog_number}"


def read_tle_file(path: str | Path) -> list[Tle]:
    """Every object of a TLE file; UsageError for an unreadable file or a bad object."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_TLE_BYTES:
            raise UsageError(f"{path}: {size} bytes, more than the limit of {MAX_TLE_BYTES} "
                             "for a TLE file")
        text = Path(path).read_text("ascii")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not an ASCII TLE file (byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_tle_text(text, str(path))


def parse_tle_text(text: str, source: str) -> list[Tle]:
    """Objects of a TLE text (2 or 3 lines each, blank lines ignored)."""
    lines = [(n, line.rstrip()) for n, line in enumerate(text.splitlines(), start=1)
             if line.strip()]
    objects: list[Tle] = []
    seen: dict[str, int] = {}
    i = 0
    while i < len(lines):
        number, first = lines[i]
        name_line = None
        if not first.startswith("1 "):
            name_line, i = first, i + 1
            if i >= len(lines):
                raise UsageError(f"{source}:{number}: object {first.strip()!r}: name line "
                                 "without its two element lines")
        tle = _parse_object(lines, i, name_line, number, source)
        i += 2
        if tle.name in seen:
            raise UsageError(f"{source}:{tle.line_number}: object {tle.name!r}: name given "
                             f"twice (also line {seen[tle.name]}); node names must be unique",
                             hint="rename one of them in the name line")
        seen[tle.name] = tle.line_number
        objects.append(tle)
    if not objects:
        raise UsageError(f"{source}: no TLE objects in the file")
    return objects


def _parse_object(lines: list[tuple[int, str]], i: int, name_line: str | None,
                  start: int, source: str) -> Tle:
    label = repr(name_line.strip()) if name_line is not None else None
    if i + 1 >= len(lines):
        number = lines[i][0]
        label = label or repr(f"catalogue {lines[i][1][2:7].strip()}")
        raise UsageError(f"{source}:{number}: object {label}: line 2 is missing after "
                         "line 1")
    (n1, l1), (n2, l2) = lines[i], lines[i + 1]
    label = label or repr(f"catalogue {l1[2:7].strip()}")
    for number, line, kind in ((n1, l1, "1"), (n2, l2, "2")):
        where = f"{source}:{number}: object {label}"
        if not line.startswith(f"{kind} "):
            raise UsageError(f"{where}: expected TLE line {kind} (starting '{kind} '), got "
                             f"{line[:20]!r}")
        if len(line) != TLE_LINE_LENGTH:
            raise UsageError(f"{where}: TLE line {kind} has {len(line)} columns, not "
                             f"{TLE_LINE_LENGTH}")
        if not line[68].isdigit():
            raise UsageError(f"{where}: column 69 of line {kind} must be the checksum digit, "
                             f"got {line[68]!r}")
        computed = sgp4_io.compute_checksum(line)
        if int(line[68]) != computed:
            raise UsageError(f"{where}: checksum of line {kind} is {line[68]} but the line "
                             f"adds up to {computed}")
    try:
        sgp4_io.twoline2rv(l1, l2, wgs72)
    except (ValueError, IndexError) as exc:
        lines_text = str(exc).strip().splitlines()
        which = n2 if "line 2" in str(exc) or "do not match" in str(exc) else n1
        detail = lines_text[0] if len(lines_text) == 1 else (
            f"{lines_text[0]}: columns do not match the official layout\n  "
            + "\n  ".join(lines_text[-2:]))
        raise UsageError(f"{source}:{which}: object {label}: {detail}") from None
    satrec = Satrec.twoline2rv(l1, l2, WGS72)
    name = node_name(name_line, satrec.satnum) if name_line is not None else f"s{satrec.satnum}"
    return Tle(name=name, line1=l1, line2=l2, source=source, line_number=start)


def format_tle(name: str, satrec: Satrec) -> tuple[str, str, str]:
    """Name line and the two element lines (with their checksums) of an element set."""
    line1, line2 = export_tle(satrec)
    return name, line1, line2


def write_tle_file(objects: Iterable[tuple[str, Satrec]], path: str | Path) -> int:
    """Write 3-line TLEs; returns the object count."""
    out = []
    for name, satrec in objects:
        out.extend(format_tle(name, satrec))
    Path(path).write_text("\n".join(out) + "\n", "ascii")
    return len(out) // 3
