"""The README's command blocks are true (issue #30): the front door cannot break unseen.

Every ```sh block in README.md and in the documentation pages (docs/*.md) carries a
marker on the line before it saying how it is checked:

- `<!-- readme-test: run -->`: every command line runs as written, in order, from the
  repository's root with .venv/bin first on PATH, and must exit 0 (system test);
- `<!-- readme-test: synopsis -->`: a command reference with [optional] parts; every
  command and every --option it names must exist in the real CLI (unit test);
- `<!-- readme-test: ...anything else... -->`: the marker says which test covers the block
  or why it cannot run here (e.g. `make demo` is tests/system/test_demo.py).

A block without a marker fails the unit test, so a new block must say how it is checked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from readme_blocks import ROOT, Block, Command, blocks, readme_blocks


@pytest.mark.unit
def test_the_parser_reads_markers_comments_and_continuations():
    text = ("x\n<!-- readme-test: run -->\n```sh\nnestednet a --b  # note\n  --c d\n"
            "# only a comment\nlinkemu e\n```\n\n```sh\nmake x\n```\n")
    first, second = blocks(text)
    assert (first.mode, second.mode) == ("run", "")
    assert first.commands == (Command(4, "nestednet a --b --c d"), Command(7, "linkemu e"))


@pytest.mark.unit
def test_every_block_says_how_it_is_checked():
    unmarked = [f"{block.source}:{block.line}" for block in readme_blocks() if not block.mode]
    assert not unmarked, f"```sh blocks without a readme-test marker: {unmarked}"
    modes = {block.mode for block in readme_blocks()}
    assert "run" in modes and "synopsis" in modes


def _groups() -> dict[str, click.Group]:
    from linkemu.cli import main as linkemu_main
    from nestednet.cli import main as nestednet_main

    return {"nestednet": nestednet_main, "linkemu": linkemu_main}


def _resolve(group: click.Group, words: list[str]) -> list[click.Command]:
    """The commands a synopsis names: `link add|del ...` names two."""
    current: list[click.Command] = [group]
    for word in words:
        if word.startswith("-") or not re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", word):
            break
        subs = [c.commands.get(alt) for c in current if isinstance(c, click.Group)
                for alt in word.split("|")]
        if not subs or None in subs:
            break
        current = subs
    return current


def _options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)
            if opt.startswith("-")}


@pytest.mark.unit
def test_every_command_and_option_in_a_synopsis_exists():
    groups = _groups()
    wrong, checked = [], 0
    for block in readme_blocks():
        if block.mode != "synopsis":
            continue
        for command in block.commands:
            for part in re.split(r"\s\|\s", command.text):
                part = part.split(" -- ")[0]  # what follows is the component's command
                words = part.split()
                if not words or words[0] not in groups:
                    continue
                resolved = _resolve(groups[words[0]], words[1:])
                if resolved == [groups[words[0]]] and len(words) > 1:
                    wrong.append(f"{block.source} line {command.line}: no such command: "
                                 f"{part}")
                    continue
                known = set().union(*(_options(c) for c in resolved))
                for option in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", part):
                    checked += 1
                    if option not in known:
                        wrong.append(f"{block.source} line {command.line}: "
                                     f"{' '.join(words[:3])} has no {option}")
    assert checked > 20, "the synopsis parser found almost nothing to check"
    assert not wrong, "\n".join(wrong)


def _labs_named(block: Block) -> set[str]:
    return {m for c in block.commands for m in re.findall(r"--lab\s+(\w+)", c.text)}


def _tmp_files_named(block: Block) -> set[Path]:
    """Files the block writes in /tmp as a user would (the tour's scenario and picture)."""
    return {Path(m) for c in block.commands for m in re.findall(r"/tmp/[\w.-]+", c.text)}


@pytest.mark.system
def test_every_line_of_the_run_blocks_runs_as_written():
    from labs import forget

    runnable = [block for block in readme_blocks() if block.mode == "run"]
    assert runnable, "README.md has no block marked run"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for block in runnable:
        labs = _labs_named(block)
        for lab in labs:
            forget(lab)
        made = {f for f in _tmp_files_named(block) if not f.exists()}
        try:
            for command in block.commands:
                done = subprocess.run(["bash", "-c", command.text], cwd=ROOT, env=env,
                                      capture_output=True, text=True, timeout=600,
                                      stdin=subprocess.DEVNULL)
                assert done.returncode == 0, (
                    f"{block.source} line {command.line}: `{command.text}` exited "
                    f"{done.returncode}\nstdout:\n{done.stdout[-2000:]}\n"
                    f"stderr:\n{done.stderr[-2000:]}")
        finally:
            for lab in labs:
                forget(lab)
            for path in made:  # only what the block made, not a file that was there
                path.unlink(missing_ok=True)
