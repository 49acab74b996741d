"""`fairseq-heads recipe --executor slurm` (pipeline/slurm.py): command steps go through submitit,
here a stand-in for it that runs each job at once (as submitit's debug executor does), so that
the runner's keys, outputs and failures are checked on the jobs' path; without submitit the
option is a one-line error, exit 2."""
import contextlib
import io
import os
import subprocess
import sys
import types

import pytest

from fairseq_heads.pipeline import Runner, Step
from fairseq_heads.pipeline.slurm import slurm_parameters, submitit_launcher


class FailedJobError(Exception):
    pass


class CommandFunction:  # submitit.helpers.CommandFunction: the command's stdout, or an error
    def __init__(self, command, verbose=True, cwd=None, env=None):
        self.command, self.cwd, self.env = command, cwd, env

    def __call__(self):
        done = subprocess.run(self.command, cwd=self.cwd, env=self.env, capture_output=True, text=True)
        if done.returncode:
            raise FailedJobError(f"exit {done.returncode}: {done.stderr}")
        return done.stdout


class Job:
    def __init__(self, job_id, function):
        self.job_id, self.cancelled = job_id, False
        try:
            self.output, self.error = function(), None
        except FailedJobError as error:
            self.output, self.error = None, error

    def done(self):
        return True

    def result(self):
        if self.error:
            raise self.error
        return self.output

    def cancel(self, check=True):
        self.cancelled = True


@pytest.fixture
def fake_submitit(monkeypatch):
    submitted = []

    class AutoExecutor:
        def __init__(self, folder):
            self.folder, self.parameters = folder, {}
            submitted.append(self)

        def update_parameters(self, **parameters):
            self.parameters.update(parameters)

        def submit(self, function):
            return Job(len(submitted), function)

    module = types.SimpleNamespace(AutoExecutor=AutoExecutor, helpers=types.SimpleNamespace(CommandFunction=CommandFunction))
    monkeypatch.setitem(sys.modules, "submitit", module)
    return submitted


def writes(text, fail=False):
    code = f"open('out.txt', 'w').write({text!r})" + ("; raise SystemExit(3)" if fail else "")
    return lambda context: [sys.executable, "-c", f"import os; os.chdir({context.out!r}); {code}"]


def test_command_steps_run_as_jobs_with_the_runners_keys_and_failures(tmp_path, fake_submitit, capsys):
    launch = submitit_launcher(str(tmp_path / "slurm"), slurm_parameters(["slurm_partition=gpu", "timeout_min=60"], cpu=False))
    steps = [Step("train", "train", {"lr": 1}, argv=writes("trained")),
             Step("broken", "broken", {}, argv=writes("half", fail=True)),
             Step("score", "score", {}, inputs=("train",), argv=writes("scored")),
             Step("after_broken", "after", {}, inputs=("broken",), argv=writes("never"))]
    assert Runner(steps, tmp_path, jobs=2, launch=launch).run() == ["broken", "after_broken"]
    (executor,) = fake_submitit
    assert executor.parameters == {"timeout_min": 60, "gpus_per_node": 1, "name": "fairseq-heads",
                                   "slurm_partition": "gpu"}
    assert (tmp_path / "train" / "out.txt").read_text() == "trained"
    assert (tmp_path / "score" / "out.txt").read_text() == "scored"
    assert not (tmp_path / "broken").exists() and not (tmp_path / ".steps" / "broken.json").exists()
    assert "submitted as job" in (tmp_path / "logs" / "train.log").read_text()
    assert "exit 3" in (tmp_path / "logs" / "broken.log").read_text()
    capsys.readouterr()
    assert Runner(steps[:1], tmp_path, launch=launch).run() == []
    assert capsys.readouterr().out.strip() == "skip train (done)"


@pytest.mark.parametrize("argv, message", [
    (["--executor", "slurm"], "--executor slurm needs submitit: pip install submitit"),
    (["--executor", "slurm", "--slurm", "partition"], "--slurm must be KEY=VALUE"),
])
def test_slurm_without_submitit_or_with_a_bad_parameter_is_one_line_exit_2(tmp_path, monkeypatch, argv, message):
    from fairseq_heads.cli import main

    if "--slurm" not in argv:
        monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit raises ImportError
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(["recipe", "multi30k_en_de", "--scale", "toy", "--results", str(tmp_path / "r"), *argv])
    assert status == 2 and err.getvalue().count("\n") == 1 and message in err.getvalue()
    assert not os.path.exists(tmp_path / "r")
