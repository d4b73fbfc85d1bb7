"""What this machine can do, measured rather than assumed.

One module answers every "can we?" question (engine up, --privileged allowed,
cgroup version, OVS datapath, qdiscs, router stack, full-kernel VM), so
`nestednet doctor` and the code paths that act on the answers never disagree.
Each probe does the real thing in a scratch space of its own (a throwaway
container, a scratch network namespace) and removes it again.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from nestednet import LABEL_PREFIX

QDISC_KINDS = ("netem", "hfsc", "htb", "tbf")

PARENT_CAPSET_OPTIONS: dict = {
    "cap_add": ["ALL"],
    "cap_drop": ["SYS_RESOURCE"],
    "security_opt": ["seccomp=unconfined", "apparmor=unconfined"],
    "devices": ["/dev/net/tun:/dev/net/tun:rwm"],
    "unmask_system_paths": True,
}
"""Docker-in-Docker without --privileged (PLATFORM.md: refused where CAP_SYS_RESOURCE
is outside the bounding set). Everything a nested engine and a userspace OVS need."""

PARENT_PRIVILEGED_OPTIONS: dict = {"privileged": True}


@dataclass(frozen=True)
class Check:
    """One line of the capability report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    needed_for_create: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


def is_root() -> bool:
    return os.geteuid() == 0


# --- Docker -----------------------------------------------------------------------


def docker_check() -> Check:
    from nestednet.adapters import docker_engine
    from nestednet.errors import EnvironmentProblem

    try:
        client = docker_engine.connect(timeout=10)
    except EnvironmentProblem as exc:
        return Check("docker", False, str(exc), "run `scripts/setup` (starts dockerd)", True)
    return Check("docker", True, f"engine {docker_engine.engine_version(client)} reachable",
                 needed_for_create=True)


SECURITY_CACHE = Path("/var/lib/nestednet/parent-security.json")
"""Probe results per (boot, engine, image): the probe costs ~1.5 s, paid on every
`nestednet create` otherwise. A reboot or a new image probes again."""


@functools.cache
def parent_security_mode(image: str) -> str:
    """Return "privileged" or "capset": how node parents must be started here.

    Runs a throwaway container from ``image`` each way (once per boot, engine and
    image; see SECURITY_CACHE); raises EnvironmentProblem when neither starts.
    """
    from nestednet.adapters import docker_engine

    client = docker_engine.connect()
    try:
        key = "/".join((Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                        str(client.info().get("ID")), client.images.get(image).id))
        cache = json.loads(SECURITY_CACHE.read_text()) if SECURITY_CACHE.exists() else {}
    except Exception:  # no cache is fine: probe
        key, cache = "", {}
    if key and cache.get(key) in ("privileged", "capset"):
        return cache[key]
    mode = _probe_parent_security(client, image)
    if key:
        with contextlib.suppress(OSError):
            SECURITY_CACHE.parent.mkdir(parents=True, exist_ok=True)
            tmp = SECURITY_CACHE.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({key: mode}))
            tmp.replace(SECURITY_CACHE)
    return mode


def _probe_parent_security(client, image: str) -> str:
    import docker.errors

    from nestednet.adapters import docker_engine
    from nestednet.errors import EnvironmentProblem

    errors = []
    for mode, options in (("privileged", PARENT_PRIVILEGED_OPTIONS),
                          ("capset", PARENT_CAPSET_OPTIONS)):
        name = f"nestednet-probe-{uuid.uuid4().hex[:8]}"
        try:
            container = docker_engine.start_container(
                client, image, name=name, command=["true"], entrypoint=[],
                labels={f"{LABEL_PREFIX}.probe": "privilege"}, security=options)
            if container.wait(timeout=60).get("StatusCode") == 0:
                return mode
            errors.append(f"{mode}: probe container exited non-zero")
        except docker.errors.DockerException as exc:
            errors.append(f"{mode}: {docker_engine.explain(exc)}")
        finally:
            with contextlib.suppress(docker.errors.DockerException):
                client.containers.get(name).remove(force=True)
    raise EnvironmentProblem("no way to start a Docker-in-Docker parent here: " + "; ".join(errors))


def privilege_check(image: str | None) -> Check:
    if image is None:
        return Check("privileged", False, "not probed: no image to probe with yet",
                     "run `nestednet images build`", True)
    from nestednet.errors import EnvironmentProblem

    try:
        mode = parent_security_mode(image)
    except EnvironmentProblem as exc:
        return Check("privileged", False, str(exc), "", True)
    if mode == "privileged":
        return Check("privileged", True, "--privileged works", needed_for_create=True)
    return Check("privileged", True,
                 "--privileged refused; the explicit capability set works (fallback in use)",
                 needed_for_create=True)


# --- cgroups ----------------------------------------------------------------------


def cgroup_version() -> str:
    return "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "v1"


def cgroup_check() -> Check:
    version = cgroup_version()
    controllers = "cpu, memory"
    if version == "v1":
        ok = all(os.path.isdir(f"/sys/fs/cgroup/{c}") for c in ("cpu", "memory"))
    else:
        text = Path("/sys/fs/cgroup/cgroup.controllers").read_text()
        ok = "memory" in text and "cpu" in text
    return Check("cgroup", ok, f"cgroup {version}" + ("" if ok else f", missing {controllers}"),
                 "" if ok else "enable the cpu and memory controllers", True)


# --- Open vSwitch -----------------------------------------------------------------


def ovs_check() -> Check:
    if shutil.which("ovs-vsctl") is None:
        return Check("ovs", False, "Open vSwitch not installed",
                     "apt-get install openvswitch-switch (or run scripts/setup)", True)
    from nestednet.adapters import ovsdb

    try:
        version = ovsdb.Ovsdb().ovs_version()
    except Exception as exc:  # any failure to talk to ovsdb means "not running" to a user
        return Check("ovs", False, f"ovsdb-server not reachable: {exc}",
                     "run scripts/setup (starts ovs-ctl)", True)
    return Check("ovs", True, f"Open vSwitch {version} running", needed_for_create=True)


@functools.cache
def ovs_datapath() -> str:
    """"system" when the openvswitch kernel module is (or can be) loaded, else "netdev"."""
    if os.path.isdir("/sys/module/openvswitch"):
        return "system"
    if shutil.which("modprobe"):
        done = subprocess.run(["modprobe", "-q", "openvswitch"], capture_output=True)
        if done.returncode == 0 and os.path.isdir("/sys/module/openvswitch"):
            return "system"
    return "netdev"


def datapath_check() -> Check:
    dp = ovs_datapath()
    if dp == "system":
        return Check("datapath", True, "kernel datapath (openvswitch module)",
                     needed_for_create=True)
    return Check("datapath", True,
                 "userspace datapath only (netdev; no openvswitch kernel module)",
                 needed_for_create=True)


# --- traffic control --------------------------------------------------------------


@functools.cache
def available_qdiscs() -> dict[str, bool]:
    """Try each qdisc kind on the loopback of a scratch network namespace."""
    from pyroute2 import NetlinkError, NetNS, netns

    name = f"nestednet-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    result = dict.fromkeys(QDISC_KINDS, False)
    attempts = {
        "netem": {"delay": 1000},
        "hfsc": {"default": 1},
        "htb": {"default": 1},
        "tbf": {"rate": "1mbit", "burst": 16000, "latency": 50000},
    }
    netns.create(name)
    try:
        with NetNS(name) as ns:
            lo = ns.link_lookup(ifname="lo")[0]
            ns.link("set", index=lo, state="up")
            for kind in QDISC_KINDS:
                try:
                    ns.tc("add", kind, index=lo, handle="1:0", **attempts[kind])
                    result[kind] = True
                    ns.tc("del", index=lo, handle="1:0", root=True)
                except NetlinkError:
                    result[kind] = False
    finally:
        netns.remove(name)
    return result


def qdisc_checks() -> list[Check]:
    if not is_root():
        return [Check(f"qdisc:{k}", False, "not probed (needs root)") for k in QDISC_KINDS]
    found = available_qdiscs()
    checks = []
    for kind in QDISC_KINDS:
        ok = found[kind]
        fix = "" if ok else (f"this kernel lacks sch_{kind}: kernel tests run in the "
                             "full-kernel VM (scripts/kernel-vm)")
        checks.append(Check(f"qdisc:{kind}", ok, "available" if ok else "MISSING in this kernel",
                            fix))
    return checks


# --- router stack -----------------------------------------------------------------


def router_check() -> Check:
    code = "import linkemu.os_ken_compat as c; c.import_rest_router(); print(c.os_ken_version())"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    except OSError as exc:
        return Check("router", False, f"could not run {sys.executable}: {exc}")
    if done.returncode == 0:
        return Check("router", True, f"os-ken {done.stdout.strip()} rest_router importable")
    last = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
    return Check("router", False, f"os_ken.app.rest_router not importable: {last}",
                 "pip install 'os-ken==1.4.1' 'eventlet==0.33.3' (scripts/setup does)")


# --- full-kernel VM ---------------------------------------------------------------


VM_MODULES = ("sch_netem", "sch_hfsc", "openvswitch")


def _version_key(path: str) -> list[tuple[int, int | str]]:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.-]", path)]


def vm_kernel() -> str | None:
    """Newest /boot/vmlinuz-* whose modules include sch_netem, sch_hfsc and openvswitch."""
    for image in sorted(glob.glob("/boot/vmlinuz-*"), key=_version_key, reverse=True):
        version = image.removeprefix("/boot/vmlinuz-")
        moddir = Path("/lib/modules") / version
        if not moddir.is_dir():
            continue
        builtin, deps = (
            (moddir / f).read_text() if (moddir / f).exists() else ""
            for f in ("modules.builtin", "modules.dep"))
        if all(f"/{m}.ko" in deps or f"/{m}.ko" in builtin
               for m in VM_MODULES):
            return image
    return None


def vng_path() -> str | None:
    beside = Path(sys.executable).parent / "vng"
    return str(beside) if beside.exists() else shutil.which("vng")


def in_full_kernel_vm() -> bool:
    """Whether we run inside scripts/kernel-vm (software-emulated: Python starts ~10 s,
    importing os-ken takes over a minute), so waits must be far longer than on a host."""
    return os.environ.get("NESTEDNET_IN_VM") == "1"


def vm_busybox() -> tuple[str | None, str]:
    """(path, problem) of the static busybox virtme-ng puts in the guest's initramfs.

    Asks virtme-ng itself (its own search and its own "statically linked" test, which
    runs `file`), so doctor and `vng` cannot disagree about what the VM needs."""
    try:
        from virtme.commands.run import is_statically_linked
        from virtme.mkinitramfs import find_busybox
    except ImportError:
        return None, "virtme-ng not installed"
    found = find_busybox("/", True)
    if found is None:
        return None, "no busybox for the initramfs (apt-get install busybox-static)"
    if shutil.which("file") is None:
        return None, "`file` is missing: virtme-ng runs it on busybox (apt-get install file)"
    if not is_statically_linked(found):
        return None, f"{found} is not statically linked (apt-get install busybox-static)"
    return found, ""


def vm_problems() -> list[str]:
    """Everything that would stop `scripts/kernel-vm` from booting, each with its fix;
    empty when the VM can boot."""
    problems = []
    if vng_path() is None:
        problems.append("virtme-ng missing (pip install virtme-ng; scripts/setup does)")
    if shutil.which("qemu-system-x86_64") is None:
        problems.append("qemu-system-x86_64 missing (apt-get install qemu-system-x86)")
    if vm_kernel() is None:
        problems.append("no /boot/vmlinuz-* with " + "/".join(VM_MODULES)
                        + " modules (apt-get install linux-image-amd64)")
    if vng_path() is not None:
        _busybox, problem = vm_busybox()
        if problem:
            problems.append(problem)
    return problems


def vm_check() -> Check:
    problems = vm_problems()
    if problems:
        return Check("vm", False, "full-kernel VM cannot boot: " + "; ".join(problems),
                     "run scripts/setup (installs all of these)")
    busybox, _ = vm_busybox()
    return Check("vm", True, f"virtme-ng + {vm_kernel()} + static {busybox} "
                 "(software emulation, --disable-kvm)")


# --- report -----------------------------------------------------------------------


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
    checks.append(datapath_check())
    checks.extend(qdisc_checks())
    checks.append(router_check())
    checks.append(vm_check())
    return checks


def ready_for_create(checks: list[Check]) -> bool:
    return all(c.ok for c in checks if c.needed_for_create)


if __name__ == "__main__":
    # `python -m nestednet.capabilities vm-kernel` is how scripts/kernel-vm finds its kernel.
    if sys.argv[1:] == ["vm-kernel"]:
        # The kernel to boot, or every missing piece (one per line) and exit 1.
        problems = vm_problems()
        if problems:
            print("\n".join(problems), file=sys.stderr)
            sys.exit(1)
        print(vm_kernel())
        sys.exit(0)
    if sys.argv[1:] == ["missing-kernel-features"]:
        q = available_qdiscs()
        missing = [f"sch_{k}" for k in ("netem", "hfsc") if not q[k]]
        if ovs_datapath() != "system":
            missing.append("openvswitch")
        print(" ".join(missing))
        sys.exit(0)
    print("usage: python -m nestednet.capabilities vm-kernel|missing-kernel-features",
          file=sys.stderr)
    sys.exit(2)
