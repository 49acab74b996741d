"""Hand-made result folders for the report tests: 2 layers x 2 heads per attention type."""
import csv
import json
import os

TYPES = ("enc-self", "dec-self", "enc-dec")
LAYOUT = {t: [2, 2] for t in TYPES}


def model_result(name, kind, bleu, kept, l0_lambda=None, from_model=None):
    """A result.json dict; kept = {type: [[0/1, 0/1], [0/1, 0/1]]} (missing types: all kept)."""
    kept = {t: kept.get(t, [[1, 1], [1, 1]]) for t in TYPES}
    return {"name": name, "kind": kind, "l0_lambda": l0_lambda, "from_model": from_model,
            "checkpoint": f"/x/{name}.pt", "subset": "test", "bleu": bleu,
            "sacrebleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
            "sacrebleu": f"BLEU = {bleu}", "fairseq_bleu_line": None, "sentences": 10,
            "heads_source": "gates", "head_mask": None, "layout": LAYOUT,
            "heads_kept": {t: sum(map(sum, kept[t])) for t in TYPES},
            "heads_total": {t: 4 for t in TYPES}, "kept": kept, "p_open": {}}


# The story the hand-made files tell (the tests check the report tells it back):
# encoder-only: lambda 0.1 keeps 3 encoder heads (BLEU 30), lambda 1 keeps 1 (BLEU 20);
# all types: lambda 0.1 closes one dec-self head; lambda 1 closes both enc-dec heads of layer 0
# and 3 dec-self heads; from scratch those layouts give 27.5 and 15.
RESULTS = [
    model_result("baseline", "baseline", 32.0, {}),
    model_result("enc_l0_0.1", "encoder_l0", 30.0, {"enc-self": [[1, 1], [0, 1]]}, 0.1),
    model_result("enc_l0_1", "encoder_l0", 20.0, {"enc-self": [[1, 0], [0, 0]]}, 1.0),
    model_result("all_l0_0.1", "all_l0", 29.0, {"dec-self": [[1, 1], [1, 0]]}, 0.1),
    model_result("all_l0_1", "all_l0", 18.0, {"dec-self": [[0, 1], [0, 0]], "enc-dec": [[0, 0], [1, 1]]}, 1.0),
    model_result("scratch_all_l0_0.1", "from_scratch", 27.5, {"dec-self": [[1, 1], [1, 0]]}, 0.1, "all_l0_0.1"),
    model_result("scratch_all_l0_1", "from_scratch", 15.0,
                 {"dec-self": [[0, 1], [0, 0]], "enc-dec": [[0, 0], [1, 1]]}, 1.0, "all_l0_1"),
]

# enc-self 0/0 positional(-1), 0/1 rare, 1/0 syntactic + positional, 1/1 nothing.
HEADS = [
    {"type": "enc-self", "layer": "0", "head": "0", "labels": "positional(-1)", "positional_share": "0.95",
     "rare_share": "0.1", "syntactic_best": "nsubj,dep->head", "syntactic_best_gain": "0.01",
     "syntactic_nsubj_dep2head": "0.40", "syntactic_nsubj_dep2head_baseline": "0.39"},
    {"type": "enc-self", "layer": "0", "head": "1", "labels": "rare", "positional_share": "0.3",
     "rare_share": "0.7", "syntactic_best": "nsubj,dep->head", "syntactic_best_gain": "0.02",
     "syntactic_nsubj_dep2head": "0.41", "syntactic_nsubj_dep2head_baseline": "0.39"},
    {"type": "enc-self", "layer": "1", "head": "0", "labels": "syntactic(nsubj,dep->head);positional(1)",
     "positional_share": "0.92", "rare_share": "0.0", "syntactic_best": "nsubj,dep->head",
     "syntactic_best_gain": "0.31", "syntactic_nsubj_dep2head": "0.70",
     "syntactic_nsubj_dep2head_baseline": "0.39"},
    {"type": "enc-self", "layer": "1", "head": "1", "labels": "", "positional_share": "0.2",
     "rare_share": "0.1", "syntactic_best": "", "syntactic_best_gain": "",
     "syntactic_nsubj_dep2head": "", "syntactic_nsubj_dep2head_baseline": "0.39"},
]

AGREEMENT = {"enc-self": {"lrp~grad": {"spearman": 0.8, "ci_low": 0.5, "ci_high": 0.95,
                                        "num_heads": 4, "num_replicates": 20, "metrics": ["lrp", "grad"]}}}

CURVE = [{"heads_removed": "0", "heads_kept": "4", "bleu": "32.00"},
         {"heads_removed": "2", "heads_kept": "2", "bleu": "25.00"},
         {"heads_removed": "3", "heads_kept": "1", "bleu": "12.00"}]


def trace_records():
    """all_l0_1: dec-self 0/0 dies between update 5 and 10; the others stay open."""
    records = []
    for update in (0, 5, 10):
        heads = []
        for t in TYPES:
            for layer in range(2):
                for head in range(2):
                    dying = (t, layer, head) == ("dec-self", 0, 0)
                    p = {0: 0.99, 5: 0.6, 10: 0.05}[update] if dying else 0.99
                    heads.append({"type": t, "layer": layer, "head": head, "log_alpha": 0.0,
                                  "p_open": p, "open": int(p > 0.5)})
        records.append({"update": update, "heads": heads})
    return records


def write_results_dir(root, with_stats=True, with_curve=True, with_trace=True, results=RESULTS):
    for result in results:
        folder = os.path.join(root, "results", result["name"])
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "result.json"), "w") as f:
            json.dump(result, f)
    if with_stats:
        stats = os.path.join(root, "stats", "baseline")
        os.makedirs(stats)
        columns = list(HEADS[0])
        with open(os.path.join(stats, "heads.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(HEADS)
        with open(os.path.join(stats, "agreement.json"), "w") as f:
            json.dump(AGREEMENT, f)
    if with_curve:
        os.makedirs(os.path.join(root, "curve"))
        with open(os.path.join(root, "curve", "curve.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, list(CURVE[0]))
            writer.writeheader()
            writer.writerows(CURVE)
    if with_trace:
        folder = os.path.join(root, "models", "all_l0_1")
        os.makedirs(folder)
        with open(os.path.join(folder, "gate_trace.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in trace_records())
    return root
