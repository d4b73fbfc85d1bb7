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
               for m in ("sch_netem", "sch_hfsc", "openvswitch")):
            return image
    return None


def vng_path() -> str | None:
    beside = Path(sys.executable).parent / "vng"
    return str(beside) if beside.exists() else shutil.which("vng")


def in_full_kernel_vm() -> bool:
    """Whether we run inside scripts/kernel-vm (software-emulated: Python starts ~10 s,
    importing os-ken takes over a minute), so waits must be far longer than on a host."""
    return os.environ.get("NESTEDNET_IN_VM") == "1"


def vm_check() -> Check:
    missing = []
    if vng_path() is None:
        missing.append("virtme-ng (pip install virtme-ng)")
    if shutil.which("qemu-system-x86_64") is None:
        missing.append("qemu-system-x86")
    kernel = vm_kernel()
    if kernel is None:
        missing.append("a kernel with sch_netem/sch_hfsc/openvswitch modules (linux-image-amd64)")
    if missing:
        return Check("vm", False, "full-kernel VM unavailable: missing " + ", ".join(missing),
                     "run scripts/setup")
    return Check("vm", True, f"virtme-ng + {kernel} (software emulation, --disable-kvm)")
