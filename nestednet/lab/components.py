"""Working with one component of a running lab: exec, swap in code, restart."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path

from nestednet.adapters import netlink
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.errors import UsageError
from nestednet.lab import flat, wiring
from nestednet.lab.nodes import Lab
from nestednet.model.addressing import plan_from_dict

USER_CODE_DIR = "/opt/nestednet/user"
"""Where swapped-in code lands; the component entrypoint runs `run` or `main.py` from it,
and it comes first on PYTHONPATH (so a `nestednet/agent` package there replaces the agent)."""

Write = Callable[[bytes], None]


def exec_in(lab: Lab, node: str, component: str, command: list[str],
            out: Write, err: Write) -> int:
    """Run ``command`` in the component, streaming its output; returns its exit code."""
    if flat.is_flat(lab.meta):
        return flat.exec_in(lab, node, component, command, out, err)
    number = lab.shape.check_node(node)
    lab.shape.check_component(component)
    if not command:
        raise UsageError("no command given: nestednet exec NODE COMPONENT -- CMD...")
    with lab.inner(number) as inner:
        child = lab.child(inner, component)
        if child.status != "running":
            raise UsageError(f"{node} {component} is not running (it is {child.status})",
                             hint=f"`nestednet swap {node} {component} PATH --restart` "
                                  "starts it again")
        exec_id = inner.api.exec_create(child.id, command, stdout=True, stderr=True)["Id"]
        for stdout, stderr in inner.api.exec_start(exec_id, stream=True, demux=True):
            if stdout:
                out(stdout)
            if stderr:
                err(stderr)
        code = inner.api.exec_inspect(exec_id).get("ExitCode")
    return 127 if code is None else int(code)


def _archive(path: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        if path.is_dir():
            for entry in sorted(path.iterdir()):
                tar.add(entry, arcname=f"user/{entry.name}")
        else:
            tar.add(path, arcname=f"user/{path.name}")
    return buffer.getvalue()


def swap(lab: Lab, node: str, component: str, path: Path, *, restart: bool) -> dict:
    """Copy ``path`` into the component's USER_CODE_DIR; with ``restart``, restart it alone.

    A restarted container gets a fresh network namespace, so the component is wired
    again (same names, addresses and main-bridge port numbers, so links survive).
    """
    number = lab.shape.check_node(node)
    index = lab.shape.check_component(component)
    if flat.is_flat(lab.meta):
        raise UsageError(f"lab {lab.record.lab} is flat: its components are processes in one "
                         "container, not containers that can be swapped and restarted",
                         hint="use a nested lab (create without --flat) for swap")
    if not path.exists():
        raise UsageError(f"{path} does not exist")
    data = _archive(path)
    with lab.inner(number) as inner:
        child = lab.child(inner, component)
        if child.status == "running":
            child.exec_run(["rm", "-rf", USER_CODE_DIR])
        if not child.put_archive(USER_CODE_DIR.rsplit("/", 1)[0], data):
            raise UsageError(f"copying {path} into {node} {component} failed")
        result = {"node": node, "component": component, "copied": str(path),
                  "to": USER_CODE_DIR, "restarted": False}
        if not restart:
            return result
        child.restart(timeout=5)
        child.reload()
        inner_pid = int(child.attrs["State"]["Pid"])
    parent = lab.parent(number)
    parent_pid = int(parent.attrs["State"]["Pid"])
    plan = plan_from_dict(lab.shape, lab.meta["plan"])
    with Ovsdb(f"unix:{lab.state_dir(number)}/ovs/db.sock") as node_ovs, Ovsdb() as host_ovs:
        handles = wiring.NodeHandles(lab.record.lab, number, parent_pid, node_ovs, host_ovs,
                                     plan, lab.record)
        wiring.unwire_component(handles, index)
        pid = netlink.host_pids(parent_pid, [inner_pid])[inner_pid]
        wiring.wire_component(handles, index, pid)
    result["restarted"] = True
    return result
