"""One translation model's result file: BLEU (fairseq-generate output scored by sacreBLEU) and
which heads it kept.

    {"name": "all_l0_0.05", "kind": "all_l0", "l0_lambda": 0.05, "from_model": null,
     "checkpoint": "models/all_l0_0.05/checkpoint.pt",   # relative to the results folder
     "subset": "test",
     "bleu": 31.2, "sacrebleu_signature": "nrefs:1|case:mixed|...", "sacrebleu": "BLEU = 31.20 ...",
     "fairseq_bleu_line": "Generate test with beam=5: BLEU = ...", "sentences": 1000,
     "updates": 1000,                                     # training updates of the checkpoint
     "heads_source": "gates" | "head_mask" | "all",
     "layout": {"enc-self": [6, 8], ...},                 # (layers, heads per layer)
     "heads_kept": {"enc-self": 17, ...}, "heads_total": {"enc-self": 48, ...},
     "kept": {"enc-self": [[1, 0, ...], ...], ...},       # per layer, per head
     "p_open": {"enc-self": [[0.98, 0.01, ...], ...]},    # gated types only
     "gate_lr_scale": 1000,                               # of a gate_adam training, else null
     # written by `fairseq-heads result --protocol/--seed/--phase` (the recipes' steps):
     "protocol": "converged" | "quick" | null,            # null: an older file, read as quick
     "seed": 1,                                           # trained with (a converged model: its fine-tune's)
     "baseline_seed": 1,                                  # of the baseline it comes from (layout.py)
     "metric": "grad",                                    # a heuristic model's importance metric
     "training": {"phases": {"l0": {"updates": 900, "validations": 9, "best_update": 900,
                                    "best_loss": 4.61, "open_heads": 70,
                                    "converged_at": 900, "rule": "5 consecutive ..."},
                             "fixed_mask": {"updates": 1400, "best_update": 900, ...}},
                  "updates": 2300} | null}                # updates run, summed over the phases
"""
import json
import os
import re
from typing import Dict, List, Optional, Tuple

from ..heads import ATTENTION_TYPES
from .layout import RESULTS

_LINE = re.compile(r"^(?P<tag>[TD])-(?P<id>\d+)\t(?P<rest>.*)$")


class ResultError(ValueError):
    pass


def parse_generate_output(text: str) -> Tuple[List[str], List[str], Optional[str]]:
    """(hypotheses, references, fairseq's own BLEU line) from fairseq-generate's stdout.

    Hypotheses are the D- lines (detokenised, after --remove-bpe), references the T- lines,
    both in sentence-id order (fairseq prints them in batch order)."""
    hypotheses: Dict[int, str] = {}
    references: Dict[int, str] = {}
    bleu_line = None
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            if match.group("tag") == "T":
                references[int(match.group("id"))] = match.group("rest")
            else:  # D-<id> \t score \t text
                hypotheses[int(match.group("id"))] = match.group("rest").split("\t", 1)[-1]
        elif line.startswith("Generate ") and "BLEU" in line:
            bleu_line = line.strip()
    if not hypotheses:
        raise ResultError("no D- (hypothesis) lines in the fairseq-generate output")
    if set(hypotheses) != set(references):
        raise ResultError(f"fairseq-generate output: {len(hypotheses)} hypotheses but "
                          f"{len(references)} references (run it with a target side)")
    ids = sorted(hypotheses)
    return [hypotheses[i] for i in ids], [references[i] for i in ids], bleu_line


def sacrebleu_score(hypotheses: List[str], references: List[str]) -> Tuple[float, str, str]:
    """(BLEU, signature, full score string) by sacreBLEU's defaults (13a tokenisation)."""
    from ..bleu import scored

    score, signature, text = scored(hypotheses, references)
    return round(score, 2), signature, text


def _field(obj, name):
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def checkpoint_layout(state: dict) -> Dict[str, List[int]]:
    """{attention type: [layers, heads per layer]} from the checkpoint's model options."""
    from ..checkpoints import model_args

    args = model_args(state)
    enc_layers, enc_heads = _field(args, "encoder_layers"), _field(args, "encoder_attention_heads")
    dec_layers, dec_heads = _field(args, "decoder_layers"), _field(args, "decoder_attention_heads")
    if None in (enc_layers, enc_heads, dec_layers, dec_heads):
        raise ResultError("checkpoint options lack encoder/decoder layers or attention heads")
    return {"enc-self": [enc_layers, enc_heads], "dec-self": [dec_layers, dec_heads],
            "enc-dec": [dec_layers, dec_heads]}


def kept_heads(state: dict, head_mask: Optional[dict] = None):
    """(source, kept {type: [[0/1]]}, p_open {type: [[p]]}) for a checkpoint.

    A model trained with a fixed head mask kept exactly the mask's heads (its gates are fixed,
    their log-alphas mean nothing); otherwise gated types keep the heads whose deterministic
    gate is > 0 (the rule of `head_mask_from_gates`), ungated types keep every head."""
    from ..gating.gate_table import gate_rows

    layout = checkpoint_layout(state)
    kept = {t: [[1] * heads for _ in range(layers)] for t, (layers, heads) in layout.items()}
    p_open: Dict[str, List[List[float]]] = {}
    if head_mask is not None:
        for attention_type, rows in head_mask.items():
            if [len(rows), len(rows[0])] != layout[attention_type]:
                raise ResultError(f"head mask {attention_type} is {len(rows)}x{len(rows[0])}, the "
                                  f"model has {layout[attention_type]}")
            kept[attention_type] = [[int(v) for v in row] for row in rows]
        return "head_mask", kept, p_open
    rows = gate_rows(state)
    for row in rows:
        layers, heads = layout[row.attention_type]
        table = p_open.setdefault(row.attention_type, [[float("nan")] * heads for _ in range(layers)])
        table[row.layer][row.head] = round(row.p_open, 5)
        kept[row.attention_type][row.layer][row.head] = int(row.kept)
    return ("gates" if rows else "all"), kept, p_open


def build_model_result(name: str, kind: str, checkpoint: str, generate_output: str,
                       subset: str = "test", l0_lambda: Optional[float] = None,
                       from_model: Optional[str] = None, head_mask_file: Optional[str] = None,
                       results_dir: Optional[str] = None) -> dict:
    """The result-file dict of one model (see the module docstring); paths are relative to
    `results_dir` (default: the current folder), so the file names no machine's folders."""
    from ..checkpoints import load_checkpoint, trained_head_mask_file
    from ..gating.head_masks import head_mask_to_json, load_head_mask
    from .layout import KINDS

    if kind not in KINDS:
        raise ResultError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not os.path.isfile(checkpoint):
        raise ResultError(f"checkpoint not found: {checkpoint}")
    with open(generate_output, encoding="utf-8") as f:
        hypotheses, references, fairseq_line = parse_generate_output(f.read())
    bleu, signature, score_string = sacrebleu_score(hypotheses, references)
    state = load_checkpoint(checkpoint)
    head_mask_file = head_mask_file or trained_head_mask_file(state)
    mask = head_mask_to_json(load_head_mask(head_mask_file)) if head_mask_file else None
    source, kept, p_open = kept_heads(state, mask)
    layout = checkpoint_layout(state)
    history = state.get("optimizer_history") or [{}]
    optimizer = _field(state.get("cfg"), "optimizer") or state.get("args")
    return {
        "name": name, "kind": kind, "l0_lambda": l0_lambda, "from_model": from_model,
        "checkpoint": _relative(checkpoint, results_dir), "subset": subset,
        "bleu": bleu, "sacrebleu_signature": signature, "sacrebleu": score_string,
        "fairseq_bleu_line": fairseq_line, "sentences": len(hypotheses),
        "updates": history[-1].get("num_updates"),
        "heads_source": source,
        "head_mask": _relative(head_mask_file, results_dir) if head_mask_file else None,
        "layout": layout,
        "heads_kept": {t: sum(map(sum, kept[t])) for t in ATTENTION_TYPES},
        "heads_total": {t: layout[t][0] * layout[t][1] for t in ATTENTION_TYPES},
        "kept": kept,
        "p_open": {t: [[None if v != v else v for v in row] for row in rows]
                   for t, rows in p_open.items()},
        "gate_lr_scale": _field(optimizer, "gate_lr_scale"),
    }


def _relative(path: str, results_dir: Optional[str]) -> str:
    return os.path.relpath(os.path.abspath(path), os.path.abspath(results_dir or os.curdir))


def results_dir_of(result_file: str) -> str:
    """The results folder of RESULTS/results/<model>/result.json (layout.py); for a result file
    elsewhere, its own folder."""
    model_dir = os.path.dirname(os.path.abspath(result_file))
    if os.path.basename(os.path.dirname(model_dir)) == RESULTS:
        return os.path.dirname(os.path.dirname(model_dir))
    return model_dir


def write_model_result(result: dict, path: str) -> None:
    from ..files import write_text_atomic

    write_text_atomic(path, json.dumps(result, indent=1, allow_nan=False) + "\n")
