"""The hf_translation recipe at toy scale, end to end on a tiny random Marian model with its own
sentencepiece tokenizer (built here, never downloaded): import, binarise, BLEU, statistics in
domain with real token counts, syntactic heads on gold parses, two Michel curves, the L0 encoder
fine-tune and its control, pruning, the report; a re-run skips every step. And masked ≡ pruned
on an imported Marian model."""
import copy
import csv
import json
import os
import re

import pytest
import torch

from core.helpers import reordered_tolerance
from fairseq_heads.checkpoints import load_model_and_task
from fairseq_heads.cli import main
from fairseq_heads.gating.head_masks import apply_head_mask
from fairseq_heads.models.head_layout import head_layout
from hf_translation.helpers import convert, full_lprobs, incremental_lprobs, make_batch
from hf_translation.hf_models import VOCAB
from hf_translation.toy_root import write_toy_root

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("hf_translation_recipe")
    root = write_toy_root(work / "root", sizes=(200, 32, 32))  # (fairseq's batches drop a tail short of 8)
    results = work / "results"
    argv = ["recipe", "hf_translation", "--scale", "toy", "--results", str(results), "--data-root", root]
    status = main(argv)
    return dict(status=status, results=results, argv=argv, root=root)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_toy_recipe_runs_every_step_on_an_imported_marian_model(toy_run):
    results = toy_run["results"]
    assert toy_run["status"] == 0
    steps = read_json(results / "steps.json")
    names = {"baseline", "data", "bleu_baseline", "stats", "syntax_data", "syntax_stats", "curve_grad",
             "curve_confidence", "enc_l0_0.05", "enc_l0_0", "bleu_enc_l0_0.05", "bleu_enc_l0_0",
             "pruned_enc_l0_0.05", "pruned_enc_l0_0", "report"}
    assert {s["step"] for s in steps if s["state"] in ("ran", "done")} == names
    baseline = read_json(results / "results" / "baseline" / "result.json")
    assert baseline["sentences"] == 32 and baseline["kind"] == "baseline"
    assert baseline["layout"]["enc-self"] == [2, 4]
    # rare-word statistics ranked by the binarised training text's tokens, not a dictionary of 0s
    meta = read_json(results / "stats" / "baseline" / "heads.json")["meta"]
    assert meta["rare_counts"]["source"] == "train"
    counts = [int(line.split(" ")[1]) for line in open(results / "data" / "bin" / "dict.en.txt", encoding="utf-8")]
    # (dict.txt has no line for </s>: one a sentence)
    assert sum(counts) + 200 == meta["rare_counts"]["tokens"] and len(set(counts)) > 2
    with open(results / "stats" / "syntax" / "heads.csv", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["type"] == "enc-self"]
    assert len(rows) == 8 and all(r["syntactic_best"] for r in rows)
    for metric in ("grad", "confidence"):
        with open(results / "curves" / metric / "curve.csv", encoding="utf-8") as f:
            assert [int(r["heads_kept"]) for r in csv.DictReader(f)] == [8, 6, 4, 2]
    for name in ("enc_l0_0.05", "enc_l0_0"):
        result = read_json(results / "results" / name / "result.json")
        assert result["kind"] == "encoder_l0" and result["sentences"] == 32
        assert os.path.isfile(results / "models" / f"pruned_{name}" / "checkpoint.pt")
    assert "Encoder heads" in (results / "tables.md").read_text(encoding="utf-8")


def test_toy_recipe_rerun_skips_every_step(toy_run, capsys):
    assert toy_run["status"] == 0
    capsys.readouterr()
    assert main(toy_run["argv"]) == 0
    out = capsys.readouterr().out
    assert sorted(re.findall(r"^skip (\S+) \(done\)$", out, re.M)) == sorted(
        s["step"] for s in read_json(toy_run["results"] / "steps.json")), out


def test_recipe_without_a_model_folder_exits_2_before_any_step(tmp_path, capsys):
    assert main(["recipe", "hf_translation", "--scale", "cpu", "--results", str(tmp_path / "r"),
                 "--data-root", str(tmp_path)]) == 2
    assert "--set hf.path=MODEL_DIR" in capsys.readouterr().err
    assert main(["recipe", "hf_translation", "--scale", "toy", "--results", str(tmp_path / "r"),
                 "--data-root", str(tmp_path)]) == 2
    assert "config.json not found" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels
def test_masked_equals_pruned_on_an_imported_marian_model(tmp_path):
    converted = convert("marian", tmp_path)
    scores = tmp_path / "heads.csv"
    g = torch.Generator().manual_seed(3)
    with open(scores, "w", encoding="utf-8") as f:
        f.write("type,layer,head,confidence\n")
        for attention_type in ("enc-self", "dec-self", "enc-dec"):
            for layer in range(2):
                for head in range(4):
                    f.write(f"{attention_type},{layer},{head},{float(torch.rand(1, generator=g)):.6f}\n")
    pruned_path = tmp_path / "pruned.pt"
    assert main(["prune", "--path", os.path.join(converted.out_dir, "checkpoint.pt"), "--out", str(pruned_path),
                 "--from-importance", str(scores), "--metric", "confidence", "--keep", "3", "--per-type"]) == 0
    pruned, _ = load_model_and_task(str(pruned_path), {"data": converted.out_dir})
    pruned.eval()
    layout = head_layout(pruned)
    assert all(sum(map(len, layout[t])) == 3 for t in ("enc-self", "dec-self", "enc-dec"))
    mask = {t: torch.tensor([[h in kept for h in range(4)] for kept in layout[t]]) for t in layout}
    masked = apply_head_mask(copy.deepcopy(converted.model), mask).eval()
    batch = make_batch(converted)
    # a mask's closed head contributes exactly nothing: the same sums in another order, within the
    # rounding bound of the widest (the log-sum-exp over VOCAB words) at the log-probs' scale:
    # 2.5e-4, measured 1e-5; the complementary mask moves them by 28. Over the words HF has
    # (target_index): fairseq's extra <s> sits at ~-1e4, where one ulp is 1e-3.
    index = converted.target_index()
    reference = full_lprobs(pruned, batch)[..., index]
    tolerance = reordered_tolerance(reference, widest_sum=VOCAB)
    assert (full_lprobs(masked, batch)[..., index] - reference).abs().max() <= tolerance
    incremental = incremental_lprobs(pruned, batch)[..., index]
    assert (incremental_lprobs(masked, batch)[..., index] - incremental).abs().max() <= tolerance
