"""Who may look: the live view's bind, token and origin rules (pure).

The view is read-only, but what it shows (addresses, routes, which links carry what)
is the lab's business, so it is safe by default: it binds to the loopback interface,
and any other address needs a token. With a token, every request must carry it (the
``token`` query parameter once, after which a cookie for this origin carries it; or
``Authorization: Bearer``). A browser request from another origin is refused (the
``Origin`` header must name the host it was sent to), and on a loopback bind the
``Host`` header must be a loopback name, so a web page elsewhere cannot read the view
through DNS rebinding.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

from nestednet.errors import UsageError

COOKIE = "nestednet_view_token"
MIN_TOKEN_LENGTH = 16
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def is_loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(bind: str, token: str | None) -> None:
    """UsageError unless ``bind`` is an address and a non-loopback one comes with a token."""
    if bind != "localhost":
        try:
            ipaddress.ip_address(bind.strip("[]"))
        except ValueError:
            raise UsageError(f"--bind {bind}: not an IP address",
                             hint="e.g. --bind 127.0.0.1 (the default) or --bind 0.0.0.0 "
                                  "--token T") from None
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise UsageError(f"--token: at least {MIN_TOKEN_LENGTH} characters",
                         hint="e.g. --token $(python3 -c 'import secrets; "
                              "print(secrets.token_urlsafe())')")
    if not is_loopback(bind) and not token:
        raise UsageError(f"--bind {bind}: the view would be reachable from other machines; "
                         "that needs --token",
                         hint="give --token T (or $NESTEDNET_VIEW_TOKEN), or keep the "
                              "default --bind 127.0.0.1")


def token_given(query: Mapping[str, str], headers: Mapping[str, str],
                cookies: Mapping[str, str]) -> str | None:
    """The token a request carries: query parameter, bearer header or cookie."""
    if "token" in query:
        return query["token"]
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return cookies.get(COOKIE)


def token_ok(given: str | None, expected: str | None) -> bool:
    """No token configured: anyone who reaches the (loopback) socket; else an exact match."""
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def host_ok(host_header: str | None, bind: str) -> bool:
    """On a loopback bind, the Host header must be a loopback name (DNS rebinding)."""
    if not is_loopback(bind):
        return True
    if not host_header:
        return False
    host = urlsplit(f"//{host_header}").hostname or ""
    return host in LOOPBACK_HOSTS or is_loopback(host)


def origin_ok(origin: str | None, host_header: str | None) -> bool:
    """A request without Origin (a navigation, a same-origin GET) passes; with one, its
    host and port must be the ones the request was sent to."""
    if origin is None:
        return True
    if not host_header:
        return False
    return urlsplit(origin).netloc.lower() == host_header.lower()
