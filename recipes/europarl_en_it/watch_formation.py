"""Follow a running `europarl_en_it --scale cpu` baseline: compute the formation curve's point of each
interval checkpoint as it appears (fairseq_heads/pipeline/formation.py), and redraw the table and
figure after each, until the baseline step has finished and every point is done (with --once:
the points due now, then exit; a stopped session's last ones). The recipe's `formation` step
reuses the points (the same folder), so nothing is computed twice. The config, and so the
baseline's name (`baseline_s2` for `--set train.seed=2`), is the one RESULTS/recipe.json records.

    python recipes/europarl_en_it/watch_formation.py RESULTS [--every 1] [--poll 120] [--once]
"""
import argparse
import os
import sys
import time

from fairseq_heads.pipeline.formation import POINTS_FOLDER, formation_points, formation_settings, write_formation
from fairseq_heads.pipeline.nmt import seed_suffix
from fairseq_heads.pipeline.recipe_json import read_recipe_json, recorded_config
from fairseq_heads.report.formation import formation_markdown, formation_rows, formation_verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--poll", type=float, default=120.0)
    parser.add_argument("--once", action="store_true", help="compute the points due now, then exit")
    args = parser.parse_args()
    results = os.path.abspath(args.results)
    try:
        config = recorded_config(read_recipe_json(results))[3]
    except ValueError as error:
        print(f"watch_formation: error: {error}", file=sys.stderr)
        return 2
    s = seed_suffix(config)
    settings = formation_settings(config)
    parsed = os.path.join(results, "syntax_data", "bin")
    parsed_set = (parsed, os.path.join(parsed, "test.conllu.gz"))
    points = os.path.join(results, POINTS_FOLDER + s)
    while True:
        finished = os.path.isdir(os.path.join(results, "models", f"baseline{s}"))
        folder = os.path.join(results, "models", f"baseline{s}" + ("" if finished else ".partial"))
        done = formation_points(folder, points, os.path.join(results, "data", "bin"), parsed_set, settings,
                                os.path.join(results, "logs", f"baseline{s}.log"), every=args.every)
        if done:  # the step's own folder is written by the step: this one is the watcher's
            write_formation(points, os.path.join(results, f"formation_watch{s}"))
            rows = formation_rows(points)
            print(formation_markdown(rows) + "\n" + formation_verdict(rows), flush=True)
        if finished or args.once:
            return 0
        time.sleep(args.poll)


if __name__ == "__main__":
    sys.exit(main())
