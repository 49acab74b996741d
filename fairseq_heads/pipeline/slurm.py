"""`fairseq-heads recipe ... --executor slurm`: the recipe's subprocess steps (trainings) go to a
SLURM cluster as jobs through submitit (fairseq's own sweep tooling submits through it too), one
job per step; this process keeps running the call steps (BLEU, statistics, curves, report) and
polls the jobs, so `--jobs N` is how many trainings are queued at once. The job's folder
(`RESULTS/slurm/`) holds submitit's logs; a step's own log gets the job's output when it ends.

A job is handed to the runner as something that looks like the `subprocess.Popen` it starts for
a local subprocess step (`poll`, `returncode`, `terminate`, `wait`), so nothing else changes: keys,
resuming, failures and `--pack` are the runner's.
"""
import os
import time
from typing import Dict, List, Optional

from ..errors import CommandError


class SubmititJob:
    """A submitted subprocess step, as the runner polls a local process."""

    def __init__(self, job, log):
        self.job = job
        self.log = log
        self.returncode: Optional[int] = None
        log.write(f"submitted as job {job.job_id}\n")
        log.flush()

    def poll(self) -> Optional[int]:
        if self.returncode is None and self.job.done():
            try:
                output = self.job.result()
                self.returncode = 0
            except Exception as error:  # submitit's FailedJobError: the command's exit, the job's stderr
                output, self.returncode = str(error), 1
            self.log.write(output if isinstance(output, str) else "")
            self.log.flush()
        return self.returncode

    def terminate(self) -> None:
        if self.returncode is None:
            self.job.cancel(check=False)
            self.returncode = -15

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(5)
        return self.returncode


def submitit_launcher(folder: str, parameters: Dict[str, object]):
    """A function (argv, stdout, stderr, cwd, env) -> SubmititJob for runner.Runner(launch=...);
    `parameters` go to submitit's update_parameters (timeout_min, slurm_partition, gpus_per_node,
    ...). A one-line error without submitit."""
    try:
        import submitit
    except ImportError:
        raise CommandError("--executor slurm needs submitit: pip install submitit") from None
    executor = submitit.AutoExecutor(folder=folder)
    executor.update_parameters(**parameters)

    def launch(argv: List[str], stdout, stderr=None, cwd: Optional[str] = None, env=None) -> SubmititJob:
        # the command as it would run here: the same folder and environment (PYTHONPATH: this package)
        command = submitit.helpers.CommandFunction(list(argv), cwd=cwd, env=dict(env or os.environ))
        return SubmititJob(executor.submit(command), stdout)
    return launch


def slurm_parameters(assignments: List[str], cpu: bool) -> Dict[str, object]:
    """submitit's parameters from `--slurm KEY=VALUE`s (numbers as numbers), over defaults: a
    day's time limit, one GPU per job unless the recipe runs on the CPU."""
    parameters: Dict[str, object] = {"timeout_min": 24 * 60, "gpus_per_node": 0 if cpu else 1,
                                     "name": "fairseq-heads"}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key:
            raise CommandError(f"--slurm must be KEY=VALUE (a submitit parameter), got {assignment!r}")
        parameters[key.strip()] = int(value) if value.strip().isdigit() else value
    return parameters
