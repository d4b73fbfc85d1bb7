"""Removing labs: `delete` (one lab, from its record) and `cleanup` (crash leftovers).

Both only ever remove what carries our marks: containers and OVS bridges are
removed only when labelled with the lab, namespaces and veths only under the lab's
own names from its record. Everything is idempotent.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

import docker
import docker.errors

from nestednet.adapters import docker_engine, netlink, tc
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.nodes import PROBE_LABEL, PROBE_PREFIX
from nestednet.errors import UsageError
from nestednet.lab import designs, lock, node_image, runs
from nestednet.lab.record import (
    CONTAINER,
    LABS_DIR,
    NETNS,
    OVS_BRIDGE,
    TC_ROOT,
    VETH,
    LabRecord,
    existing_labs,
)
from nestednet.lab.runs import alive as _alive
from nestednet.lab.wiring import LAB_ID
from nestednet.signals import deferred_sigint

Report = Callable[[str], None]


@dataclass
class Removed:
    """What a delete or cleanup removed (or would remove, on a dry run)."""

    items: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.items.append(text)


def delete_lab(record: LabRecord, *, client: docker.DockerClient | None = None,
               ovs: Ovsdb | None = None, dry_run: bool = False) -> Removed:
    """Remove every resource in the lab's record, then the record itself (holding the
    lab's lock; its lock file goes last)."""
    with deferred_sigint(), lock.hold(record.lab, "delete", root=record.path.parent):
        removed = _delete_locked(record, client, ovs, dry_run)
        if not dry_run:
            lock.forget(record.lab, record.path.parent)
    return removed


def _delete_locked(record: LabRecord, client: docker.DockerClient | None, ovs: Ovsdb | None,
                   dry_run: bool) -> Removed:
    removed = Removed()
    removed.items.extend(designs.of(record.meta()).remove_elsewhere(record, dry_run))
    resources = [r for r in record.resources() if r.where == "host"]
    client = client or docker_engine.connect()
    own_ovs = ovs is None
    ovs = ovs or Ovsdb()
    try:
        for res in (r for r in resources if r.kind == CONTAINER):
            if _remove_container(client, res.name, record.lab, dry_run):
                removed.add(f"container {res.name}")
        trees = sorted({r.name for r in resources if r.kind == TC_ROOT})
        if trees:
            shaped = [p for p, root in tc.snapshot(None, trees).items()
                      if root is not None and root[1] == tc.OUR_ROOT]
            if not dry_run:
                tc.remove(None, shaped)
            removed.items.extend(f"tc tree on {port}" for port in shaped)
        with netlink.route() as host:
            for res in (r for r in resources if r.kind == VETH):
                if dry_run:
                    if netlink.exists(host, res.name):
                        removed.add(f"veth {res.name}")
                elif netlink.delete(host, res.name):
                    removed.add(f"veth {res.name}")
        bridges = ovs.bridges()
        for res in (r for r in resources if r.kind == OVS_BRIDGE):
            if bridges.get(res.name, {}).get(LAB_ID) == record.lab:
                if not dry_run:
                    ovs.del_bridge(res.name)
                removed.add(f"OVS bridge {res.name}")
        for res in (r for r in resources if r.kind == NETNS):
            if res.name in netlink.list_netns():
                if not dry_run:
                    netlink.remove_netns(res.name)
                removed.add(f"netns {res.name}")
    finally:
        if own_ovs:
            ovs.close()
    if record.exists():
        if not dry_run:
            record.remove_files()
        removed.add(f"directory {record.path}")
    # A run holds the lab's lock while it plays, so a marker or clock found under it is
    # a killed run's (SIGKILL): the lab goes, and so do they.
    marker = runs.RunMarker(record.lab, record.path.parent)
    clock = runs.ScenarioClock(record.lab, record.path.parent).path
    for left in (marker.path, clock, clock.with_suffix(".clock-tmp")):
        if left.exists():
            if not dry_run:
                left.unlink(missing_ok=True)
            removed.add(f"file {left} (of a killed run)")
    return removed


def _remove_container(client: docker.DockerClient, name: str, lab: str, dry_run: bool) -> bool:
    try:
        container = client.containers.get(name)
    except docker.errors.NotFound:
        return False
    if container.labels.get(LAB_ID) != lab:
        return False  # same name, not ours: never touch it
    if not dry_run:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(v=True, force=True)
    return True


def _stale_locks(known: set[str], dry_run: bool, result: Removed) -> None:
    """Lock files of labs without a record (a create killed before it made the record);
    one someone holds is left alone."""
    for path in sorted(LABS_DIR.glob("*.lock")) if LABS_DIR.is_dir() else []:
        if path.stem in known:
            continue
        try:
            with lock.hold(path.stem, "cleanup", root=LABS_DIR, wait=0):
                if not dry_run:
                    lock.forget(path.stem, LABS_DIR)
            result.add(f"file {path} (lock of a lab without a record)")
        except UsageError:
            continue


def _crashed_runs(client: docker.DockerClient, ovs: Ovsdb, dry_run: bool,
                  result: Removed) -> None:
    """Undo runs killed mid-way (their marker outlived them): links, and the lab of
    a `run --rm` that created it."""
    for marker in runs.markers():
        data = marker.read()
        if _alive(int(data.get("pid", 0)), data.get("start", "")):
            result.kept.append(f"run on lab {marker.lab} (pid {data['pid']} still playing)")
            continue
        record = LabRecord(marker.lab)
        try:
            with lock.hold(marker.lab, "cleanup", root=record.path.parent, wait=0):
                if data.get("creates") and data.get("remove_lab") and record.exists():
                    sub = delete_lab(record, client=client, ovs=ovs, dry_run=dry_run)
                    result.items.extend(f"{item} (lab {marker.lab}, run --rm killed)"
                                        for item in sub.items)
                elif (meta := record.meta()).get("status") == "complete":
                    links = designs.of(meta).links(record, meta)
                    found = links.links()
                    if found and not dry_run:
                        links.clear()
                    result.items.extend(f"link {a} <-> {b} (lab {marker.lab}, run killed)"
                                        for a, b in found)
                clock = runs.ScenarioClock(marker.lab, marker.root).path
                for left in (clock, clock.with_suffix(".clock-tmp")):
                    if left.exists():
                        result.add(f"file {left} (clock of a killed run)")
                        if not dry_run:
                            left.unlink(missing_ok=True)
                if not dry_run:
                    marker.path.unlink(missing_ok=True)
        except UsageError as busy:
            result.kept.append(f"run marker of lab {marker.lab} ({busy})")


def cleanup(*, dry_run: bool = False) -> Removed:
    """Remove leftovers of crashed runs; keep complete labs and creates still running.

    A lab is a leftover when its create never finished and the process that ran it
    is gone. Anything carrying our labels or names whose lab has no record at all is
    a leftover too.
    """
    result = Removed()
    client = docker_engine.connect()
    with Ovsdb() as ovs:
        _crashed_runs(client, ovs, dry_run, result)
        labs = existing_labs()
        for lab in labs:
            record = LabRecord(lab)
            meta = record.meta()
            if meta.get("status") == "complete":
                result.kept.append(f"lab {lab} (complete; `nestednet delete --lab {lab}`)")
                continue
            if meta and _alive(int(meta.get("creator_pid", 0)), meta.get("creator_start", "")):
                result.kept.append(f"lab {lab} (being created by pid {meta['creator_pid']})")
                continue
            try:
                with lock.hold(lab, "cleanup", root=record.path.parent, wait=0):
                    sub = delete_lab(record, client=client, ovs=ovs, dry_run=dry_run)
            except UsageError as busy:
                result.kept.append(f"lab {lab} ({busy})")
                continue
            result.items.extend(f"{item} (lab {lab}, unfinished)" for item in sub.items)
        known = set(labs)
        _stale_locks(known, dry_run, result)
        for container in client.containers.list(all=True, filters={"label": LAB_ID}):
            if container.labels.get(LAB_ID) not in known:
                if not dry_run:
                    with contextlib.suppress(docker.errors.NotFound):
                        container.remove(v=True, force=True)
                result.add(f"container {container.name} (no lab record)")
        for label, pattern, what in (
                (node_image.TEMPLATE_LABEL, r"nestednet-template-(\d+)-\w+",
                 "unfinished image template"),
                (PROBE_LABEL, re.escape(PROBE_PREFIX) + r"(\d+)-\w+", "privilege probe")):
            for container in client.containers.list(all=True, filters={"label": label}):
                match = re.fullmatch(pattern, container.name)
                if match and not _alive(int(match.group(1)), ""):
                    if not dry_run:
                        with contextlib.suppress(docker.errors.NotFound):
                            container.remove(v=True, force=True)
                    result.add(f"container {container.name} ({what})")
        for bridge, ids in ovs.bridges().items():
            lab = ids.get(LAB_ID)
            if lab and lab not in known:
                if not dry_run:
                    ovs.del_bridge(bridge)
                result.add(f"OVS bridge {bridge} (no lab record)")
    for name in netlink.list_netns():
        match = re.fullmatch(r"nestednet-([a-z][a-z0-9]{0,7})-ctl", name)
        if match and match.group(1) not in known:
            if not dry_run:
                netlink.remove_netns(name)
            result.add(f"netns {name} (no lab record)")
    if node_image.TEMPLATES_DIR.is_dir():
        for work in node_image.TEMPLATES_DIR.glob(".build-*"):
            match = re.fullmatch(r"\.build-(\d+)-\w+", work.name)
            if match and not _alive(int(match.group(1)), ""):
                if not dry_run:
                    shutil.rmtree(work, ignore_errors=True)
                result.add(f"directory {work} (unfinished image template)")
    return result
