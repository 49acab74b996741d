"""recipes/lib.sh: done markers written last, outputs renamed into place, failures leave nothing."""
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(REPO, "recipes", "lib.sh")

STEPS = r"""
set -euo pipefail
source "$LIB"
good() { echo "$1" > "$STEP_OUT/out.txt"; }
half_then_fail() { echo half > "$STEP_OUT/out.txt"; false; echo never > "$STEP_OUT/more.txt"; }
self_written() { echo whole > "$RESULTS/own.txt"; }
run_step "$NAME" "$RESULTS/$NAME" "$KEY" "$COMMAND" "$KEY"
"""


def run_step(results, name, key, command):
    env = dict(os.environ, RESULTS=str(results), LIB=LIB, NAME=name, KEY=key, COMMAND=command)
    return subprocess.run(["bash", "-c", STEPS], env=env, capture_output=True, text=True, timeout=60)


def test_step_runs_once_then_skips_and_redoes_on_new_settings(tmp_path):
    first = run_step(tmp_path, "a", "k1", "good")
    assert first.returncode == 0 and first.stdout.strip() == "run  a"
    assert (tmp_path / "a" / "out.txt").read_text() == "k1\n"
    assert (tmp_path / ".done" / "a").read_text() == "k1"
    again = run_step(tmp_path, "a", "k1", "good")
    assert again.stdout.strip() == "skip a (done)"
    changed = run_step(tmp_path, "a", "k2", "good")
    assert changed.stdout.split("\n")[:2] == ["redo a (settings changed)", "run  a"]
    assert (tmp_path / "a" / "out.txt").read_text() == "k2\n"
    assert (tmp_path / "logs" / "a.log").exists()


def test_failing_step_leaves_no_marker_and_no_output(tmp_path):
    failed = run_step(tmp_path, "b", "k1", "half_then_fail")
    assert failed.returncode != 0 and "FAILED b" in failed.stderr
    assert not (tmp_path / ".done" / "b").exists()
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.partial").exists()


def test_failure_when_redoing_removes_the_old_output_and_marker(tmp_path):
    assert run_step(tmp_path, "c", "k1", "good").returncode == 0
    failed = run_step(tmp_path, "c", "k2", "half_then_fail")
    assert failed.returncode != 0
    assert not (tmp_path / ".done" / "c").exists() and not (tmp_path / "c").exists()
    assert run_step(tmp_path, "c", "k1", "good").stdout.strip() == "run  c"  # not mistaken for done


def test_output_without_marker_is_not_done(tmp_path):
    """A step killed between renaming its output and writing its marker runs again."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "out.txt").write_text("stale\n")
    assert run_step(tmp_path, "d", "k1", "good").stdout.strip() == "run  d"
    assert (tmp_path / "d" / "out.txt").read_text() == "k1\n"


def test_step_writing_its_own_outputs(tmp_path):
    env = dict(os.environ, RESULTS=str(tmp_path), LIB=LIB)
    script = STEPS.replace('run_step "$NAME" "$RESULTS/$NAME"', 'run_step "$NAME" -')
    done = subprocess.run(["bash", "-c", script], env=dict(env, NAME="e", KEY="k", COMMAND="self_written"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and (tmp_path / "own.txt").read_text() == "whole\n"
    assert (tmp_path / ".done" / "e").exists()


RESUMABLE = r"""
set -euo pipefail
source "$LIB"
# a training that is killed halfway the first time and goes on from its checkpoint the next
train() { if [ -f "$STEP_OUT/checkpoint_last" ]; then echo "resumed" > "$STEP_OUT/model";
          else echo half > "$STEP_OUT/checkpoint_last"; false; fi; }
run_resumable_step "$NAME" "$RESULTS/$NAME" "$KEY" train
"""


def run_resumable(results, key):
    env = dict(os.environ, RESULTS=str(results), LIB=LIB, NAME="t", KEY=key)
    return subprocess.run(["bash", "-c", RESUMABLE], env=env, capture_output=True, text=True, timeout=60)


def test_resumable_step_keeps_its_partial_output_and_resumes_under_the_same_settings(tmp_path):
    killed = run_resumable(tmp_path, "k1")
    assert killed.returncode != 0 and "kept" in killed.stderr
    assert (tmp_path / "t.partial" / "checkpoint_last").exists() and not (tmp_path / ".done" / "t").exists()
    resumed = run_resumable(tmp_path, "k1")
    assert resumed.returncode == 0 and resumed.stdout.startswith("resume t")
    assert (tmp_path / "t" / "model").read_text() == "resumed\n"
    assert not (tmp_path / "t" / ".step_key").exists() and (tmp_path / ".done" / "t").read_text() == "k1"


def test_resumable_step_starts_afresh_under_other_settings(tmp_path):
    assert run_resumable(tmp_path, "k1").returncode != 0
    again = run_resumable(tmp_path, "k2")  # the kept checkpoint is from other settings: not reused
    assert again.returncode != 0 and again.stdout.startswith("run  t")
    assert (tmp_path / "t.partial" / ".step_key").read_text() == "k2"
