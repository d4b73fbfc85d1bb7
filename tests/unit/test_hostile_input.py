"""Hostile input, generated: scenario files of both formats, links files of both formats
and the CLI's numbers. Contract: exit 0 or 2, never a traceback, an `error:` line that
names the file when refused, and a time bound per input.

Each example starts from a valid shipped file and spoils it: a value replaced by
nan/inf/huge/negative/wrong-typed data, a key dropped, a list blown up, the text cut
or made binary. `make test` runs NESTEDNET_FUZZ_EXAMPLES=60 per format;
`scripts/test fuzz` runs 1,000.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkemu.cli import main as linkemu_main
from nestednet.cli import main as nestednet_main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("NESTEDNET_FUZZ_EXAMPLES", "60"))
TIME_BOUND_S = 2.0
SEEDS = {
    "native scenario": ROOT / "scenarios" / "small-4x2.json",
    "nestednet scenario": ROOT / "scenarios" / "nestednet-format-example.json",
    "native links": ROOT / "scenarios" / "links" / "native-example.json",
    "thesis links": ROOT / "scenarios" / "links" / "thesis-fig-4.6.json",
}
COMMAND = {
    "native scenario": (nestednet_main, ["visibility", "check"]),
    "nestednet scenario": (nestednet_main, ["visibility", "check"]),
    "native links": (linkemu_main, ["apply", "--dry-run"]),
    "thesis links": (linkemu_main, ["apply", "--dry-run"]),
}
tally: dict[str, dict[int, int]] = {}

HOSTILE = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1, 0, 1e308, -1e308, 10**30, 2**63,
                     10**4000, "", "../../etc", "\x00", "1e999", True, None, [], {},
                     "9" * 5000, "a" * 100_000, 1_000_000_000]),
    st.integers(), st.floats(), st.text(max_size=40),
    st.recursive(st.none() | st.integers() | st.text(max_size=5),
                 lambda inner: st.lists(inner, max_size=4)
                 | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12),
)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*prefix, i))
    return out


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[head] = _replace(doc[head], rest, value)
    return copy


def _drop(doc: Any, path: tuple) -> Any:
    if not path:
        return doc
    if len(path) == 1:
        copy = dict(doc) if isinstance(doc, dict) else list(doc)
        del copy[path[0]]
        return copy
    return _replace(doc, path[:1], _drop(doc[path[0]], path[1:]))


@st.composite
def spoiled(draw: st.DrawFn, fmt: str) -> bytes:
    doc = json.loads(SEEDS[fmt].read_text())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        how = draw(st.sampled_from(["replace", "replace", "drop", "blow up"]))
        if how == "drop" and path:
            doc = _drop(doc, path)
        elif how == "blow up":
            old = _get(doc, path)
            doc = _replace(doc, path, [old] * draw(st.sampled_from([0, 2, 100, 2000])))
            break  # a blow-up of a blow-up would need gigabytes
        else:
            doc = _replace(doc, path, draw(HOSTILE))
    text = json.dumps(doc, allow_nan=True).encode()
    ending = draw(st.sampled_from(["whole", "whole", "whole", "cut", "binary", "deep"]))
    if ending == "cut":
        return text[:draw(st.integers(0, len(text)))]
    if ending == "binary":
        return b"\xff\xfe" + text
    if ending == "deep":
        return b"[" * 200_000 + b"]" * 200_000
    return text


def _get(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _meets_contract(fmt: str, data: bytes, tmp: Path) -> int:
    """Runs the format's command on ``data``, checks the contract; the exit code."""
    path = tmp / "input.json"
    path.write_bytes(data)
    main, args = COMMAND[fmt]
    started = time.monotonic()
    result = CliRunner().invoke(main, [*args, str(path)])
    took = time.monotonic() - started
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code in (0, 2), (result.exit_code, output[-600:], result.exc_info)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exc_info
    assert "Traceback" not in output
    if result.exit_code == 2:
        first = next(line for line in output.splitlines() if line.strip())
        assert first.startswith("error: ") and str(path) in first, first
    assert took < TIME_BOUND_S, f"{took:.2f} s"
    counts = tally.setdefault(fmt, {})
    counts[result.exit_code] = counts.get(result.exit_code, 0) + 1
    return result.exit_code


@pytest.mark.parametrize("fmt", sorted(SEEDS))
def test_spoiled_files_exit_2_located_quickly(fmt, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(spoiled(fmt))
    def check(data: bytes) -> None:
        _meets_contract(fmt, data, tmp)

    check()
    print(f"fuzz {fmt}: {sum(tally[fmt].values())} inputs, exit codes {tally[fmt]}")


NUMBERS = st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e308", "-1", "0", "1e999",
                                     "99999999999", "9" * 5000, "0x10", "", "1_000"]),
                    st.floats().map(repr), st.integers().map(str))


class WouldMake(Exception):
    """Raised instead of making a lab: the input was accepted."""


def _refuse_to_make(*_args: object, **_kwargs: object) -> None:
    raise WouldMake


def _number_contract(argv: list[str], option: str, value: str) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(nestednet_main, argv)
    took = time.monotonic() - started
    if isinstance(result.exception, WouldMake):
        assert _plausible(option, value), f"{option} {value!r} was accepted"
    else:
        assert result.exit_code == 2, (argv, result.output, result.exc_info)
        assert "Traceback" not in result.output
    assert took < TIME_BOUND_S


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(option=st.sampled_from(["--speed", "--until", "--hello-timeout", "--iphys"]),
       value=NUMBERS)
def test_run_numbers_are_checked_before_anything_is_made(option, value):
    scenario = str(ROOT / "scenarios" / "small-4x2.json")
    with mock.patch("nestednet.lab.lock.hold", _refuse_to_make):  # the run's first step
        _number_contract(["run", scenario, "--lab", "fz", option, value], option, value)


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(option=st.sampled_from(["--nodes", "--iphys", "--memory", "--cpus", "--jobs"]),
       value=NUMBERS)
def test_create_numbers_are_checked_before_anything_is_made(option, value):
    args = {"--nodes": "2", "--iphys": "1", option: value}
    argv = ["create", "--lab", "fz", *[x for kv in args.items() for x in kv]]
    with mock.patch("nestednet.lab.create.create", _refuse_to_make):
        _number_contract(argv, option, value)


def _plausible(option: str, value: str) -> bool:
    """Whether a value may rightly be accepted (bounds as documented in --help)."""
    try:
        number = float(int(value) if integral_option(option) else float(value))
    except (ValueError, OverflowError):
        return False
    if not math.isfinite(number):
        return False
    low, high, _ = {"--nodes": (1, 999, True), "--iphys": (1, 99, True),
                           "--memory": (8, 2**40, True), "--cpus": (0, 1024, False),
                           "--jobs": (1, math.inf, True), "--speed": (0, math.inf, False),
                           "--until": (0, math.inf, False),
                           "--hello-timeout": (1, math.inf, False)}[option]
    return low <= number <= high


def integral_option(option: str) -> bool:
    return option in ("--nodes", "--iphys", "--memory", "--jobs")


def _scalar_leaves(doc: Any) -> list[tuple]:
    """One path per distinct scalar field (list positions folded), first seen: the links
    formats write their numbers as strings ("10Mbit"), the scenarios as numbers."""
    seen: dict[tuple, tuple] = {}
    for path in _paths(doc):
        if not isinstance(_get(doc, path), dict | list):
            seen.setdefault(tuple("*" if isinstance(p, int) else p for p in path), path)
    return list(seen.values())


@pytest.mark.parametrize("fmt", sorted(SEEDS))
@pytest.mark.parametrize("huge", [10**400, -(10**400), 10**4000], ids=["1e400", "-1e400",
                                                                       "4001-digits"])
def test_integers_beyond_float_range_are_refused_in_every_field(fmt, huge, tmp_path):
    """JSON integers have no size limit, Python's ints neither, floats do: an integer no
    float can hold, in any field, is a located input error (exit 2), never an
    OverflowError. Found by the fuzz test in a thesis-format peer's PosX."""
    doc = json.loads(SEEDS[fmt].read_text())
    leaves = _scalar_leaves(doc)
    assert len(leaves) >= 5, f"{fmt}: the seed has {len(leaves)} fields"
    for path in leaves:
        spoiled_doc = _replace(doc, path, huge)
        assert _meets_contract(fmt, json.dumps(spoiled_doc).encode(), tmp_path) == 2, path
