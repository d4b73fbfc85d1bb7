"""Where kernel tests put what they measured: one JSON line per result."""

from __future__ import annotations

import json
import os
from pathlib import Path


def record(test: str, **values: object) -> None:
    """Append what was measured to results/linkemu-kernel.jsonl ($LINKEMU_RESULTS)."""
    path = Path(os.environ.get("LINKEMU_RESULTS", "results/linkemu-kernel.jsonl"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps({"test": test, **values}) + "\n")
