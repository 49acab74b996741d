"""`fairseq-heads recipe NAME --scale SCALE --results DIR [--set KEY=VALUE ...]`: run a recipe's
steps (pipeline.runner), skipping those done with the same key, resuming interrupted trainings.

    fairseq-heads recipe europarl_en_it --scale toy --results work/toy
    fairseq-heads recipe europarl_en_it --scale gpu --results R --set l0.encoder_lambdas=0.01 --jobs 3
    fairseq-heads recipe europarl_en_it --scale gpu --results R --only syntax_data   # the CPU part
    fairseq-heads recipe europarl_en_it --scale gpu --results R --pack OUT/results.tar.gz
    fairseq-heads recipe multi30k_en_de --scale cpu --results R --executor slurm --jobs 8 \
        --slurm slurm_partition=gpu --slurm timeout_min=600     # trainings as SLURM jobs (submitit)
"""
import argparse
import logging
import os
import signal
import sys
from typing import Optional

from ..cpu_memory import GPU_RECIPE_ALLOCATOR, allocator_env, cpu_recipe_allocator
from ..errors import CommandError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..pipeline.recipes import RECIPES

    parser.add_argument("recipe", choices=sorted(RECIPES), help="which recipe")
    parser.add_argument("--scale", required=True, help="the recipe's config: " + "; ".join(
        f"{name}: {', '.join(scales)}" for name, scales in sorted(RECIPES.items())))
    parser.add_argument("--results", required=True, metavar="DIR", help="the results folder")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override a setting, e.g. l0.encoder_lambdas=0.01,0.02 (repeat)")
    parser.add_argument("--data-root", default=None, metavar="DIR",
                        help="where the corpora are (default: ../shared/data beside the repository)")
    parser.add_argument("--only", default=None, metavar="STEP,...",
                        help="run only these steps and the steps they read")
    parser.add_argument("--rerun", default=None, metavar="STEP,...",
                        help="run these steps again although their keys are unchanged (after an edit of the "
                             "code they run; globs, e.g. 'stats*,bleu_*'), and the steps that read them")
    parser.add_argument("--jobs", type=int, default=1,
                        help="training steps run side by side (default: %(default)s); on a CPU recipe run here, "
                             "each gets cores/jobs threads unless OMP_NUM_THREADS is set")
    parser.add_argument("--pack", default=None, metavar="ARCHIVE.tar.gz",
                        help="after every step, write the committed subset of the results here")
    parser.add_argument("--dry-run", action="store_true", help="print each step, its key and state; run nothing")
    parser.add_argument("--executor", choices=("local", "slurm"), default="local",
                        help="where training steps run: here, or as SLURM jobs through submitit (pipeline/slurm.py)")
    parser.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                        help="a submitit parameter of the SLURM jobs, e.g. slurm_partition=gpu, timeout_min=600 (repeat)")


def default_data_root() -> str:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(os.path.dirname(repo), "shared", "data")


def step_environment(config, user_dir: str, environ, jobs: int = 1, cores: Optional[int] = None) -> dict:
    """The environment of the processes a recipe starts: `environ` with fairseq_heads importable,
    unbuffered output, the memory settings of cpu_memory.py, and on a CPU recipe run here with
    `jobs` > 1, the `cores` shared among the trainings side by side (OMP_NUM_THREADS, unless set)."""
    env = dict(environ)
    # fairseq-train run as a module finds fairseq_heads where this process found it
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(user_dir), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"  # a training's log is whole up to where it was stopped
    # torch's large blocks on huge pages, and on a CPU recipe kept between updates by mimalloc (or
    # glibc): page faults and glibc's free lists were a third of a CPU training's time (cpu_memory.py)
    on_cpu = getattr(getattr(config, "nmt", config), "cpu", True)
    env.update(allocator_env(cpu_recipe_allocator() if on_cpu else GPU_RECIPE_ALLOCATOR, env))
    if on_cpu and jobs > 1 and "OMP_NUM_THREADS" not in env:
        # each training's threads on cores of its own: two 1-thread Europarl L0 phases side by side
        # did 1.25x the updates of one 2-thread phase on 2 cores (train_parallel_cpu_europarl_*.json);
        # torch's default, a thread per core in each, would oversubscribe them
        env["OMP_NUM_THREADS"] = str(max(1, (cores or os.cpu_count() or 1) // jobs))
    return env


def build_runner(args):
    """The recipe's config (with --set), its steps and their runner; checks come first."""
    from .. import __file__ as package_file
    from ..pipeline.config import apply_overrides
    from ..pipeline.pack import pack
    from ..pipeline.recipe_json import packed_run_name
    from ..pipeline.recipes import RECIPES, corpus_files, recipe_steps
    from ..pipeline.runner import Runner, compute_keys

    scales = RECIPES[args.recipe]
    if args.scale not in scales:
        raise CommandError(f"--scale {args.scale}: recipe {args.recipe} has {', '.join(scales)}")
    if args.jobs < 1:
        raise CommandError(f"--jobs must be >= 1, got {args.jobs}")
    config = apply_overrides(scales[args.scale], args.overrides)
    data_root = os.path.abspath(args.data_root or default_data_root())
    user_dir = os.path.dirname(os.path.abspath(package_file))
    steps = recipe_steps(config, data_root, user_dir)
    try:
        compute_keys(steps)
    except ValueError as error:  # settings whose steps do not fit together
        sets = "".join(f" --set {override}" for override in args.overrides)
        raise CommandError(f"recipe {args.recipe} --scale {args.scale}{sets}: {error}") from None
    if args.pack and not args.pack.endswith(".tar.gz"):
        raise CommandError(f"--pack {args.pack}: the archive's name must end in .tar.gz")
    run_name = packed_run_name(args.recipe, args.scale, config)
    on_step_done = (lambda runner: pack(runner.results, args.pack, run_name)) if args.pack else None
    local = getattr(args, "executor", "local") == "local"  # SLURM jobs run on other machines' cores
    env = step_environment(config, user_dir, os.environ, jobs=args.jobs if local else 1)
    only = [s for s in args.only.split(",") if s] if args.only else None
    launch = None
    if not local and not args.dry_run:
        from ..pipeline.slurm import slurm_parameters, submitit_launcher

        parameters = slurm_parameters(args.slurm, getattr(getattr(config, "nmt", config), "cpu", True))
        launch = submitit_launcher(os.path.join(os.path.abspath(args.results), "slurm"), parameters)
    try:
        runner = Runner(steps, args.results, jobs=args.jobs, on_step_done=on_step_done, env=env, only=only,
                        launch=launch)
    except ValueError as error:
        raise CommandError(f"--only: {error}") from None
    try:
        runner.forced = runner.downstream_closure([s for s in (args.rerun or "").split(",") if s])
    except ValueError as error:
        raise CommandError(f"--rerun: {error}") from None
    for step, paths in corpus_files(config, data_root).items():  # before any step runs
        if step in runner.by_name and step in runner.wanted and not runner.is_done(runner.by_name[step]):
            missing = [path for path in paths if not os.path.exists(path)]
            if missing:
                raise CommandError(f"step {step}: {missing[0]} not found (--data-root)")
    return config, runner


def run(args) -> int:
    from ..pipeline.folder_lock import folder_lock
    from ..pipeline.recipe_json import packed_run_name, write_recipe_json

    config, runner = build_runner(args)
    if args.dry_run:
        for step in runner.steps:
            state = "done" if runner.is_done(step) else ("run" if step.name in runner.wanted else "-")
            print(f"{step.name:32s} {runner.keys[step.name]}  {state}")
        return 0
    # The console carries the steps ("run  NAME", "skip NAME") and warnings; each step's own
    # INFO lines go to its log (RESULTS/logs/NAME.log, runner.py).
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING)
    console.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
    logging.getLogger().addHandler(console)
    logging.getLogger().setLevel(logging.INFO)
    with folder_lock(runner.results):  # a second run on this folder stops here, before writing
        write_recipe_json(runner.results, args.recipe, args.scale, args.overrides, config)
        # `timeout` (the GPU queue's device command) stops a run with SIGTERM: exit through Python
        # so that the runner stops the trainings it started
        signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
        failed = runner.run()
        if args.pack:
            from ..pipeline.pack import pack
            pack(runner.results, args.pack, packed_run_name(args.recipe, args.scale, config))
    if failed:
        print(f"recipe {args.recipe}: failed or skipped: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"recipe {args.recipe}: done; results in {runner.results}")
    return 0
