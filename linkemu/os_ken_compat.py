"""The one place that makes os-ken 1.4.1 (with rest_router) run on Python 3.11.

PyPI `ryu` no longer builds or runs on 3.11; os-ken dropped rest_router in 2.0, so we
pin os-ken 1.4.1 with eventlet 0.33.3. That eventlet no longer defines
``eventlet.wsgi.ALREADY_HANDLED``, which os-ken's WSGI layer still reads; defining it
before os_ken is imported is the whole shim. tests/unit/test_os_ken_compat.py fails
if this stops being enough.
"""

from __future__ import annotations

from importlib import metadata
from types import ModuleType


def apply() -> None:
    import eventlet.wsgi

    if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
        eventlet.wsgi.ALREADY_HANDLED = b""


def import_rest_router() -> ModuleType:
    apply()
    from os_ken.app import rest_router

    return rest_router


def os_ken_version() -> str:
    return metadata.version("os-ken")
