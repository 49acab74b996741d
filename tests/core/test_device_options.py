"""Every command that runs a model has the same device and batching options (one declaration,
commands/device_options.py), and a bad value is a one-line error before anything is loaded."""
import argparse

import pytest

from fairseq_heads.cli import build_parser, main

MODEL_COMMANDS = ("stats", "curve", "lm-result")
OPTIONS = ("--cpu", "--max-tokens", "--batch-size", "--autocast")


def subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def device_group(subparser):
    groups = [g for g in subparser._action_groups if g.title == "device and batching"]
    assert len(groups) == 1, [g.title for g in subparser._action_groups]
    return {option: action for action in groups[0]._group_actions for option in action.option_strings}


def test_each_command_that_runs_a_model_has_the_same_device_and_batch_options():
    commands = subparsers()
    groups = {name: device_group(commands[name]) for name in MODEL_COMMANDS}
    for name, group in groups.items():
        assert sorted(group) == sorted(OPTIONS), name
    # the same spelling and meaning; only the defaults are each command's own
    for option in OPTIONS:
        helps = {groups[name][option].help.split(" (default")[0] for name in MODEL_COMMANDS}
        assert len(helps) == 1, (option, helps)
    for name, command in commands.items():  # and no other command grows its own variant
        if name not in MODEL_COMMANDS:
            assert not {o for a in command._actions for o in a.option_strings} & set(OPTIONS), name


def test_the_commands_keep_their_batch_defaults():
    commands = subparsers()
    defaults = {name: (commands[name].get_default("max_tokens"), commands[name].get_default("batch_size"),
                       commands[name].get_default("cpu")) for name in MODEL_COMMANDS}
    assert defaults == {"stats": (4096, None, False), "curve": (None, 64, False),
                        "lm-result": (None, 16, False)}


@pytest.mark.parametrize("command", MODEL_COMMANDS)
@pytest.mark.parametrize("option,value,message", [
    ("--batch-size", "0", "--batch-size: expected a whole number >= 1, got '0'"),
    ("--max-tokens", "many", "--max-tokens: expected a whole number >= 1, got 'many'"),
    ("--autocast", "fp8", "--autocast: expected one of none, bf16, auto, got 'fp8'")])
def test_a_bad_device_option_exits_2_in_one_line_before_loading_anything(command, option, value, message, tmp_path,
                                                                         capsys):
    missing = str(tmp_path / "no_such_checkpoint.pt")  # never reached: the option fails first
    argv = {"stats": ["stats", str(tmp_path), "--path", missing, "--out-dir", str(tmp_path / "out")],
            "curve": ["curve", str(tmp_path), "--path", missing, "--scores", missing, "--metric",
                      "grad", "--steps", "0", "--out", str(tmp_path / "curve.csv")],
            "lm-result": ["lm-result", str(tmp_path), "--path", missing, "--out",
                          str(tmp_path / "result.json"), "--name", "x", "--kind", "baseline"]}[command]
    assert main([*argv, option, value]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"fairseq-heads {command}: error: {message}"]
    assert list(tmp_path.iterdir()) == []
