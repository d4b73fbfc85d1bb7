"""doctor's `vm` line is OK only when scripts/kernel-vm can really boot (issue #10: it said
OK on a machine without busybox, and the VM stage of `make test` then failed)."""

from __future__ import annotations

import pytest

from nestednet.capabilities import vm as capabilities

pytestmark = pytest.mark.unit


@pytest.fixture
def ready(monkeypatch):
    """A machine that has every piece; each test takes one away."""
    monkeypatch.setattr(capabilities, "vng_path", lambda: "/venv/bin/vng")
    monkeypatch.setattr(capabilities, "vm_kernel", lambda: "/boot/vmlinuz-6.1.0-1-amd64")
    monkeypatch.setattr(capabilities, "vm_busybox", lambda: ("/bin/busybox", ""))
    monkeypatch.setattr(capabilities.shutil, "which",
                        lambda name: f"/usr/bin/{name}" if name == "qemu-system-x86_64" else None)
    return monkeypatch


def test_every_piece_present_is_ok(ready):
    check = capabilities.vm_check()
    assert check.ok and "/boot/vmlinuz-6.1.0-1-amd64" in check.detail
    assert "/bin/busybox" in check.detail


@pytest.mark.parametrize(("missing", "says"), [
    ("busybox", "busybox-static"),
    ("qemu", "qemu-system-x86"),
    ("kernel", "linux-image-amd64"),
    ("vng", "virtme-ng"),
])
def test_each_missing_piece_is_named_with_its_fix(ready, missing, says):
    if missing == "busybox":
        ready.setattr(capabilities, "vm_busybox",
                      lambda: (None, "no busybox for the initramfs (apt-get install "
                                     "busybox-static)"))
    elif missing == "qemu":
        ready.setattr(capabilities.shutil, "which", lambda name: None)
    elif missing == "kernel":
        ready.setattr(capabilities, "vm_kernel", lambda: None)
    else:
        ready.setattr(capabilities, "vng_path", lambda: None)
    check = capabilities.vm_check()
    assert not check.ok and says in check.detail and "cannot boot" in check.detail


def test_busybox_probe_uses_virtme_ngs_own_rules(monkeypatch):
    """A dynamically linked busybox is not enough: virtme-ng refuses it."""
    run = pytest.importorskip("virtme.commands.run")
    mk = pytest.importorskip("virtme.mkinitramfs")
    monkeypatch.setattr(mk, "find_busybox", lambda root, native: "/usr/bin/busybox")
    monkeypatch.setattr(run, "is_statically_linked", lambda path: False)
    monkeypatch.setattr(capabilities.shutil, "which", lambda name: "/usr/bin/file")
    path, problem = capabilities.vm_busybox()
    assert path is None and "not statically linked" in problem and "busybox-static" in problem
    monkeypatch.setattr(mk, "find_busybox", lambda root, native: None)
    assert capabilities.vm_busybox() == (None, "no busybox for the initramfs "
                                                 "(apt-get install busybox-static)")
