"""Writes the model settings the report reads (layout.py, "a model's settings") into a results
folder from before the recipes recorded them: "baseline_seed" (and a heuristic model's
"metric") into each result file, and layout.PHASE_SETTINGS into each converged L0 phase's
folder. Those settings were then only in the models' names, which this module alone still reads,
by the naming rules the recipes had (pipeline/nmt.py, nmt_converged.py, lm_converged.py):

    <enc|all>_l0_<λ>_conv_s<seed>[_glr<scale>][_s<baseline seed>]   a converged L0 model
    <model>_l0                    its L0 phase      scratch_<model>, michel_<metric>_as_<model>
    l0_<λ>_conv_s<seed>[_s<baseline seed>]          a converged language model

A model of another protocol trained with its baseline's seed, which its "seed" already records.
Run once per folder; it changes no number (docs/results were migrated so, and `fairseq-heads
report` wrote the same tables.md before and after):

    python -m fairseq_heads.report.settings_migration RESULTS_DIR [RESULTS_DIR ...]
"""
import glob
import json
import os
import re
import sys
from typing import List, Optional

from ..files import write_text_atomic
from . import layout

_BASELINE_SUFFIX = re.compile(r"_conv_s[0-9]+(?:_glr[0-9.eE+-]+)?_s(?P<baseline_seed>[0-9]+)$")
_CONVERGED_L0 = re.compile(r"^(?P<side>enc|all)_l0_(?P<l0_lambda>[0-9.eE+-]+)_conv_s(?P<seed>[0-9]+)"
                           r"(?:_glr(?P<gate_lr_scale>[0-9.eE+-]+))?(?:_s(?P<baseline_seed>[0-9]+))?$")
_HEURISTIC = re.compile(r"^michel_(?P<metric>.+?)_as_")


def legacy_baseline_seed(result: dict) -> int:
    """The baseline seed of a result file written before the field: a converged model's from the
    `_s<N>` its name (or its from-model's) ends with, 1 without one; any other's its own seed."""
    if layout.protocol_of(result) != layout.CONVERGED or result.get("kind") == layout.BASELINE:
        return result.get("seed") or 1
    match = _BASELINE_SUFFIX.search(result["name"])
    return int(match["baseline_seed"]) if match else 1


def migrate_result(result: dict) -> Optional[dict]:
    """The result dict with the settings it lacks, "baseline_seed" right after "seed"; None if
    it has them all."""
    added = {}
    if "baseline_seed" not in result:
        added["baseline_seed"] = legacy_baseline_seed(result)
    if result.get("kind") == layout.HEURISTIC and "metric" not in result:
        match = _HEURISTIC.match(result["name"])
        added["metric"] = match["metric"] if match else None
    if not added:
        return None
    migrated = {}
    for key, value in result.items():
        migrated[key] = value
        if key == "seed":
            migrated.update(added)
    migrated.update(added)  # no "seed" field: at the end
    return migrated


def legacy_phase_settings(name: str, default_scale: Optional[float]) -> Optional[dict]:
    """The settings file of the L0 phase of the converged model NAME (its folder: NAME_l0), or
    None for a name the translation recipe did not give a converged L0 model. Its gate lr scale is
    the one the name records (`_glr<scale>`), else DEFAULT_SCALE (the recipe's)."""
    match = _CONVERGED_L0.match(name)
    if match is None:
        return None
    try:
        l0_lambda = float(match["l0_lambda"])
        scale = default_scale if match["gate_lr_scale"] is None else float(match["gate_lr_scale"])
    except ValueError:
        return None
    return {"name": name, "kind": layout.ENCODER_L0 if match["side"] == "enc" else layout.ALL_L0,
            "l0_lambda": l0_lambda, "protocol": layout.CONVERGED, "seed": int(match["seed"]),
            "baseline_seed": int(match["baseline_seed"] or 1), "gate_lr_scale": scale, "phase": "l0"}


def migrate_folder(results_dir: str) -> List[str]:
    """Migrate one results folder in place; the files written, relative to it."""
    written = []
    results = []
    for path in sorted(glob.glob(os.path.join(results_dir, layout.RESULTS, "*", layout.RESULT_FILE))):
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        results.append(result)
        migrated = migrate_result(result)
        if migrated is not None:
            write_text_atomic(path, json.dumps(migrated, indent=1, allow_nan=False) + "\n")
            written.append(os.path.relpath(path, results_dir))
    # a name without _glr<scale> trained at the recipe's scale: the one most converged result
    # files of such names record
    scales = [r.get("gate_lr_scale") for r in results if layout.protocol_of(r) == layout.CONVERGED
              and "_glr" not in r["name"] and r.get("gate_lr_scale") is not None]
    default_scale = max(set(scales), key=scales.count) if scales else None
    suffix = "_l0"
    for folder in sorted(glob.glob(os.path.join(results_dir, layout.MODELS, "*" + suffix))):
        path = os.path.join(folder, layout.PHASE_SETTINGS)
        settings = legacy_phase_settings(os.path.basename(folder)[:-len(suffix)], default_scale)
        if settings is not None and not os.path.exists(path):
            write_text_atomic(path, json.dumps(settings, indent=1) + "\n")
            written.append(os.path.relpath(path, results_dir))
    return written


def main(argv: Optional[List[str]] = None) -> int:
    folders = sys.argv[1:] if argv is None else argv
    if not folders:
        print("usage: python -m fairseq_heads.report.settings_migration RESULTS_DIR [RESULTS_DIR ...]",
              file=sys.stderr)
        return 2
    for folder in folders:
        if not os.path.isdir(os.path.join(folder, layout.RESULTS)):
            print(f"{folder}: not a results folder (no {layout.RESULTS}/)", file=sys.stderr)
            return 2
    for folder in folders:
        written = migrate_folder(folder)
        print(f"{folder}: {len(written)} files written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
