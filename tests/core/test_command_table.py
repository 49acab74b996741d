"""`fairseq-heads`'s commands: each is one module of fairseq_heads.commands, named as the command,
with `add_arguments` and `run`; cli.COMMANDS lists them all, and the recipes' steps run them
through the same modules."""
import importlib
import os
import pkgutil

import pytest

import fairseq_heads
from fairseq_heads import cli, commands
from fairseq_heads.pipeline.fairseq_steps import run_fairseq_heads


def test_every_command_is_its_own_module_named_as_the_command():
    modules = [module for _, module, _ in cli.COMMANDS]
    assert len({id(m) for m in modules}) == len(modules)
    for name, module, _ in cli.COMMANDS:
        assert module.__name__ == "fairseq_heads.commands." + name.replace("-", "_")
        assert callable(module.add_arguments) and callable(module.run)


def test_every_module_of_commands_that_runs_is_in_the_table():
    """A module with `run` is a command; the others (device_options, ...) are shared options."""
    in_table = {module.__name__ for _, module, _ in cli.COMMANDS}
    runnable = set()
    for info in pkgutil.iter_modules(commands.__path__):
        module = importlib.import_module(f"fairseq_heads.commands.{info.name}")
        if hasattr(module, "run"):
            runnable.add(module.__name__)
    assert runnable == in_table


def test_user_dir_prints_the_package_folder(capsys):
    assert cli.main(["user-dir"]) == 0
    assert capsys.readouterr().out.strip() == os.path.dirname(os.path.abspath(fairseq_heads.__file__))


def test_gates_on_a_missing_checkpoint_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["gates", str(tmp_path / "none.pt")]) == 2
    assert capsys.readouterr().err.strip() == f"fairseq-heads gates: error: checkpoint not found: {tmp_path / 'none.pt'}"


def test_a_step_runs_a_command_module_through_its_own_parser(capsys):
    from fairseq_heads.commands import user_dir

    run_fairseq_heads(user_dir, [])
    assert capsys.readouterr().out.strip() == os.path.dirname(os.path.abspath(fairseq_heads.__file__))
    with pytest.raises(SystemExit):  # argparse: user-dir takes no argument
        run_fairseq_heads(user_dir, ["extra"])
