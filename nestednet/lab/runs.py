"""Where a run's results live, and what a run on an existing lab takes from it.

Results (events, pictures) go to /var/lib/nestednet/runs/<lab>-<timestamp>/ by
default, outside the lab's own directory, so `run --rm` (which deletes the lab and
its directory) leaves them in place. A NestedNet-format scenario carries no iPHY
count; on an existing lab the count is the lab's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nestednet.adapters import files
from nestednet.errors import UsageError
from nestednet.lab.record import LABS_DIR, LabRecord
from nestednet.model.events import Event, parse_event

RUNS_DIR = Path(os.environ.get("NESTEDNET_RUNS_DIR", "/var/lib/nestednet/runs"))


def results_dir(lab: str, root: Path = RUNS_DIR, now: float | None = None) -> Path:
    """A new directory for one run's results: <root>/<lab>-<YYYYmmdd-HHMMSS>[-k]."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    files.private_dir(root)
    for k in range(1, 1000):
        path = root / (f"{lab}-{stamp}" if k == 1 else f"{lab}-{stamp}-{k}")
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free results directory for {lab} at {stamp} in {root}")


def check_writable(path: Path, what: str) -> None:
    """UsageError unless ``path`` can be appended to (its directory is made if missing),
    so that a run does not create a lab to find out it cannot log."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with files.open_private(path, append=True):
            pass
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot write there: {exc.strerror}") from None


def lab_iphys(lab: str, root: Path = LABS_DIR) -> int | None:
    """iPHYs per node of an existing lab, or None when there is no such lab (yet)."""
    record = LabRecord(lab, root)
    if not record.exists():
        return None
    iphys = record.meta().get("iphys")
    return iphys if isinstance(iphys, int) and not isinstance(iphys, bool) else None


class EventTail:
    """Follows an events file as the CA appends to it, from a starting offset.

    Only whole lines are read; a line still being written is picked up next time.
    ``from_start``: read what is there already too (a viewer of a finished run);
    ``skip_bad``: leave out a line that is not an event instead of raising.
    """

    def __init__(self, path: Path, *, from_start: bool = False, skip_bad: bool = False) -> None:
        self.path = path
        self.offset = 0 if from_start or not path.exists() else path.stat().st_size
        """Earlier runs' events (an --events file that exists) are skipped."""
        self._line = 0
        self._skip_bad = skip_bad

    def read(self) -> list[Event]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        events = []
        for line in data[:end].decode("utf-8", errors="replace").splitlines():
            self._line += 1
            if not line.strip():
                continue
            try:
                events.append(parse_event(json.loads(line), f"{self.path} line {self._line}"))
            except (ValueError, UsageError):
                if not self._skip_bad:
                    raise
        return events


@dataclass(frozen=True)
class RunMarker:
    """`<labs>/<lab>.run`: a run is (or was, if its pid is dead) playing on the lab.

    Written before the run creates its lab or installs a link and removed when it ends,
    so `cleanup` can undo a run killed at any instant: its links (every link flow: a
    run refuses to start beside manual links and holds the lab's lock throughout) and,
    for `run --rm` on a lab it created, the lab.
    """

    lab: str
    root: Path = LABS_DIR

    @property
    def path(self) -> Path:
        return self.root / f"{self.lab}.run"

    @contextlib.contextmanager
    def held(self, remove_lab: bool, creates: bool | None = None) -> Iterator[None]:
        """``creates``: whether the run made the lab (a resumed run says what the run it
        takes over found); default: whether the lab does not exist yet."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = {"pid": os.getpid(), "start": process_start(os.getpid()),
                "creates": not LabRecord(self.lab, self.root).exists()
                if creates is None else creates,
                "remove_lab": remove_lab}
        tmp = self.path.with_suffix(".run-tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)
        try:
            yield
        finally:
            self.path.unlink(missing_ok=True)

    def read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}


RUN_RECORD = "run.json"
"""In a run's directory: what the run was asked for, written before its first step, so
`nestednet run --resume DIR` can take over a run whose process died."""


def write_run_record(run_dir: Path, record: dict) -> Path:
    """The run's record, written whole or not at all (0600)."""
    path = run_dir / RUN_RECORD
    tmp = run_dir / f".{RUN_RECORD}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=1)
    tmp.replace(path)
    return path


def read_run_record(run_dir: Path) -> dict:
    """A run directory's record; UsageError naming the file when it is missing or bad."""
    path = Path(run_dir) / RUN_RECORD
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{run_dir}: no {RUN_RECORD} here: not a run's directory",
                         hint=f"runs keep their directories under {RUNS_DIR}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: cannot be read: {exc}") from None
    if not isinstance(record, dict) or record.get("version") != 1:
        raise UsageError(f"{path}: not a run record this NestedNet writes (version 1)")
    return record


def clock_origin(events: Path, offset: int, speed: float) -> float | None:
    """The wall-clock time (Unix s) at which a run's scenario time was 0, from the first
    step it wrote at or after byte ``offset`` of its events file; None before any step."""
    try:
        with events.open("rb") as f:
            f.seek(offset)
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    event = parse_event(json.loads(line), f"{events} line {number}")
                except (ValueError, UsageError):
                    return None  # a cut last line: the run died while writing it
                if event.event == "step" and event.wall_time is not None:
                    return event.wall_time - event.scenario_time / speed
    except FileNotFoundError:
        return None
    return None


def markers(root: Path = LABS_DIR) -> list[RunMarker]:
    if not root.is_dir():
        return []
    return [RunMarker(p.stem, root) for p in sorted(root.glob("*.run"))]


def process_start(pid: int) -> str:
    """The process's start time in clock ticks (tells a pid from a later reuse), or ""."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def alive(pid: int, start: str) -> bool:
    """True when ``pid`` runs and (if ``start`` is given) is the same process."""
    now = process_start(pid)
    return bool(now) and (not start or now == start)


@dataclass(frozen=True)
class ScenarioClock:
    """`<labs>/<lab>.clock`: while a run plays, when its scenario time 0 was (Unix
    seconds) and its speed, so a capture beside it can stamp packets with scenario time."""

    lab: str
    root: Path = LABS_DIR

    @property
    def path(self) -> Path:
        return self.root / f"{self.lab}.clock"

    def start(self, t0_wall: float, speed: float, events: Path | None) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".clock-tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "start": process_start(os.getpid()),
                                   "t0_wall": t0_wall, "speed": speed,
                                   "events": str(events) if events else None}))
        tmp.replace(self.path)

    def stop(self) -> None:
        self.path.unlink(missing_ok=True)

    def read(self) -> dict | None:
        """The clock of a run playing now, or None (none, or its process is gone)."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        pid = data.get("pid")
        if not isinstance(pid, int) or process_start(pid) != data.get("start"):
            return None
        return data
