"""What a deleted lab left on hosts that could not be reached (issue #32, item 3).

`delete` removes a multi-host lab everywhere it can; a host that does not answer (lost
mid-run, powered off, cut off) keeps its part. So that nothing is forgotten, `delete`
writes `<labs>/<lab>.remains.json` (0600): the lab, its hosts file as the record had
it, and per unreachable host why and which recorded resources are there. `nestednet
cleanup --hosts FILE` reads these files, removes each lab's part from the hosts of
FILE that answer again, and forgets what it removed; the file goes with the last host.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from nestednet.adapters.files import private_dir, write_private
from nestednet.lab.record import LABS_DIR, Resource

SUFFIX = ".remains.json"


def path_of(lab: str, root: Path = LABS_DIR) -> Path:
    return root / f"{lab}{SUFFIX}"


def record(lab: str, hosts_doc: dict, resources: list[Resource], unreachable: dict[str, str],
           root: Path = LABS_DIR) -> Path:
    """Add what ``lab`` keeps on the ``unreachable`` hosts to its remains file."""
    path = path_of(lab, root)
    data = read(path) or {"lab": lab, "hosts": hosts_doc, "left": {}}
    for host, why in unreachable.items():
        entry = data["left"].setdefault(host, {"resources": []})
        entry["why"] = why
        entry["since"] = entry.get("since", round(time.time(), 3))
        known = {(r["kind"], r["name"]) for r in entry["resources"]}
        entry["resources"] += [{"kind": r.kind, "name": r.name} for r in resources
                               if r.where == host and (r.kind, r.name) not in known]
    private_dir(root)
    write_private(path, json.dumps(data, indent=2))
    return path


def read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def all_remains(root: Path = LABS_DIR) -> list[tuple[Path, dict]]:
    """Every remains file there is, with its data, by lab name."""
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.glob(f"*{SUFFIX}")):
        data = read(path)
        if data is not None and data.get("left"):
            found.append((path, data))
    return found


def settle(path: Path, data: dict, cleared: list[str]) -> bool:
    """Forget the ``cleared`` hosts; the file goes when none is left. True when gone."""
    for host in cleared:
        data["left"].pop(host, None)
    if not data["left"]:
        path.unlink(missing_ok=True)
        return True
    write_private(path, json.dumps(data, indent=2))
    return False
