"""The Linux capabilities NestedNet adds to its components (pure).

A GNAB or iPHY is a container with Docker's default capabilities; to route, the
code in it needs CAP_NET_ADMIN, which the default set lacks. The lab adds the set
below unless `--component-caps` narrows it.
"""

from __future__ import annotations

from nestednet.errors import UsageError

COMPONENT_CAPS = ("NET_ADMIN", "NET_RAW")
"""Capabilities added to Docker's default set for every GNAB and iPHY, so the code
in them can route (NET_RAW is in Docker's default set already; listing it keeps it
explicit). They act only inside the component's own namespaces: a child has no
CAP_SYS_ADMIN to enter another namespace and /proc/sys stays read-only."""
ALLOWED_COMPONENT_CAPS = frozenset(COMPONENT_CAPS)


def parse_component_caps(text: str) -> tuple[str, ...]:
    """`--component-caps`: `none`, or a comma list drawn from ALLOWED_COMPONENT_CAPS
    (with or without the CAP_ prefix, any case)."""
    if text.strip().lower() == "none":
        return ()
    caps = []
    for item in filter(None, (part.strip().upper() for part in text.split(","))):
        cap = item.removeprefix("CAP_")
        if cap not in ALLOWED_COMPONENT_CAPS:
            allowed = ", ".join(sorted(ALLOWED_COMPONENT_CAPS))
            raise UsageError(f"--component-caps: {item} is not one NestedNet grants",
                             hint=f"`none` or a comma list of {allowed}")
        if cap not in caps:
            caps.append(cap)
    return tuple(caps)
