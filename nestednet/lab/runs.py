"""Where a run's results live, and what a run on an existing lab takes from it.

Results (events, pictures) go to /var/lib/nestednet/runs/<lab>-<timestamp>/ by
default, outside the lab's own directory, so `run --rm` (which deletes the lab and
its directory) leaves them in place. A NestedNet-format scenario carries no iPHY
count; on an existing lab the count is the lab's own.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from nestednet.lab.record import LABS_DIR, LabRecord
from nestednet.model.events import Event, parse_event

RUNS_DIR = Path(os.environ.get("NESTEDNET_RUNS_DIR", "/var/lib/nestednet/runs"))


def results_dir(lab: str, root: Path = RUNS_DIR, now: float | None = None) -> Path:
    """A new directory for one run's results: <root>/<lab>-<YYYYmmdd-HHMMSS>[-k]."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    root.mkdir(parents=True, exist_ok=True)
    for k in range(1, 1000):
        path = root / (f"{lab}-{stamp}" if k == 1 else f"{lab}-{stamp}-{k}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free results directory for {lab} at {stamp} in {root}")


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
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        """Earlier runs' events (an --events file that exists) are skipped."""
        self._line = 0

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
            if line.strip():
                events.append(parse_event(json.loads(line), f"{self.path} line {self._line}"))
        return events
