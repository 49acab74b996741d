"""`fairseq-heads carry pack RESULTS DEST` / `carry unpack DEST RESULTS`: a results folder's
unfinished trainings and finished steps in a compact form to commit, and laid out again on another
machine, where `fairseq-heads recipe` (the same recipe and `--set`s, which DEST/carry.json records)
resumes the trainings and skips the finished steps.

    fairseq-heads carry pack work/recipes/europarl_en_it_cpu carry/europarl_en_it_cpu
    # another machine, the same repository:
    fairseq-heads recipe europarl_en_it --scale cpu --set train.seed=2 --results R --only data
    fairseq-heads carry unpack carry/europarl_en_it_cpu R
    fairseq-heads recipe europarl_en_it --scale cpu --set train.seed=2 --results R --only baseline_s2

Argument parsing and wiring only; the work is in `fairseq_heads.pipeline.carry`.
"""
import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    pack = actions.add_parser("pack", help="RESULTS' unfinished trainings and finished steps -> DEST (replaced whole)")
    pack.add_argument("results", metavar="RESULTS", help="a recipe's results folder (no run may hold it)")
    pack.add_argument("dest", metavar="DEST", help="the carried form, e.g. carry/NAME")
    unpack = actions.add_parser("unpack", help="DEST -> RESULTS' models/*.partial (to resume) and finished steps")
    unpack.add_argument("dest", metavar="DEST", help="a folder written by `carry pack`")
    unpack.add_argument("results", metavar="RESULTS",
                        help="a results folder of the same recipe whose inputs (the data step) are done")


def _steps_and_keys(recorded: dict, source: str):
    from ..pipeline.recipe_json import recorded_config
    from ..pipeline.recipes import recipe_steps
    from ..pipeline.runner import compute_keys
    from .recipe import default_data_root
    from .. import __file__ as package_file

    config = recorded_config(recorded, source)[3]
    steps = recipe_steps(config, default_data_root(), os.path.dirname(os.path.abspath(package_file)))
    return steps, compute_keys(steps)


def run(args) -> int:
    from ..pipeline.carry import CARRY_FILE, pack_carry, read_carry, unpack_carry
    from ..pipeline.folder_lock import folder_lock
    from ..pipeline.recipe_json import RECIPE_JSON, read_recipe_json

    if args.action == "pack":
        recorded = read_recipe_json(args.results)
        steps, keys = _steps_and_keys(recorded, os.path.join(args.results, RECIPE_JSON))
        with folder_lock(args.results):  # no training may write a checkpoint while it is read
            record = pack_carry(args.results, args.dest, steps, keys,
                                {k: recorded[k] for k in ("recipe", "scale", "overrides")})
        for name, step in record["steps"].items():
            print(f"carried {name}: update {step['num_updates']}, epoch {step['epoch']} -> {args.dest}")
        for name in record["done"]:
            print(f"carried {name}: finished -> {args.dest}")
        return 0
    record = read_carry(args.dest)
    steps, keys = _steps_and_keys(record["invocation"], os.path.join(args.dest, CARRY_FILE))
    with folder_lock(args.results):
        carried = unpack_carry(args.dest, args.results, keys)
    invocation = record["invocation"]
    sets = "".join(f" --set {o}" for o in invocation["overrides"])
    for name in carried["done"]:
        print(f"laid out {name} (finished) in {args.results}")
    for name, step in carried["steps"].items():
        print(f"laid out {name} (update {step['num_updates']}) in {args.results}; resume it with "
              f"`fairseq-heads recipe {invocation['recipe']} --scale {invocation['scale']}{sets} "
              f"--results {args.results} --only {name}`")
    return 0
