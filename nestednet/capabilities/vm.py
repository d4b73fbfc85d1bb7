"""The full-kernel VM (scripts/kernel-vm) for tests this kernel cannot run."""

from __future__ import annotations

import glob
import os
import re
import shutil
import sys
from pathlib import Path

from nestednet.capabilities.check import Check

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
