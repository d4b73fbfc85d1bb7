"""The OVSDB adapter loads python-ovs without eventlet (nestednet.adapters.ovsdb says
why), and leaves python-ovs's own monkey-patch check in place where eventlet came first."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_adapter_does_not_load_eventlet_and_eventlet_stays_importable():
    out = _python("import sys, nestednet.adapters.ovsdb, ovs.poller\n"
                  "print('eventlet' in sys.modules, ovs.poller.eventlet_patcher)\n"
                  "import eventlet.patcher\n"
                  "print(eventlet.patcher.__name__)")
    assert out.splitlines() == ["False None", "eventlet.patcher"]


def test_a_process_that_loaded_eventlet_first_keeps_the_pollers_check():
    out = _python("import eventlet, nestednet.adapters.ovsdb, ovs.poller\n"
                  "print(ovs.poller.eventlet_patcher.__name__)")
    assert out == "eventlet.patcher"
