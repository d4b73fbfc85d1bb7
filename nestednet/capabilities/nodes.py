"""What building a lab's nodes needs: root, the Docker engine, a way to start
Docker-in-Docker parents, cgroup controllers, Open vSwitch and its datapath."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from nestednet import LABEL_PREFIX, datapath
from nestednet.adapters import ksm, ovsdb
from nestednet.capabilities.check import Check
from nestednet.errors import EnvironmentProblem

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


def is_root() -> bool:
    return os.geteuid() == 0


# --- Docker -----------------------------------------------------------------------


def docker_check() -> Check:
    # Lazy: the docker SDK adds ~0.1 s to every CLI start-up (doctor imports this module).
    from nestednet.adapters import docker_engine

    try:
        client = docker_engine.connect(timeout=10)
    except EnvironmentProblem as exc:
        return Check("docker", False, str(exc), "run `scripts/setup` (starts dockerd)", True)
    return Check("docker", True, f"engine {docker_engine.engine_version(client)} reachable",
                 needed_for_create=True)


SECURITY_CACHE = Path("/var/lib/nestednet/parent-security.json")
"""Probe results per (boot, engine, image): the probe costs ~1.5 s, paid on every
`nestednet create` otherwise. A reboot or a new image probes again."""


PROBE_PREFIX = "nestednet-probe-"
"""Probe containers are named PREFIX<pid>-<hex>: `cleanup` removes those whose pid died."""
PROBE_LABEL = f"{LABEL_PREFIX}.probe"


@functools.cache
def parent_security_mode(image: str) -> str:
    """Return "privileged" or "capset": how node parents must be started here.

    Runs a throwaway container from ``image`` each way (once per boot, engine and
    image; see SECURITY_CACHE); raises EnvironmentProblem when neither starts.
    """
    # Lazy: the docker SDK adds ~0.1 s to every CLI start-up (doctor imports this module).
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
    # Lazy: the docker SDK adds ~0.1 s to every CLI start-up (doctor imports this module).
    import docker.errors

    from nestednet.adapters import docker_engine

    errors = []
    for mode, options in (("privileged", PARENT_PRIVILEGED_OPTIONS),
                          ("capset", PARENT_CAPSET_OPTIONS)):
        name = f"{PROBE_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            container = docker_engine.start_container(
                client, image, name=name, command=["true"], entrypoint=[],
                labels={PROBE_LABEL: "privilege"}, security=options)
            if container.wait(timeout=60).get("StatusCode") == 0:
                return mode
            errors.append(f"{mode}: probe container exited non-zero")
        except docker.errors.DockerException as exc:
            errors.append(f"{mode}: {docker_engine.explain(exc)}")
        finally:
            with contextlib.suppress(docker.errors.DockerException):
                client.containers.get(name).remove(v=True, force=True)
    raise EnvironmentProblem("no way to start a Docker-in-Docker parent here: " + "; ".join(errors))


def privilege_check(image: str | None) -> Check:
    if image is None:
        return Check("privileged", False, "not probed: no image to probe with yet",
                     "run `nestednet images build`", True)
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
    try:
        version = ovsdb.Ovsdb().ovs_version()
    except Exception as exc:  # any failure to talk to ovsdb means "not running" to a user
        return Check("ovs", False, f"ovsdb-server not reachable: {exc}",
                     "run scripts/setup (starts ovs-ctl)", True)
    return Check("ovs", True, f"Open vSwitch {version} running", needed_for_create=True)


def ovs_json_check() -> Check:
    """Not needed for create, but a create without it takes longer (ovsdb.json_parser)."""
    parser = ovsdb.json_parser()
    if parser == "C":
        return Check("ovs json", True, "python-ovs reads OVSDB messages in C (ovs._json)")
    return Check("ovs json", False, "python-ovs reads OVSDB messages in pure Python "
                 "(creates take more CPU)",
                 "run scripts/setup (links Debian's python3-openvswitch C parser into "
                 "the venv when their Python ABI matches)")


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
    """What the main bridge and the nodes' bridges run on, and what would be faster."""
    kind = ovs_datapath()
    node = datapath.node_datapath(kind)
    try:
        with ovsdb.Ovsdb(timeout=5) as ovs:
            host = datapath.from_config(kind, ovs.switch_config())
            iface_types = ovs.iface_types()
    except Exception as exc:  # OVS down: the ovs line says so; report the kernel side only
        return Check("datapath", kind == "system", f"{kind}; host OVS not readable ({exc})",
                     needed_for_create=True)
    detail = f"main bridge: {host.describe()}; node bridges: {node.describe()}"
    if kind == "netdev":
        detail += " (no openvswitch kernel module)"
    return Check("datapath", True, detail, datapath.advice(host, iface_types),
                 needed_for_create=True)


# --- memory ------------------------------------------------------------------------

VSWITCHD_PIDFILE = ovsdb.HOST_VSWITCHD_PIDFILE


# --- scheduling --------------------------------------------------------------------

SCHED_FIFO, SCHED_RR = 1, 2


def switch_scheduling(pidfile: Path = VSWITCHD_PIDFILE, proc: str = "/proc"
                      ) -> dict | None:
    """The host ovs-vswitchd's main thread as the scheduler sees it: ``realtime``
    (SCHED_FIFO/RR), ``nice``, and ``autogroup_nice`` (None when the kernel groups no
    sessions: sched_autogroup_enabled 0 or absent). None when it is not found."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(pidfile.read_text().strip())
        stat = Path(f"{proc}/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()  # fields[0] is stat's 3rd (state)
        nice, policy = int(fields[16]), int(fields[38])
        autogroup = None
        enabled = Path(f"{proc}/sys/kernel/sched_autogroup_enabled")
        if enabled.exists() and enabled.read_text().strip() == "1":
            autogroup = int(Path(f"{proc}/{pid}/autogroup").read_text().split()[-1])
        return {"pid": pid, "realtime": policy in (SCHED_FIFO, SCHED_RR), "nice": nice,
                "autogroup_nice": autogroup}
    return None


def switch_cpu_check(pidfile: Path = VSWITCHD_PIDFILE, proc: str = "/proc") -> Check:
    """Whether the host's ovs-vswitchd is ahead of the lab for the CPU, as ovs-ctl means
    it to be (nice -10). With autogroup scheduling on, a nice value only ranks the threads
    of one session against each other, and the switch's session competes as nice 0 with
    every other one: at 250 x 4 its flow installs then waited behind the agents a step
    wakes (docs/setup.md, "The switch's CPU priority"). Not needed for create."""
    sched = switch_scheduling(pidfile, proc)
    if sched is None:
        return Check("switch cpu", False, "host ovs-vswitchd not found", "")
    if sched["realtime"]:
        return Check("switch cpu", True, "host ovs-vswitchd main thread real-time")
    pid, group = sched["pid"], sched["autogroup_nice"]
    if group is None:
        ahead = sched["nice"] < 0
        detail = f"host ovs-vswitchd at nice {sched['nice']} (no autogroups)"
        fix = f"renice -n -10 -p {pid}"
    else:
        ahead = group < 0
        detail = f"host ovs-vswitchd's session (autogroup) at nice {group}"
        if not ahead:
            detail += f"; its own nice {sched['nice']} ranks it within that session only"
        fix = f"echo -10 > {proc}/{pid}/autogroup"
    if ahead:
        return Check("switch cpu", True, detail)
    return Check("switch cpu", False, detail,
                 f"{fix} (scripts/setup does this for an OVS it starts)")


def locked_kb(pidfile: Path = VSWITCHD_PIDFILE, proc: str = "/proc") -> int | None:
    """How much of the host's ovs-vswitchd is locked in memory (kB; None: not found)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text().strip())
        for line in Path(f"{proc}/{pid}/status").read_text().splitlines():
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    return None


def on_jemalloc(pidfile: Path = VSWITCHD_PIDFILE, proc: str = "/proc") -> bool | None:
    """Whether the host's ovs-vswitchd allocates with jemalloc (None: not found). On
    glibc's malloc it keeps the peak of its heap after labs are gone (docs/setup.md)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text().strip())
        return "/libjemalloc" in Path(f"{proc}/{pid}/maps").read_text()
    return None


def memory_check(ksm_dir: Path = ksm.KSM_DIR, pidfile: Path = VSWITCHD_PIDFILE,
                 proc: str = "/proc") -> Check:
    """Three host settings that set what nodes cost in memory: same-page merging for the
    nested nodes' internal switches, whether the host's ovs-vswitchd is mlocked
    (ovs-ctl's default; every page it maps then stays resident), and its allocator.
    None stops create."""
    problems, fixes, facts = [], [], []
    state = ksm.state(ksm_dir)
    if state and state["run"] == 1:
        facts.append("KSM on")
    else:
        problems.append("KSM " + ("absent" if state is None else "off")
                        + " (nested nodes ~9 MB more each)")
        if state is not None:
            fixes.append(f"echo 1 > {ksm_dir}/run (scripts/setup does)")
    locked = locked_kb(pidfile, proc)
    if locked:
        problems.append(f"host ovs-vswitchd mlocked ({locked // 1024} MB locked)")
        fixes.append("restart OVS with `ovs-ctl ... --no-mlockall` while no lab runs "
                     "(docs/setup.md)")
    elif locked == 0:
        facts.append("host ovs-vswitchd not mlocked")
    jemalloc = on_jemalloc(pidfile, proc)
    if jemalloc is False:
        problems.append("host ovs-vswitchd on glibc malloc (keeps its peak memory after "
                        "labs are deleted)")
        fixes.append("while no lab runs: `/usr/share/openvswitch/scripts/ovs-ctl stop`, "
                     "then scripts/setup (starts it on jemalloc)")
    elif jemalloc:
        facts.append("on jemalloc")
    return Check("memory", not problems, "; ".join(problems + facts), "; ".join(fixes))
