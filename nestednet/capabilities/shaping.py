"""What tc shaping and linkemu's router need: qdisc kinds in this kernel, os-ken."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import uuid

from nestednet.capabilities.check import Check
from nestednet.capabilities.nodes import is_root

QDISC_KINDS = ("netem", "hfsc", "htb", "tbf")

# --- traffic control --------------------------------------------------------------


@functools.cache
def available_qdiscs() -> dict[str, bool]:
    """Try each qdisc kind on the loopback of a scratch network namespace."""
    # Lazy: pyroute2 adds ~0.15 s to every CLI start-up (doctor and linkemu import this).
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


def emulation_check() -> Check:
    """Which link properties `run`/`link` can emulate here: rate needs HTB, the rest netem."""
    if not is_root():
        return Check("link properties", False, "not probed (needs root)")
    found = available_qdiscs()
    can = (["rate"] if found["htb"] else []) + (["delay", "jitter", "loss"] if found["netem"]
                                                 else [])
    cannot = [p for p in ("rate", "delay", "jitter", "loss") if p not in can]
    detail = f"can emulate: {', '.join(can) or 'nothing'}"
    if cannot:
        missing = sorted({"sch_htb" if p == "rate" else "sch_netem" for p in cannot})
        detail += f"; cannot: {', '.join(cannot)} (no {', '.join(missing)})"
    fix = ("" if not cannot else "`--shaping rate-only` shapes the rate alone; for the rest "
           "use a kernel with sch_netem (scripts/kernel-vm)")
    return Check("link properties", not cannot, detail, fix)


# --- router stack -----------------------------------------------------------------


ROUTER_IMPORT_TIMEOUT_S = 60


def router_check() -> Check:
    code = ("import nestednet.adapters.os_ken_compat as c; c.import_rest_router(); "
            "print(c.os_ken_version())")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=ROUTER_IMPORT_TIMEOUT_S)
    except OSError as exc:
        return Check("router", False, f"could not run {sys.executable}: {exc}")
    except subprocess.TimeoutExpired:
        # Seen in the software-emulated VM on a busy machine: the import alone took longer.
        return Check("router", False, "not confirmed: importing os_ken.app.rest_router took "
                     f"over {ROUTER_IMPORT_TIMEOUT_S} s (a very slow or overloaded machine)",
                     "run `nestednet doctor` again when the machine is less busy")
    if done.returncode == 0:
        return Check("router", True, f"os-ken {done.stdout.strip()} rest_router importable")
    last = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
    return Check("router", False, f"os_ken.app.rest_router not importable: {last}",
                 "pip install 'os-ken==1.4.1' 'eventlet==0.33.3' (scripts/setup does)")
