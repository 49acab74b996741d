"""`fairseq-heads prune` and `curve`: pruned checkpoints work in fairseq's CLIs; bad requests fail cleanly."""
import copy
import csv
import os

import pytest
import torch
from fairseq import checkpoint_utils

from fairseq_heads.cli import main
from fairseq_heads.checkpoints import load_checkpoint
from fairseq_heads.gating.head_masks import apply_head_mask
from fairseq_heads.models.gated_transformer import GatedTransformerModel
from fairseq_heads.pruning import head_layout
from fairseq_heads.checkpoints import model_options as checkpoint_model_options
from fairseq_heads.pruning.checkpoint import build_model_from_state
from fairseq_heads.pruning.curve import corpus_bleu, translate

from core.helpers import TINY_WIDEST_SUM, USER_DIR, random_batch, reordered_tolerance, run_cli

from .conftest import TARGET


def load(checkpoint, data_bin):
    [model], _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data_bin)})
    return model.eval(), task


def write_scores(path, heads_per_type, metric="confidence", layers=2, heads=4):
    """Scores that rank heads by a fixed permutation (lowest first: enc-self 0:0, ...)."""
    generator = torch.Generator().manual_seed(0)
    values = torch.randperm(layers * heads * len(heads_per_type), generator=generator).tolist()
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["type", "layer", "head", metric, "n"])
        for t in heads_per_type:
            for layer in range(layers):
                for head in range(heads):
                    writer.writerow([t, layer, head, values.pop() / 10, 100])
    return str(path)


def hypotheses(stdout):
    """{sentence id: (score, tokens)} from fairseq-generate's H- lines."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("H-"):
            key, score, text = line.split("\t")
            out[int(key[2:])] = (float(score), text)
    return out


def test_from_gates_round_trips_through_fairseq_generate(target_run, toy_data_bin, tmp_path, capsys):
    checkpoint, _ = target_run
    pruned = tmp_path / "pruned.pt"
    assert main(["prune", "--path", str(checkpoint), "--out", str(pruned), "--from-gates"]) == 0
    printed = capsys.readouterr().out
    assert "parameters:" in printed and "layer 1:" in printed
    common = [str(toy_data_bin.data_bin), "--user-dir", USER_DIR, "-s", "src", "-t", "tgt", "--cpu",
              "--gen-subset", "valid", "--beam", "3", "--batch-size", "50", "--remove-bpe", "sentencepiece"]
    outputs = {}
    for name, path in (("unpruned", checkpoint), ("pruned", pruned)):
        process = run_cli(["fairseq-generate", *common, "--path", str(path)])
        assert process.returncode == 0, process.stderr[-3000:]
        outputs[name] = hypotheses(process.stdout)
    assert sorted(outputs["pruned"]) == sorted(outputs["unpruned"]) and len(outputs["pruned"]) >= 90
    for i, (score, text) in outputs["unpruned"].items():
        assert outputs["pruned"][i][1] == text
        assert abs(outputs["pruned"][i][0] - score) <= 1e-4
    model, _ = load(pruned, toy_data_bin.data_bin)
    assert sum(len(kept) for rows in head_layout(model).values() for kept in rows) == TARGET
    # the layout fixes the count now: no target for fairseq-validate's criterion to re-impose
    assert load_checkpoint(str(pruned))["cfg"]["criterion"]["target_heads"] is None


def test_plain_transformer_from_importance_becomes_a_smaller_gated_transformer(
        plain_checkpoint, toy_data_bin, tmp_path, capsys):
    scores = write_scores(tmp_path / "heads.csv", ["enc-self", "enc-dec"])
    pruned = tmp_path / "pruned.pt"
    assert main(["prune", "--path", str(plain_checkpoint), "--out", str(pruned), "--from-importance",
                 scores, "--metric", "confidence", "--keep", "3", "--per-type"]) == 0
    assert "enc-self: 3/8" in capsys.readouterr().out
    model, _ = load(pruned, toy_data_bin.data_bin)
    assert isinstance(model, GatedTransformerModel)
    layout = head_layout(model)
    assert sum(map(len, layout["enc-self"])) == 3 and sum(map(len, layout["enc-dec"])) == 3
    assert layout["dec-self"] == [[0, 1, 2, 3], [0, 1, 2, 3]]
    original, _ = load(plain_checkpoint, toy_data_bin.data_bin)
    mask = {t: torch.tensor([[h in kept for h in range(4)] for kept in layout[t]]) for t in ("enc-self", "enc-dec")}
    masked = apply_head_mask(copy.deepcopy(original), mask)
    src, lengths, prev = random_batch(len(model.encoder.dictionary), seed=1)
    with torch.no_grad():
        a = masked.get_normalized_probs(masked(src, lengths, prev), log_probs=True)
        b = model.get_normalized_probs(model(src, lengths, prev), log_probs=True)
    assert (a - b).abs().max() <= reordered_tolerance(a, max(TINY_WIDEST_SUM, a.size(-1)))


@pytest.mark.parametrize("request_args, message", [
    (["--keep", "17"], "--keep 17: the scores cover 16 heads"),
    (["--keep", "9", "--per-type"], "--keep 9: enc-self has 8 heads"),
    (["--keep", "3", "--metric", "bleu"], "unknown metric 'bleu'"),
    (["--keep", "3", "--metric", "grad"], "missing column(s) ['grad']"),
    (["--keep", "3", "--shape", "3"], "scores are for a different model"),
    (["--from-gates"], "no gated heads"),
    (["--keep", "2", "--per-type", "--prune-unit", "kv-group"], "--per-type goes with --prune-unit query"),
])
def test_invalid_requests_exit_2_without_output(plain_checkpoint, tmp_path, capsys, request_args, message):
    request_args = list(request_args)
    layers = 2
    if "--shape" in request_args:
        layers = int(request_args.pop(request_args.index("--shape") + 1))
        request_args.remove("--shape")
    out = tmp_path / "out.pt"
    if "--from-gates" in request_args:
        argv = ["prune", "--path", str(plain_checkpoint), "--out", str(out), "--from-gates"]
    else:
        scores = write_scores(tmp_path / "heads.csv", ["enc-self", "dec-self"], layers=layers)
        if "--metric" not in request_args:
            request_args += ["--metric", "confidence"]
        argv = ["prune", "--path", str(plain_checkpoint), "--out", str(out), "--from-importance", scores,
                *request_args]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == (["heads.csv"] if "--from-gates" not in argv else [])


def test_curve_removes_the_lowest_scoring_heads_and_reports_bleu(plain_checkpoint, toy_data_bin, tmp_path):
    # the trained --target-heads model would do too; an untrained one keeps this test fast
    scores = write_scores(tmp_path / "heads.csv", ["enc-self"])
    out = tmp_path / "curve.csv"
    overlay = tmp_path / "l0.csv"
    overlay.write_text("heads_kept,bleu,label\n5,0.5,lambda=0.1\n")
    assert main(["curve", str(toy_data_bin.data_bin), "--path", str(plain_checkpoint), "--scores", scores,
                 "--metric", "confidence", "--steps", "0,3,8", "--out", str(out), "--overlay", str(overlay),
                 "--gen-subset", "valid", "--limit", "12", "--beam", "2", "-s", "src", "-t", "tgt",
                 "--max-len-b", "12"]) == 0  # the untrained model never ends a sentence
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["heads_removed"]), int(r["heads_kept"])) for r in rows] == [(0, 8), (3, 5), (8, 0)]
    with open(scores) as f:
        ranked = sorted(csv.DictReader(f), key=lambda r: float(r["confidence"]))
    assert rows[1]["removed_heads"] == ";".join(f"enc-self:{r['layer']}:{r['head']}" for r in ranked[:3])
    assert rows[0]["sacrebleu_signature"].startswith("nrefs:1|")
    model, task = load(plain_checkpoint, toy_data_bin.data_bin)
    bleu, _ = corpus_bleu(*translate(model, task, "valid", beam=2, limit=12, max_len_b=12))
    assert float(rows[0]["bleu"]) == pytest.approx(bleu, abs=0.01)
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_curve_types_removes_only_the_named_types_heads(plain_checkpoint, toy_data_bin, tmp_path, capsys):
    scores = write_scores(tmp_path / "heads.csv", ["enc-self", "dec-self", "enc-dec"])
    out = tmp_path / "curve.csv"
    curve = ["curve", str(toy_data_bin.data_bin), "--path", str(plain_checkpoint), "--scores", scores,
             "--metric", "confidence", "--steps", "0,3,8", "--out", str(out), "--gen-subset", "valid",
             "--limit", "4", "--beam", "1", "-s", "src", "-t", "tgt", "--max-len-b", "8"]
    assert main([*curve, "--types", "enc-self", "--cpu", "--max-tokens", "200", "--batch-size", "3"]) == 0
    with open(out) as f:
        rows = list(csv.DictReader(f))
    # enc-self's 8 heads are all there is to remove; dec-self and enc-dec (scored lower or
    # higher) are neither counted nor removed
    assert [(int(r["heads_removed"]), int(r["heads_kept"])) for r in rows] == [(0, 8), (3, 5), (8, 0)]
    with open(scores) as f:
        ranked = sorted((r for r in csv.DictReader(f) if r["type"] == "enc-self"),
                        key=lambda r: float(r["confidence"]))
    assert rows[-1]["removed_heads"] == ";".join(f"enc-self:{r['layer']}:{r['head']}" for r in ranked)
    capsys.readouterr()
    out.unlink()
    for types, message in (("encoder", "--types: unknown attention type(s) ['encoder']"),
                           ("enc-self", "no scores for --types enc-self (the file has enc-dec)")):
        if types == "enc-self":
            scores = write_scores(tmp_path / "enc_dec.csv", ["enc-dec"])
            curve[curve.index("--scores") + 1] = scores
        assert main([*curve, "--types", types]) == 2
        assert_one_line_error(capsys, "curve", message)
        assert not out.exists()


def test_curve_with_rescoring_runs(plain_checkpoint, toy_data_bin, tmp_path):
    scores = write_scores(tmp_path / "heads.csv", ["enc-dec"])
    out = tmp_path / "curve.csv"
    assert main(["curve", str(toy_data_bin.data_bin), "--path", str(plain_checkpoint), "--scores", scores,
                 "--metric", "confidence", "--steps", "0,2,4", "--rescore", "--out", str(out),
                 "--gen-subset", "valid", "--limit", "8", "--beam", "1", "-s", "src", "-t", "tgt",
                 "--max-len-b", "12"]) == 0
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [len(r["removed_heads"].split(";")) if r["removed_heads"] else 0 for r in rows] == [0, 2, 4]


# ------------------------------------------------------------- bad input, before the work


def bad_checkpoint(tmp_path, kind, good):
    path = tmp_path / f"{kind}.pt"
    whole = open(good, "rb").read()
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(whole[:len(whole) // 2])
    else:
        torch.save({"weights": torch.zeros(3)}, path)
    return path, {"empty": "not a checkpoint: the file is empty",
                  "truncated": "not a readable checkpoint (truncated",
                  "not-a-checkpoint": "not a fairseq checkpoint (no 'model' weights"}[kind]


def command_line(command, checkpoint, out, data_bin, scores):
    return {"gates": ["gates", str(checkpoint)],
            "prune": ["prune", "--path", str(checkpoint), "--out", str(out), "--from-gates"],
            "mask": ["mask", "--path", str(checkpoint), "--out", str(out)],
            "curve": ["curve", str(data_bin), "--path", str(checkpoint), "--scores", scores, "--metric",
                      "confidence", "--steps", "0,2", "--out", str(out)]}[command]


def assert_one_line_error(capsys, command, expected):
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fairseq-heads {command}: error: "), lines
    assert expected in lines[0], lines[0]


@pytest.mark.parametrize("kind", ["empty", "truncated", "not-a-checkpoint"])
@pytest.mark.parametrize("command", ["gates", "prune", "mask", "curve"])
def test_a_bad_checkpoint_file_exits_2_in_one_line(command, kind, plain_checkpoint, toy_data_bin, tmp_path,
                                                    capsys):
    scores = write_scores(tmp_path / "heads.csv", ["enc-self"])
    checkpoint, expected = bad_checkpoint(tmp_path, kind, plain_checkpoint)
    before = sorted(os.listdir(tmp_path))
    out = tmp_path / ("out.json" if command == "mask" else "out.csv" if command == "curve" else "out.pt")
    assert main(command_line(command, checkpoint, out, toy_data_bin.data_bin, scores)) == 2
    assert_one_line_error(capsys, command, f"{checkpoint}: {expected}")
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("command", ["prune", "mask", "curve"])
def test_an_out_that_is_a_folder_exits_2_in_one_line(command, plain_checkpoint, toy_data_bin, tmp_path, capsys):
    scores = write_scores(tmp_path / "heads.csv", ["enc-self"])
    out = tmp_path / "out"
    out.mkdir()
    assert main(command_line(command, plain_checkpoint, out, toy_data_bin.data_bin, scores)) == 2
    assert_one_line_error(capsys, command, f"--out {out}: is a folder; give a file name")
    assert sorted(os.listdir(tmp_path)) == ["heads.csv", "out"] and not os.listdir(out)


def test_pruned_checkpoint_and_mask_are_readable_by_others(plain_checkpoint, tmp_path):
    import stat

    scores = write_scores(tmp_path / "heads.csv", ["enc-self"])
    previous = os.umask(0o022)
    try:
        assert main(["prune", "--path", str(plain_checkpoint), "--out", str(tmp_path / "models" / "pruned.pt"),
                     "--from-importance", scores, "--metric", "confidence", "--keep", "8"]) == 0  # gated, all kept
        assert main(["mask", "--path", str(tmp_path / "models" / "pruned.pt"),
                     "--out", str(tmp_path / "mask.json")]) == 0
    finally:
        os.umask(previous)
    for path in (tmp_path / "models" / "pruned.pt", tmp_path / "mask.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    assert stat.S_IMODE((tmp_path / "models").stat().st_mode) == 0o755


def test_types_restricts_scoring_and_pruning_to_the_named_types(plain_checkpoint, toy_data_bin, tmp_path,
                                                                 capsys):
    scores = write_scores(tmp_path / "heads.csv", ["enc-self", "dec-self", "enc-dec"])
    for types, keep, kept in (("enc-self", "3", {"enc-self": 3, "dec-self": 8, "enc-dec": 8}),
                              ("enc-self,enc-dec", "5", {"enc-self": 5, "dec-self": 8, "enc-dec": 5})):
        pruned = tmp_path / f"pruned_{types}.pt"
        assert main(["prune", "--path", str(plain_checkpoint), "--out", str(pruned), "--from-importance",
                     scores, "--metric", "confidence", "--keep", keep, "--types", types,
                     *(["--per-type"] if "," in types else [])]) == 0
        model, _ = load(pruned, toy_data_bin.data_bin)
        assert {t: sum(map(len, rows)) for t, rows in head_layout(model).items()} == kept
    with open(scores) as f:  # enc-self alone: its 3 best heads, whatever the other types scored
        enc_self = sorted((r for r in csv.DictReader(f) if r["type"] == "enc-self"),
                          key=lambda r: -float(r["confidence"]))[:3]
    model, _ = load(tmp_path / "pruned_enc-self.pt", toy_data_bin.data_bin)
    assert sorted(f"{layer}:{head}" for layer, rows in enumerate(head_layout(model)["enc-self"])
                  for head in rows) == sorted(f"{r['layer']}:{r['head']}" for r in enc_self)
    capsys.readouterr()
    assert main(["prune", "--path", str(plain_checkpoint), "--out", str(tmp_path / "x.pt"), "--from-importance",
                 scores, "--metric", "confidence", "--keep", "3", "--types", "encoder"]) == 2
    assert_one_line_error(capsys, "prune", "--types: unknown attention type(s) ['encoder']")
    assert not (tmp_path / "x.pt").exists()


def test_types_with_gates_prunes_only_the_named_gated_types(target_run, tmp_path):
    checkpoint, _ = target_run
    for name, extra in (("all", []), ("enc", ["--types", "enc-self"])):
        assert main(["prune", "--path", str(checkpoint), "--out", str(tmp_path / f"{name}.pt"),
                     "--from-gates", *extra]) == 0
    layouts = {name: head_layout(build_model_from_state(state, checkpoint_model_options(state)))
               for name in ("all", "enc") for state in [load_checkpoint(str(tmp_path / f"{name}.pt"))]}
    assert layouts["enc"]["enc-self"] == layouts["all"]["enc-self"]
    assert layouts["enc"]["dec-self"] == layouts["enc"]["enc-dec"] == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert layouts["all"]["dec-self"] != layouts["enc"]["dec-self"] or layouts["all"]["enc-dec"] != \
        layouts["enc"]["enc-dec"]  # the full prune did remove some decoder heads
