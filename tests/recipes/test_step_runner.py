"""The recipes' step runner (pipeline/runner.py, which replaced recipes/lib.sh) on the cases lib.sh
was tested for: done markers written last, outputs renamed into place, a failure leaves nothing,
an output without its marker is not done. (Keys, resuming, --only, --jobs: tests/pipeline.)"""
import json
import os

from fairseq_heads.pipeline import Runner, Step


def good(text):
    def call(context):
        with open(os.path.join(context.out, "out.txt"), "w") as f:
            f.write(text)
    return call


def half_then_fail(context):
    with open(os.path.join(context.out, "out.txt"), "w") as f:
        f.write("half")
    raise RuntimeError("stopped halfway")


def run_step(results, name, settings, call, out=True):
    return Runner([Step(name, name if out else None, settings, call=call)], results).run()


def printed(capsys):
    return capsys.readouterr().out.splitlines()


def test_step_runs_once_then_skips_and_redoes_on_new_settings(tmp_path, capsys):
    assert run_step(tmp_path, "a", {"k": 1}, good("k1")) == [] and printed(capsys) == ["run  a"]
    assert (tmp_path / "a" / "out.txt").read_text() == "k1"
    marker = json.loads((tmp_path / ".steps" / "a.json").read_text())
    assert run_step(tmp_path, "a", {"k": 1}, good("k1")) == [] and printed(capsys) == ["skip a (done)"]
    assert run_step(tmp_path, "a", {"k": 2}, good("k2")) == []
    assert printed(capsys) == ["redo a (its settings or inputs changed)", "run  a"]
    assert (tmp_path / "a" / "out.txt").read_text() == "k2"
    assert json.loads((tmp_path / ".steps" / "a.json").read_text())["key"] != marker["key"]
    assert (tmp_path / "logs" / "a.log").exists()


def test_failing_step_leaves_no_marker_and_no_output(tmp_path, capsys):
    assert run_step(tmp_path, "b", {}, half_then_fail) == ["b"]
    assert "FAILED b: RuntimeError: stopped halfway" in capsys.readouterr().err
    assert not (tmp_path / ".steps" / "b.json").exists()
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.partial").exists()


def test_failure_when_redoing_removes_the_old_output_and_marker(tmp_path, capsys):
    assert run_step(tmp_path, "c", {"k": 1}, good("k1")) == []
    assert run_step(tmp_path, "c", {"k": 2}, half_then_fail) == ["c"]
    assert not (tmp_path / ".steps" / "c.json").exists() and not (tmp_path / "c").exists()
    capsys.readouterr()
    assert run_step(tmp_path, "c", {"k": 1}, good("k1")) == []
    assert printed(capsys) == ["run  c"]  # the old settings' output is gone, not mistaken for done


def test_output_without_marker_is_not_done(tmp_path, capsys):
    """A step killed between renaming its output and writing its marker runs again."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "out.txt").write_text("stale")
    assert run_step(tmp_path, "d", {}, good("fresh")) == [] and printed(capsys) == ["run  d"]
    assert (tmp_path / "d" / "out.txt").read_text() == "fresh"


def test_step_writing_its_own_outputs(tmp_path, capsys):
    def self_written(context):
        with open(context.path("own.txt"), "w") as f:
            f.write("whole")

    assert run_step(tmp_path, "e", {}, self_written, out=False) == []
    assert (tmp_path / "own.txt").read_text() == "whole" and (tmp_path / ".steps" / "e.json").exists()
    assert run_step(tmp_path, "e", {}, self_written, out=False) == [] and printed(capsys)[-1] == "skip e (done)"
