"""What a lab's components are made of, as the user asks for it (pure): the
capabilities added to them and the images they run.

A GNAB or iPHY is a container with Docker's default capabilities; to route, the
code in it needs CAP_NET_ADMIN, which the default set lacks. The lab adds the set
below unless `--component-caps` narrows it.

By default every component runs NestedNet's component image; `--image gnab=REF` or
`--image iphy=REF` runs a user's image instead (nestednet.lab.nested says how
NestedNet's own processes then run beside it).
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


def check_component_caps(caps: object) -> tuple[str, ...]:
    """``caps`` as a request holds it: a tuple of capability names NestedNet grants.

    A bare string is refused, not iterated: ``tuple("NET_ADMIN,NET_RAW")`` would be one
    "capability" per character (the `nestednet demo` bug of 2026-11-23, where a click
    default reached the request unconverted). Text from a user goes through
    parse_component_caps first.
    """
    if isinstance(caps, str) or not isinstance(caps, (tuple, list)):
        raise TypeError(f"component_caps must be a tuple of capability names, not "
                        f"{type(caps).__name__} {caps!r} (parse text with "
                        "parse_component_caps)")
    for cap in caps:
        if not isinstance(cap, str) or cap not in ALLOWED_COMPONENT_CAPS:
            allowed = ", ".join(sorted(ALLOWED_COMPONENT_CAPS))
            raise UsageError(f"component capability {cap!r} is not one NestedNet grants",
                             hint=f"a tuple drawn from {allowed}")
    return tuple(caps)


IMAGE_ROLES = ("gnab", "iphy")


def parse_component_images(values: tuple[str, ...] | list[str]) -> tuple[tuple[str, str], ...]:
    """`--image ROLE=REF` options -> ((role, ref), ...), one per role at most."""
    chosen: dict[str, str] = {}
    for value in values:
        role, sep, ref = value.partition("=")
        role, ref = role.strip().lower(), ref.strip()
        if not sep or role not in IMAGE_ROLES or not ref:
            raise UsageError(f"--image {value}: expected ROLE=IMAGE with ROLE one of "
                             f"{', '.join(IMAGE_ROLES)}", hint="e.g. --image gnab=myteam/gnab:1")
        if role in chosen:
            raise UsageError(f"--image: {role} given twice ({chosen[role]}, {ref})")
        chosen[role] = ref
    return tuple(sorted(chosen.items()))
