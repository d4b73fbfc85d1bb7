"""A lab's on-disk record: what it is, and every resource it created, in order.

Every resource is appended *before* it is made (write-ahead), so a crash at any
instant leaves nothing `cleanup` cannot find. Nothing someone else owns is removed
for it: deleting a missing thing is a no-op, containers and bridges are removed only
when they carry this lab's label, and a veth is recorded only after its names were
checked free (nestednet.lab.wiring.add_veth). So `delete` and `cleanup` remove
exactly what the lab made, and running them twice is harmless. The directory and
its parent are root's alone (0700): node state below holds engine sockets.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from nestednet.errors import UsageError
from nestednet.model.topology import check_lab_name

LABS_DIR = Path(os.environ.get("NESTEDNET_LABS_DIR", "/var/lib/nestednet/labs"))

# Resource kinds, in the order delete removes them.
SERVICE = "service"
"""A Docker Swarm service (a node parent of a multi-host lab); ``where`` is its host."""
CONTAINER = "container"
OVS_BRIDGE = "ovs-bridge"
VETH = "veth"
TC_ROOT = "tc-root"
"""A shaping tree (root qdisc 1:) on a host-side port; its name is the port."""
NETNS = "netns"
DIRECTORY = "directory"
KINDS = (SERVICE, CONTAINER, TC_ROOT, VETH, OVS_BRIDGE, NETNS, DIRECTORY)


@dataclass(frozen=True)
class Resource:
    kind: str
    name: str
    where: str = "host"
    """"host": this machine; otherwise the name of the host in a multi-host lab."""


class LabRecord:
    """The directory /var/lib/nestednet/labs/<lab>/ and the files in it."""

    def __init__(self, lab: str, root: Path = LABS_DIR) -> None:
        self.lab = check_lab_name(lab)
        self.path = root / lab
        self._lock = threading.Lock()

    @property
    def meta_file(self) -> Path:
        return self.path / "lab.json"

    @property
    def resources_file(self) -> Path:
        return self.path / "resources.jsonl"

    def node_dir(self, node: int) -> Path:
        return self.path / f"n{node}"

    def exists(self) -> bool:
        return self.path.exists()

    def claim(self) -> None:
        """Make the lab directory; refuse when the lab exists (mkdir is atomic)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.path.parent, 0o700)  # node state below holds engine sockets
        try:
            self.path.mkdir(mode=0o700)
        except FileExistsError as exc:
            raise UsageError(f"lab {self.lab} exists already",
                             hint=f"`nestednet delete --lab {self.lab}` or pick another "
                                  "--lab name") from exc
        self.add(DIRECTORY, str(self.path))

    def add(self, kind: str, name: str, where: str = "host") -> None:
        line = json.dumps({"kind": kind, "name": name, "where": where})
        with self._lock, open(self.resources_file, "a") as out:
            out.write(line + "\n")

    def resources(self) -> list[Resource]:
        if not self.resources_file.exists():
            return []
        found = []
        for line in self.resources_file.read_text().splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a crash mid-write
            found.append(Resource(data["kind"], data["name"], data.get("where", "host")))
        return found

    def write_meta(self, meta: dict) -> None:
        tmp = self.meta_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=2))
        tmp.replace(self.meta_file)

    def meta(self) -> dict:
        try:
            return json.loads(self.meta_file.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def remove_files(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def existing_labs(root: Path = LABS_DIR) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def load(lab: str, root: Path = LABS_DIR) -> LabRecord:
    """The record of an existing lab, or UsageError naming the labs there are."""
    record = LabRecord(lab, root)
    if not record.exists():
        labs = existing_labs(root)
        raise UsageError(f"no lab {lab}" + (f" (labs: {', '.join(labs)})" if labs else
                                            " (there are no labs)"),
                         hint="create one with `nestednet create --nodes N --iphys M`")
    return record
