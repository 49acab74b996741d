"""The recipes' step runner: each step declares its settings and the steps it reads; its key is
a hash of its settings and of those steps' keys (a Merkle key, as build systems key their
actions), so changing the baseline's settings re-runs everything downstream of the baseline and
nothing else, and a step whose key is unchanged is skipped on a re-run.

A step writes into `OUT.partial/` and the folder is renamed to `OUT/` when it succeeds; only
then is its marker `RESULTS/.steps/NAME.json` ({"key", "seconds", "finished"}) written, so a step
that fails or is killed never looks done. A resumable step (training) keeps `OUT.partial/`
with its key when it fails, and the next run with the same key goes on from there.

Two kinds of step: an `argv` step runs a subprocess, the command line its `argv` function
returns (training: its own process, its own CUDA context, its log in `RESULTS/logs/NAME.log`), a
`call` step runs a Python function in this process (BLEU, statistics, curves, report: no process
start, no model re-import). Up to `jobs` subprocess steps run side by side while this process runs the call steps one at a time, so a GPU
can train the L0 sweep's models while the baseline is scored.

Code is in no key: a step whose code changed (a metric's, say) re-runs only when asked,
`rerun` (`fairseq-heads recipe --rerun GLOB,...`), with the steps that read it
(docs/architecture.md says why). One runner writes a results folder at a time: it holds
RESULTS/.lock while it runs (folder_lock.py).

After every step the runner calls `on_step_done(runner)` (e.g. packing the results as they
are, so a run killed at its time limit leaves what it finished) and rewrites `RESULTS/steps.json`:
each step's state, key and seconds.
"""
import contextlib
import fnmatch
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..files import write_text_atomic
from .folder_lock import folder_lock
from .step_keys import compute_keys, earlier_reason

logger = logging.getLogger(__name__)

MARKERS = ".steps"
LOGS = "logs"
STEP_KEY_FILE = ".step_key"
TIMINGS = "steps.json"


@dataclass(frozen=True)
class Step:
    """One step of a recipe.

    name      unique; the marker's and the log's name
    out       output folder relative to the results folder, or None for a step that writes
              its outputs atomically itself (the report)
    settings  JSON-able: everything the output depends on besides the steps in `inputs`
    inputs    names of earlier steps whose outputs it reads (their keys go into its key)
    call      a function (StepContext) -> None, run in this process; or
    argv      a function (StepContext) -> a command line (list of str), run as a subprocess
    resumable keep OUT.partial when the step fails, and resume from it under the same key
    resumable_from  (resumable steps) (why, settings) pairs: other settings whose OUT.partial it
              also resumes, because they train the same model: the same training before a
              stopping rule was added to it, which only ends a run sooner, or under another
              autocast, which rounds the products otherwise but keeps fp32 weights, optimizer
              and schedule (the step then says why and takes the partial output under its own key)
    alone     a timing (call steps only): it starts when no other step runs or is ready to, and
              none starts beside it, as the loop waits for a call
    """
    name: str
    out: Optional[str]
    settings: Mapping = field(default_factory=dict)
    inputs: Tuple[str, ...] = ()
    call: Optional[Callable[["StepContext"], None]] = None
    argv: Optional[Callable[["StepContext"], List[str]]] = None
    resumable: bool = False
    resumable_from: Tuple[Tuple[str, Mapping], ...] = ()
    alone: bool = False

    def __post_init__(self):
        if (self.call is None) == (self.argv is None):
            raise ValueError(f"step {self.name}: give exactly one of call and argv")
        if self.resumable_from and not self.resumable:
            raise ValueError(f"step {self.name}: resumable_from needs a resumable step")
        if self.alone and self.call is None:
            raise ValueError(f"step {self.name}: only a call step runs alone (it blocks the loop while it runs)")


@dataclass
class StepContext:
    """What a running step sees: its output folder (the .partial one) and the results folder."""
    step: Step
    results: str
    out: Optional[str]
    log_path: str
    resumed: bool

    def path(self, relative: str) -> str:
        """A path in the results folder (another step's output, say)."""
        return os.path.join(self.results, relative)


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


class Runner:
    """Runs `steps` in `results`: skips the done ones, resumes the resumable ones, runs the
    rest, `jobs` subprocess steps at a time. A failed step fails the steps that read it (and
    theirs); the others still run. `run()` returns the names of the failed steps."""

    def __init__(self, steps: Sequence[Step], results: str, jobs: int = 1,
                 on_step_done: Optional[Callable[["Runner"], None]] = None,
                 env: Optional[Mapping[str, str]] = None, only: Optional[Sequence[str]] = None,
                 launch: Optional[Callable] = None, rerun: Sequence[str] = ()):
        self.steps = list(steps)
        self.results = os.path.abspath(results)
        self.jobs = max(1, jobs)
        self.on_step_done = on_step_done
        self.env = dict(env) if env is not None else None
        # how a subprocess step starts: subprocess.Popen, or another executor's Popen look-alike (slurm.py)
        self.launch = launch or subprocess.Popen
        self.keys = compute_keys(self.steps)
        self.by_name = {step.name: step for step in self.steps}
        self.wanted = self._upstream_closure(only) if only else set(self.by_name)
        # --rerun: steps run again although their key is unchanged (their code changed), and the
        # steps downstream of them; each leaves the set once it has run
        self.forced = self.downstream_closure(rerun)
        self.state: Dict[str, dict] = {}

    # ------------------------------------------------------------------ state on disk
    def downstream_closure(self, patterns: Sequence[str]) -> set:
        """The steps whose names match a glob of PATTERNS, and every step reading one of them."""
        forced = set()
        for pattern in patterns:
            matched = {step.name for step in self.steps if fnmatch.fnmatchcase(step.name, pattern)}
            if not matched:
                raise ValueError(f"{pattern!r} matches no step (steps: {', '.join(self.by_name)})")
            forced |= matched
        for step in self.steps:  # declared after their inputs: one pass reaches every reader
            if any(name in forced for name in step.inputs):
                forced.add(step.name)
        return forced

    def _upstream_closure(self, names: Sequence[str]) -> set:
        unknown = [n for n in names if n not in self.by_name]
        if unknown:
            raise ValueError(f"no step named {', '.join(unknown)} (steps: {', '.join(self.by_name)})")
        wanted, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name not in wanted:
                wanted.add(name)
                todo.extend(self.by_name[name].inputs)
        return wanted

    def marker_path(self, name: str) -> str:
        return os.path.join(self.results, MARKERS, name + ".json")

    def out_path(self, step: Step) -> Optional[str]:
        return None if step.out is None else os.path.join(self.results, step.out)

    def read_marker(self, name: str) -> Optional[dict]:
        try:
            with open(self.marker_path(name), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def is_done(self, step: Step) -> bool:
        if step.name in self.forced:
            return False
        marker = self.read_marker(step.name)
        out = self.out_path(step)
        return (marker is not None and marker.get("key") == self.keys[step.name]
                and (out is None or os.path.isdir(out)))

    def _write_timings(self) -> None:
        rows = []
        for step in self.steps:
            state = dict(self.state.get(step.name) or {})
            marker = self.read_marker(step.name)
            if not state and marker and marker.get("key") == self.keys[step.name]:
                state = {"state": "done earlier", "seconds": marker.get("seconds")}
            rows.append({"step": step.name, "key": self.keys[step.name], **state})
        rows += self._other_configs_rows()
        write_text_atomic(os.path.join(self.results, TIMINGS), json.dumps(rows, indent=1) + "\n")

    def _other_configs_rows(self) -> List[dict]:
        """The finished steps in this results folder that this config does not have: an earlier
        invocation with other settings (e.g. more seeds) ran them, and their outputs are still
        here, so the folder's steps.json keeps their seconds."""
        folder = os.path.join(self.results, MARKERS)
        names = sorted(f[:-len(".json")] for f in os.listdir(folder) if f.endswith(".json")) \
            if os.path.isdir(folder) else []
        rows = []
        for name in (n for n in names if n not in self.by_name):
            marker = self.read_marker(name)
            if marker is not None:
                rows.append({"step": name, "key": marker.get("key"), "state": "done by another config",
                             "seconds": marker.get("seconds")})
        return rows

    def _finished(self, step: Step, state: str, seconds: float) -> None:
        self.state[step.name] = {"state": state, "seconds": round(seconds, 1)}
        self._write_timings()
        if self.on_step_done is not None:
            try:
                self.on_step_done(self)
            except Exception:  # packing must not stop the run; the next step packs again
                logger.exception("after step %s: on_step_done failed", step.name)

    # ------------------------------------------------------------------ one step
    def _prepare(self, step: Step) -> StepContext:
        marker = self.marker_path(step.name)
        if os.path.exists(marker):
            why = "--rerun" if step.name in self.forced else "its settings or inputs changed"
            print(f"redo {step.name} ({why})", flush=True)
            os.remove(marker)
        out = self.out_path(step)
        partial = None if out is None else out + ".partial"
        resumed = False
        if partial is not None:
            if os.path.isdir(out):
                shutil.rmtree(out)
            key_file = os.path.join(partial, STEP_KEY_FILE)
            found = _read(key_file) if step.resumable and step.name not in self.forced else None
            why = earlier_reason(step, self.keys, found) if found is not None else None
            if found is not None and found == self.keys[step.name]:
                resumed = True
            elif why is not None:
                resumed = True
                print(f"{step.name}: resuming the output of its earlier settings ({why})", flush=True)
                write_text_atomic(key_file, self.keys[step.name])
            else:
                shutil.rmtree(partial, ignore_errors=True)
                os.makedirs(partial)
                if step.resumable:
                    write_text_atomic(key_file, self.keys[step.name])
        print(("resume " if resumed else "run  ") + step.name, flush=True)
        log_path = os.path.join(self.results, LOGS, step.name + ".log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        if not resumed:
            open(log_path, "w").close()
        return StepContext(step, self.results, partial, log_path, resumed)

    def _succeed(self, context: StepContext, seconds: float) -> None:
        step = context.step
        if context.out is not None:
            key_file = os.path.join(context.out, STEP_KEY_FILE)
            if os.path.exists(key_file):
                os.remove(key_file)
            os.replace(context.out, self.out_path(step))
        marker = {"key": self.keys[step.name], "seconds": round(seconds, 1),
                  "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.makedirs(os.path.dirname(self.marker_path(step.name)), exist_ok=True)
        write_text_atomic(self.marker_path(step.name), json.dumps(marker) + "\n")
        self.forced.discard(step.name)
        self._finished(step, "ran", seconds)

    def _fail(self, context: StepContext, seconds: float, why: str) -> None:
        step = context.step
        print(f"FAILED {step.name}: {why}; log: {context.log_path}", file=sys.stderr, flush=True)
        try:
            with open(context.log_path, encoding="utf-8", errors="replace") as f:
                tail = f.readlines()[-25:]
            sys.stderr.write("".join(tail))
        except OSError:
            pass
        if context.out is not None and not step.resumable:
            shutil.rmtree(context.out, ignore_errors=True)
        self._finished(step, "failed", seconds)

    def _run_call(self, context: StepContext) -> None:
        start = time.time()
        handler = logging.FileHandler(context.log_path, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
        root = logging.getLogger()
        # the step's logging goes to its log alone, whatever it configures (basicConfig(force=True))
        console, level = root.handlers[:], root.level
        root.handlers[:] = [handler]
        root.setLevel(logging.INFO)
        try:
            with open(context.log_path, "a", encoding="utf-8") as log, \
                    contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                context.step.call(context)
        except Exception as error:  # a failed step is reported and its dependants skipped
            logger.debug("step failed", exc_info=True)
            with open(context.log_path, "a", encoding="utf-8") as log:
                traceback.print_exc(file=log)
            self._fail(context, time.time() - start, f"{type(error).__name__}: {error}")
            return
        finally:
            for extra in root.handlers:
                if extra is not handler:
                    extra.close()
            root.handlers[:] = console
            root.setLevel(level)
            handler.close()
        self._succeed(context, time.time() - start)

    def _start_process(self, context: StepContext):
        argv = context.step.argv(context)
        log = open(context.log_path, "a", encoding="utf-8")
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        process = self.launch(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.results,
                                   env=self.env)
        return process, log, time.time()

    # ------------------------------------------------------------------ all steps
    def run(self) -> List[str]:
        with folder_lock(self.results):  # one writer per results folder
            return self._run()

    def _run(self) -> List[str]:
        pending = [s for s in self.steps if s.name in self.wanted]
        done, failed = set(), []
        running: Dict[str, tuple] = {}  # name -> (context, process, log, start)
        for step in pending:
            if self.is_done(step):
                print(f"skip {step.name} (done)", flush=True)
                done.add(step.name)
        pending = [s for s in pending if s.name not in done]
        self._write_timings()
        try:
            self._loop(pending, done, failed, running)
        finally:  # stopped (a signal, an error here): no training outlives the run
            for context, process, log, _ in running.values():
                process.terminate()
                process.wait()
                log.close()
        self._write_timings()
        return failed

    def _loop(self, pending: List[Step], done: set, failed: List[str], running: Dict[str, tuple]) -> None:
        while pending or running:
            for name, (context, process, log, start) in list(running.items()):
                if process.poll() is None:
                    continue
                log.close()
                del running[name]
                if process.returncode == 0:
                    self._succeed(context, time.time() - start)
                    done.add(name)
                else:
                    self._fail(context, time.time() - start, f"exit status {process.returncode}")
                    failed.append(name)
            blocked = set(failed)
            for step in list(pending):
                if any(i in blocked for i in step.inputs):
                    print(f"skip {step.name} (an input failed)", flush=True)
                    self.state[step.name] = {"state": "skipped: an input failed"}
                    failed.append(step.name)
                    blocked.add(step.name)
                    pending.remove(step)
            ready = [s for s in pending if all(i in done for i in s.inputs)]
            busy = bool(running) or any(not s.alone for s in ready)
            ready = [s for s in ready if not (s.alone and busy)]
            launched = False
            # list order is priority: a subprocess step listed after a ready call step waits for it,
            # since the call may make one listed before that one ready (a mask, then its model)
            first_call = next((k for k, s in enumerate(ready) if s.call is not None), len(ready))
            for step in ready[:first_call]:
                if step.argv is not None and len(running) < self.jobs:
                    context = self._prepare(step)
                    running[step.name] = (context, *self._start_process(context))
                    pending.remove(step)
                    launched = True
            calls = [s for s in ready if s.call is not None]
            if calls:
                step = calls[0]
                pending.remove(step)
                self._run_call(self._prepare(step))
                if self.read_marker(step.name) and self.is_done(step):
                    done.add(step.name)
                else:
                    failed.append(step.name)
            elif running and not launched:
                time.sleep(0.5)
            elif not running and not launched and pending:
                raise RuntimeError("no step can run: " + ", ".join(s.name for s in pending))
