"""The kernel's same-page merging (KSM), read from /sys/kernel/mm/ksm.

Node parents offer their internal switch's memory to KSM (images/dind/ksm-merge): the
userspace datapath's 9 MB flow cache holds the same few page contents in every node, and
KSM keeps each once. Merging happens in the background, a pass over the offered pages at
a time, so a memory figure is taken after the passes that merge what is there
(wait_passes)."""

from __future__ import annotations

import time
from pathlib import Path

KSM_DIR = Path("/sys/kernel/mm/ksm")
FIELDS = ("run", "full_scans", "pages_shared", "pages_sharing", "pages_to_scan",
          "sleep_millisecs")


def state(ksm_dir: Path = KSM_DIR) -> dict[str, int] | None:
    """KSM's counters (None: this kernel has no KSM)."""
    out = {}
    for name in FIELDS:
        try:
            out[name] = int((ksm_dir / name).read_text())
        except (OSError, ValueError):
            if name == "run":
                return None
    return out


def running(ksm_dir: Path = KSM_DIR) -> bool:
    s = state(ksm_dir)
    return bool(s and s["run"] == 1)


def wait_passes(passes: int = 2, timeout: float = 120.0, first_pass_s: float = 15.0,
                ksm_dir: Path = KSM_DIR) -> bool:
    """Wait until KSM has made ``passes`` more full passes over the offered memory (a page
    is merged on the pass after the one that found it unchanged). False when KSM does
    not run, when no pass ends within ``first_pass_s`` (ksmd counts no passes while no
    process offers memory: nodes from an image without ksm-merge), or when the passes did
    not finish within ``timeout`` seconds."""
    start = state(ksm_dir)
    if not start or start["run"] != 1:
        return False
    began = time.monotonic()
    while (elapsed := time.monotonic() - began) < timeout:
        now = state(ksm_dir)
        done = now["full_scans"] - start["full_scans"] if now else 0
        if done >= passes:
            return True
        if done == 0 and elapsed > first_pass_s:
            return False
        time.sleep(0.5)
    return False
