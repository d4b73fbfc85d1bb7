"""openflow.Template: a link's flow-mods written from a template are os-ken's own bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nestednet.adapters import openflow

pytestmark = pytest.mark.unit

u32 = st.integers(min_value=0, max_value=2**32 - 1)
u64 = st.integers(min_value=0, max_value=2**64 - 1)
ports = st.integers(min_value=1, max_value=0xFFFFFF00)  # below the reserved ports


def _os_ken_bytes(message: object, xid: int) -> bytes:
    message.set_xid(xid)
    message.serialize()
    return bytes(message.buf)


@settings(deadline=None)  # the first example loads os-ken
@given(xid=u32, cookie=u64, a=ports, b=ports)
def test_a_link_flow_is_the_flow_mod_os_ken_builds(xid, cookie, a, b):
    flow, _ = openflow.link_templates()
    assert openflow.Packed(flow, (cookie, a, b)).encode(xid) == \
        _os_ken_bytes(openflow.output_flow(cookie, a, b), xid)


@settings(deadline=None)
@given(xid=u32, cookie=u64)
def test_a_cookie_delete_is_the_flow_mod_os_ken_builds(xid, cookie):
    _, gone = openflow.link_templates()
    assert openflow.Packed(gone, (cookie,)).encode(xid) == \
        _os_ken_bytes(openflow.delete_cookie(cookie), xid)


def test_a_template_refuses_a_message_without_its_field():
    with pytest.raises(RuntimeError, match="does not carry in_port"):
        openflow.Template(openflow.delete_cookie(5), {"in_port": ("!I", 0x0D1E2F31)})
