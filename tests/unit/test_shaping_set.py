"""`linkemu set` / `edit` validation: bad input is exit 2 and reaches no tc call."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from linkemu import editor, linksfile, shaping
from linkemu.cli import main
from nestednet.adapters import tc

THESIS = "scenarios/links/thesis-example.json"


@pytest.fixture
def applied(tmp_path, monkeypatch):
    """A recorded apply of the thesis example; tc.change records instead of touching a kernel."""
    monkeypatch.setenv(shaping.STATE_DIR_ENV, str(tmp_path))
    calls = []
    monkeypatch.setattr(tc, "change", lambda ops, netns: calls.append(list(ops)))
    shaping.save_state(shaping.Applied(linksfile.load(THESIS), "htb", True, time.time()))
    return calls


@pytest.mark.unit
def test_set_changes_only_given_properties(applied):
    result = CliRunner().invoke(main, ["set", "R1-C2", "forward", "--delay", "40ms"])
    assert result.exit_code == 0, result.output
    assert "delay 5ms -> 40ms" in result.output
    [ops] = applied
    assert [(op.command, op.kind, op.handle, op.port) for op in ops] == [
        ("change", "netem", "11:0", "le-srv")]
    state = shaping.load_state()
    c2 = state.table.links[1]
    assert c2.forward.delay_us == 40_000 and c2.forward.rate_bps == 20_000_000
    assert state.table.links[0] == linksfile.load(THESIS).links[0]
    assert c2.backward == linksfile.load(THESIS).links[1].backward


@pytest.mark.unit
@pytest.mark.parametrize("name", ["C3", "198.18.0.13", "R1-C3"])
def test_set_finds_link_by_client_ip_or_name(applied, name):
    result = CliRunner().invoke(main, ["set", name, "both", "--rate", "7Mbit", "--json"])
    assert result.exit_code == 0, result.output
    assert [op.handle for op in applied[0]] == ["1:12", "1:12"]
    assert {op.port for op in applied[0]} == {"le-srv", "le-cli"}


@pytest.mark.unit
@pytest.mark.parametrize(("args", "words"), [
    (["R1-C9", "forward", "--rate", "1Mbit"], "known links: R1-C1 (198.18.0.11)"),
    (["C1", "forward", "--rate", "-1Mbit"], "--rate -1Mbit: negative"),
    (["C1", "forward", "--delay", "3mx"], "unknown unit 'mx'"),
    (["C1", "forward", "--loss", "120%"], "above 100"),
    (["C1", "forward", "--jitter", "20ms"], "larger than the delay"),
    (["C1", "forward"], "nothing to change"),
    (["C1", "sideways", "--rate", "1Mbit"], "sideways"),
])
def test_set_rejects_bad_input_with_exit_2(applied, args, words):
    before = shaping.state_path().read_text()
    result = CliRunner().invoke(main, ["set", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert applied == [] and shaping.state_path().read_text() == before


@pytest.mark.unit
def test_set_without_apply_is_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv(shaping.STATE_DIR_ENV, str(tmp_path))
    result = CliRunner().invoke(main, ["set", "C1", "forward", "--rate", "1Mbit"])
    assert result.exit_code == 2 and "no links are applied" in result.output


@pytest.mark.unit
def test_editor_with_prompt_toolkit_pipe_input(applied):
    """The prompt_toolkit path, driven through its pipe input like a terminal would be."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    said = []
    with create_pipe_input() as pipe:
        # client 2, backward; rate kept (Enter), delay typo then 25ms, jitter kept, loss 3%; stop
        pipe.send_text("2\rbackward\r\r25mx\r25ms\r\r3%\rn\r")
        prompter = editor.Prompter(session=PromptSession(input=pipe, output=DummyOutput()),
                                   out=said.append)
        table = editor.run(linksfile.load(THESIS), shaping.set_link, prompter=prompter)
    assert any("invalid delay" in s and "'mx'" in s for s in said), said
    assert any(s.startswith("R1-C2 backward now: rate 10Mbit, delay 5ms") for s in said), said
    assert table.links[1].backward.delay_us == 25_000
    assert table.links[1].backward.loss_pct == 3.0
    [ops] = applied
    assert [(op.command, op.handle, op.port) for op in ops] == [("change", "11:0", "le-cli")]
    assert ops[0].params["delay"] == 25_000 and ops[0].params["loss"] == 3.0


@pytest.mark.unit
def test_edit_command_from_a_pipe(applied):
    result = CliRunner().invoke(main, ["edit"], input="3\rforward\r12Mbit\r\r\r\ry\r1\rboth\r"
                                                      "\r1ms\r\r\rn\r".replace("\r", "\n"))
    assert result.exit_code == 0, result.output
    assert "applied R1-C3 forward: rate 12Mbit" in result.output
    assert "applied R1-C1 backward: rate 46Mbit, delay 1ms" in result.output
    assert [len(ops) for ops in applied] == [1, 2]
    assert shaping.load_state().table.links[0].forward.delay_us == 1000
