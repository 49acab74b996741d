"""Reading a recipe's results folder (layout.py) for the report: every result file, the
baseline's head statistics, the curves, gate traces (also of L0 phases without a result yet) and
fairseq-generate translations, plain or archived (.gz, as under docs/results)."""
import csv
import glob
import gzip
import json
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

from ..stats.table import merge_head_statistics, read_csv_rows
from . import layout
from .model_result import ResultError, parse_generate_output


class Inputs(NamedTuple):
    results: List[dict]
    heads: Optional[List[Dict[str, str]]]
    agreement: Optional[dict]
    curve: Optional[List[Dict[str, str]]]
    traces: Dict[str, str]  # model name -> gate-trace path
    results_dir: str
    translations: Dict[str, Tuple[List[str], List[str]]]  # model name -> (hypotheses, references)
    # converged models with a finished L0 phase but no result file yet: their settings (from
    # the phase's layout.PHASE_SETTINGS) and phase "l0"; traces has their L0 trace
    l0_phases: List[dict] = []
    # the curves of curves/<metric>/curve.csv, one per importance metric, by metric
    curves: Dict[str, List[Dict[str, str]]] = {}
    # the decoding speed of pruned models, speed/<model>/decode_speed.json, by model
    decode_speeds: Dict[str, dict] = {}
    # the baseline's statistics of `heads` computed on the parsed set too (stats/parsed_set)
    parsed_set_heads: Optional[List[Dict[str, str]]] = None


def read_csv(path: str) -> List[Dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _open_text(path: str):
    return (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8")


def archived_copy(path: str) -> Optional[str]:
    """path, or path.gz (an archived copy, as under docs/results), whichever exists first."""
    for candidate in (path, path + ".gz"):
        if os.path.isfile(candidate) and os.path.getsize(candidate) > 0:
            return candidate
    return None


def read_trace(path: str) -> List[dict]:
    with _open_text(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_inputs(results_dir: str) -> Inputs:
    """Every result file, the baseline's stats, the curve, gate traces and translations of a
    results folder."""
    results = []
    for path in sorted(glob.glob(os.path.join(results_dir, layout.RESULTS, "*", layout.RESULT_FILE))):
        with open(path, encoding="utf-8") as f:
            results.append(json.load(f))
    stats = os.path.join(results_dir, layout.BASELINE_STATS)
    heads_csv = os.path.join(stats, layout.HEADS_CSV)
    agreement_json = os.path.join(stats, layout.AGREEMENT_JSON)
    curve_csv = os.path.join(results_dir, layout.CURVE_CSV)
    agreement = None
    if os.path.isfile(agreement_json):
        with open(agreement_json, encoding="utf-8") as f:
            agreement = json.load(f)
    traces, translations = {}, {}
    for result in results:
        trace = archived_copy(os.path.join(results_dir, layout.MODELS, result["name"], layout.GATE_TRACE))
        if trace:
            traces[result["name"]] = trace
        generated = archived_copy(os.path.join(results_dir, layout.RESULTS, result["name"], layout.GENERATE_OUTPUT))
        if generated:
            with _open_text(generated) as f:
                try:
                    hypotheses, references, _ = parse_generate_output(f.read())
                except ResultError as error:
                    raise ResultError(f"{generated}: {error}") from None
            translations[result["name"]] = (hypotheses, references)
    l0_phases = unfinished_l0_phases(results_dir, results)
    for phase in l0_phases:
        traces[phase["name"]] = phase.pop("trace")
    curves = {os.path.basename(os.path.dirname(path)): read_csv(path)
              for path in sorted(glob.glob(os.path.join(results_dir, layout.CURVES, "*", "curve.csv")))}
    heads = read_csv_rows(heads_csv) if os.path.isfile(heads_csv) else None
    syntax_csv = os.path.join(results_dir, layout.SYNTAX_STATS, layout.HEADS_CSV)
    if heads is not None and os.path.isfile(syntax_csv):
        heads = merge_head_statistics(heads, read_csv_rows(syntax_csv))
    parsed_set_csv = os.path.join(results_dir, layout.PARSED_SET_STATS, layout.HEADS_CSV)
    parsed_set_heads = read_csv_rows(parsed_set_csv) if os.path.isfile(parsed_set_csv) else None
    curve = read_csv(curve_csv) if os.path.isfile(curve_csv) else next(iter(curves.values()), None)
    speeds = {}
    for path in sorted(glob.glob(os.path.join(results_dir, layout.SPEED, "*", layout.DECODE_SPEED_JSON))):
        with open(path, encoding="utf-8") as f:
            speeds[os.path.basename(os.path.dirname(path))] = json.load(f)
    return Inputs(results, heads, agreement, curve, traces, results_dir, translations, l0_phases, curves, speeds,
                  parsed_set_heads)


def unfinished_l0_phases(results_dir: str, results: List[dict]) -> List[dict]:
    """The L0 phases of converged models that have no result file yet, with their gate traces
    ("trace"): the heads-dying figure need not wait for the fixed-mask phase and BLEU. A phase is
    a folder models/*/ whose settings file (layout.PHASE_SETTINGS, written by the phase's step)
    says "phase": "l0" and names its model; one still running (its step's models/*.partial/, or
    one a session's end cut short) is drawn too, as "l0-running", up to its last record."""
    named = {r["name"] for r in results}
    phases = {}
    for state, pattern in (("l0-running", "*.partial"), ("l0", "*")):
        for path in sorted(glob.glob(os.path.join(results_dir, layout.MODELS, pattern, layout.PHASE_SETTINGS))):
            folder = os.path.dirname(path)
            if state == "l0" and folder.endswith(".partial"):
                continue
            with open(path, encoding="utf-8") as f:
                settings = json.load(f)
            trace = archived_copy(os.path.join(folder, layout.GATE_TRACE))
            if settings.get("phase") != "l0" or settings["name"] in named or trace is None:
                continue
            phases[settings["name"]] = dict(settings, phase=state, trace=trace)  # a finished phase wins
    return [phases[name] for name in sorted(phases)]
