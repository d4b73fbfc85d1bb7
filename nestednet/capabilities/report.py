"""Every capability check in order (`nestednet doctor`), and whether create can work."""

from __future__ import annotations

from nestednet.capabilities.check import Check
from nestednet.capabilities.nodes import (
    cgroup_check,
    datapath_check,
    docker_check,
    is_root,
    memory_check,
    ovs_check,
    ovs_json_check,
    privilege_check,
    switch_cpu_check,
)
from nestednet.capabilities.shaping import emulation_check, qdisc_checks, router_check
from nestednet.capabilities.vm import vm_check


def report(image: str | None) -> list[Check]:
    checks = [Check("root", is_root(), "running as root" if is_root() else "not root",
                    "" if is_root() else "run as root", True)]
    checks.append(docker_check())
    if checks[-1].ok:
        checks.append(privilege_check(image))
    else:
        checks.append(Check("privileged", False, "not probed: engine down", "", True))
    checks.append(cgroup_check())
    checks.append(ovs_check())
    checks.append(ovs_json_check())
    checks.append(datapath_check())
    checks.append(memory_check())
    checks.append(switch_cpu_check())
    checks.extend(qdisc_checks())
    checks.append(emulation_check())
    checks.append(router_check())
    checks.append(vm_check())
    return checks


def ready_for_create(checks: list[Check]) -> bool:
    return all(c.ok for c in checks if c.needed_for_create)
