"""End to end: `fairseq-heads stats` on a model trained in the test, checked against attention
computed by hand, one unpadded sentence at a time; error cases leave the output folder empty."""
import csv
import json
import math

import pytest
import torch
from fairseq import options, tasks

from fairseq_heads import cli
from fairseq_heads.stats.labels import PAPER_THRESHOLDS
from fairseq_heads.models.gated_transformer import iter_gates
from fairseq_heads.stats import LM_METRICS, METRICS, StatsOptions, compute_head_statistics

TRANSLATION_METRICS = [m for m in METRICS if m not in LM_METRICS]
from tests.core.helpers import build_model, run_cli
from tests.stats.conftest import save_args_checkpoint

LAYOUT = {"enc-self": (2, 4), "dec-self": (2, 4), "enc-dec": (2, 4)}
REPLICATES = "50"


@pytest.fixture(scope="module")
def stats_dir(toy_data_bin, trained_checkpoint, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("stats") / "out"
    result = run_cli(["fairseq-heads", "stats", str(toy_data_bin.data_bin), "--path", trained_checkpoint,
                      "--gen-subset", "valid", "--conllu", str(toy_data_bin.conllu["valid"]),
                      "--metrics", ",".join(TRANSLATION_METRICS), "--out-dir", str(out_dir), "--cpu",
                      "--bootstrap-replicates", REPLICATES, "--max-tokens", "800",
                      "--log-format", "none"])
    assert result.returncode == 0, result.stderr[-3000:]
    return out_dir


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def number(cell: str) -> float:
    return float(cell) if cell != "" else math.nan


def test_table_has_every_head_and_column_with_values_in_range(stats_dir):
    rows = read_csv(stats_dir / "heads.csv")
    document = json.loads((stats_dir / "heads.json").read_text())
    assert list(rows[0].keys()) == document["columns"]
    assert [(r["type"], int(r["layer"]), int(r["head"])) for r in rows] == \
        [(t, layer, head) for t, (num_layers, heads) in LAYOUT.items()
         for layer in range(num_layers) for head in range(heads)]
    assert document["meta"]["sentences"] == 100
    for row in rows:
        t = row["type"]
        assert 0 < number(row["confidence"]) <= 1
        assert 0 <= number(row["lrp"]) <= 1 and number(row["grad"]) >= 0
        for metric in ("confidence", "lrp", "grad"):
            assert number(row[f"{metric}_ci_low"]) <= number(row[f"{metric}_ci_high"])
        assert number(row["lrp_count"]) == 100 and number(row["grad_count"]) == 100
        has_positional = t in ("enc-self", "dec-self")
        assert (row["positional_share"] != "") == has_positional
        assert (row["rare_share"] != "") == (t in ("enc-self", "enc-dec"))
        assert (row["syntactic_nsubj_dep2head"] != "") == (t == "enc-self")
        if has_positional:
            assert 0 <= number(row["positional_share"]) <= 1
            shares = [number(row[f"positional_share_at_{k:+d}" if k else "positional_share_at_0"])
                      for k in range(-2, 3)]
            assert number(row["positional_share"]) == pytest.approx(max(shares))
            assert sum(shares) <= 1 + 1e-9
        if t == "dec-self":  # causal: a decoder position never attends to a later one
            assert number(row["positional_share_at_+1"]) == 0 and number(row["positional_share_at_+2"]) == 0
    for t, (num_layers, _) in LAYOUT.items():
        for layer in range(num_layers):
            layer_rows = [r for r in rows if r["type"] == t and int(r["layer"]) == layer]
            assert sum(number(r["lrp"]) for r in layer_rows) == pytest.approx(1.0, abs=1e-6)


def test_labels_follow_the_thresholds(stats_dir):
    for row in json.loads((stats_dir / "heads.json").read_text())["heads"]:
        labels = row["labels"]
        positional = row["positional_share"] is not None and row["positional_share"] >= PAPER_THRESHOLDS.positional
        assert (f"positional({row['positional_offset']})" in labels) == positional
        rare = row["rare_share"] is not None and row["rare_share"] >= PAPER_THRESHOLDS.rare
        assert ("rare" in labels) == rare
        syntactic = row["syntactic_best_gain"] is not None and \
            row["syntactic_best_gain"] >= PAPER_THRESHOLDS.syntactic_margin
        assert any(label.startswith("syntactic(") for label in labels) == syntactic


def test_agreement_and_figures(stats_dir):
    agreement = json.loads((stats_dir / "agreement.json").read_text())
    assert set(agreement) == set(LAYOUT)
    for pairs in agreement.values():
        assert set(pairs) == {"confidence~lrp", "confidence~grad", "lrp~grad"}
        for entry in pairs.values():
            assert -1 <= entry["spearman"] <= 1 and entry["num_heads"] == 8
    pngs = sorted(p.name for p in stats_dir.glob("*.png"))
    assert "function_map.png" in pngs and "heatmap_lrp.png" in pngs
    assert "heatmap_syntactic_best_gain.png" in pngs
    for name in pngs:
        (stats_dir / name).unlink()
    assert cli.main(["plot", str(stats_dir)]) == 0  # figures from the tables alone
    assert sorted(p.name for p in stats_dir.glob("*.png")) == pngs


def attention_by_hand(attention, x, causal=False):
    """(H, T, T) probabilities of a fairseq attention block on one unpadded sentence x (T, 1, C)."""
    heads = attention.num_heads
    q = (attention.q_proj(x) * attention.scaling).view(x.shape[0], heads, -1).transpose(0, 1)
    k = attention.k_proj(x).view(x.shape[0], heads, -1).transpose(0, 1)
    scores = q @ k.transpose(1, 2)
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores[0]).triu(1).bool(), float("-inf"))
    return scores.softmax(-1)


def test_detectors_agree_with_attention_computed_by_hand(stats_dir, toy_data_bin, trained_checkpoint):
    """Sentence by sentence, no padding, attention from q_proj/k_proj: confidence (enc-self and
    dec-self), positional shares, rare-word hits and syntactic accuracies of the encoder's heads
    (the parse of sentence i is the i-th CoNLL-U sentence, whatever the batch order)."""
    from fairseq import checkpoint_utils

    from fairseq_heads.stats.metrics.syntactic import query_hits, syntactic_queries
    from fairseq_heads.stats.syntax.alignment import prepare_sentence
    from fairseq_heads.stats.syntax.conllu_index import ConlluIndex

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [trained_checkpoint], arg_overrides={"data": str(toy_data_bin.data_bin)})
    model = models[0].eval()
    task.load_dataset("valid")
    dataset, eos = task.dataset("valid"), task.source_dictionary.eos()
    # rare-word frequencies: the source side's training tokens (stats/token_counts.py)
    from fairseq.data import data_utils

    train = data_utils.load_indexed_dataset(str(toy_data_bin.data_bin / "train.src-tgt.src"), None)
    counts = torch.bincount(torch.cat([train[i].long() for i in range(len(train))]),
                            minlength=len(task.source_dictionary)).double()
    queries = {}
    hooks = [layer.self_attn.register_forward_pre_hook(
        lambda m, a, kw, key=(side, i): queries.__setitem__(key, kw["query"]), with_kwargs=True)
        for side, stack in (("enc", model.encoder.layers), ("dec", model.decoder.layers))
        for i, layer in enumerate(stack)]
    confidence = {side: torch.zeros(2, 4, dtype=torch.float64) for side in ("enc", "dec")}
    tokens = {"enc": 0, "dec": 0}
    offset_hits = torch.zeros(2, 4, 5, dtype=torch.float64)
    rare_hits, rare_sentences = torch.zeros(2, 4, dtype=torch.float64), 0
    syntactic_hits, syntactic_queries_count = {}, {}
    parses = ConlluIndex(str(toy_data_bin.conllu["valid"]))
    with torch.no_grad():
        for i in range(len(dataset)):
            source, target = dataset[i]["source"], dataset[i]["target"]
            prev = torch.cat([torch.tensor([eos]), target[:-1]])
            model(source[None], torch.tensor([len(source)]), prev[None])
            encoder_probs = []
            for side, stack in (("enc", model.encoder.layers), ("dec", model.decoder.layers)):
                for layer, block in enumerate(stack):
                    probs = attention_by_hand(block.self_attn, queries[(side, layer)], causal=side == "dec")
                    # Real tokens: the source without its final EOS; the decoder input without its leading EOS.
                    probs = probs[:, :-1, :-1] if side == "enc" else probs[:, 1:, 1:]
                    confidence[side][layer] += probs.max(-1).values.sum(-1)
                    if side == "enc":
                        encoder_probs.append(probs)
                        n = probs.shape[-1]
                        offsets = probs.argmax(-1) - torch.arange(n)
                        for j, k in enumerate(range(-2, 3)):
                            offset_hits[layer, :, j] += (offsets == k).sum(-1)
                        if n >= 2:
                            freq = counts[source[:-1]]
                            best = probs.mean(1).argmax(-1)
                            rare_hits[layer] += (freq[best] == freq.min()).double()
                tokens[side] += probs.shape[-1]
            rare_sentences += int(len(source) - 1 >= 2)
            pieces = [task.source_dictionary[int(t)] for t in source[:-1]]
            word_attn, arcs = prepare_sentence(parses[i], pieces, torch.stack(encoder_probs), i)
            sentence_queries = syntactic_queries(arcs)
            if sentence_queries:
                hits = query_hits(word_attn, sentence_queries).double()  # (L, H, Q)
                for j, query in enumerate(sentence_queries):
                    slot = (query.relation, query.direction)
                    syntactic_hits[slot] = syntactic_hits.get(slot, 0) + hits[..., j]
                    syntactic_queries_count[slot] = syntactic_queries_count.get(slot, 0) + 1
    parses.close()
    for hook in hooks:
        hook.remove()
    assert sum(syntactic_queries_count.values()) > 50

    rows = {(r["type"], int(r["layer"]), int(r["head"])): r for r in read_csv(stats_dir / "heads.csv")}
    for layer in range(2):
        for head in range(4):
            enc, dec = rows[("enc-self", layer, head)], rows[("dec-self", layer, head)]
            assert number(enc["confidence"]) == pytest.approx(float(confidence["enc"][layer, head]) / tokens["enc"], abs=1e-5)
            assert number(dec["confidence"]) == pytest.approx(float(confidence["dec"][layer, head]) / tokens["dec"], abs=1e-5)
            assert number(enc["confidence_count"]) == tokens["enc"]
            # Argmax-based shares: allow one near-tie decided differently by batched arithmetic.
            for j, k in enumerate(range(-2, 3)):
                column = f"positional_share_at_{k:+d}" if k else "positional_share_at_0"
                assert number(enc[column]) == pytest.approx(float(offset_hits[layer, head, j]) / tokens["enc"],
                                                            abs=1.5 / tokens["enc"])
            for (relation, direction), count in syntactic_queries_count.items():
                column = f"syntactic_{relation}_{direction.replace('->', '2')}"
                assert number(enc[f"{column}_count"]) == count
                assert number(enc[column]) == pytest.approx(
                    float(syntactic_hits[(relation, direction)][layer, head]) / count, abs=1.5 / count)
            assert number(enc["rare_share_count"]) == rare_sentences
            assert number(enc["rare_share"]) == pytest.approx(float(rare_hits[layer, head]) / rare_sentences,
                                                              abs=1.5 / rare_sentences)


def assert_fails_leaving_nothing(args, out_dir, capsys, message):
    assert cli.main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("fairseq-heads stats: error:") and message in error, error
    assert not out_dir.exists() or not any(out_dir.iterdir())
    assert not any(p.name.startswith(f".{out_dir.name}.tmp-") for p in out_dir.parent.iterdir())


def test_errors_leave_the_output_folder_empty(toy_data_bin, trained_checkpoint, tmp_path, capsys):
    out_dir = tmp_path / "out"
    base = ["stats", str(toy_data_bin.data_bin), "--path", trained_checkpoint, "--out-dir", str(out_dir),
            "--cpu", "--log-format", "none", "--metrics", "confidence", "--bootstrap-replicates", "5"]
    # The test split's parses (also 100 sentences) do not match the valid sentences.
    assert_fails_leaving_nothing(base + ["--gen-subset", "valid", "--metrics", "confidence,syntactic",
                                         "--conllu", str(toy_data_bin.conllu["test"])],
                                 out_dir, capsys, "does not match the source sentences")
    assert_fails_leaving_nothing(base + ["--gen-subset", "valid1"], out_dir, capsys, "subset 'valid1' not found")
    out_dir.mkdir()  # an existing, empty folder stays empty
    assert_fails_leaving_nothing(base + ["--gen-subset", "valid", "--metrics", "syntactic"], out_dir, capsys,
                                 "needs --conllu")


def test_metrics_the_model_cannot_have_are_refused(toy_data_bin, trained_checkpoint, tmp_path, capsys):
    out_dir = tmp_path / "out"
    assert_fails_leaving_nothing(["stats", str(toy_data_bin.data_bin), "--path", trained_checkpoint,
                                  "--out-dir", str(out_dir), "--cpu", "--metrics", "confidence,induction"],
                                 out_dir, capsys, "induction need a decoder-only language model")
    dictionary = (toy_data_bin.data_bin / "dict.src.txt").read_text()
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "dict.txt").write_text(dictionary)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(tmp_path / "lm"), "--task", "language_modeling", "--arch", "transformer_lm",
        "--decoder-layers", "1", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
        "--decoder-attention-heads", "2", "--tokens-per-sample", "16", "--cpu"])
    model = tasks.setup_task(args).build_model(args)
    checkpoint = save_args_checkpoint(model, args, tmp_path / "lm.pt")
    # every built-in metric applies to LMs too (syntactic on the arcs to earlier words): a
    # translation-only metric is refused before the data is read
    from fairseq_heads import stats
    from fairseq_heads.stats.metrics.confidence import Confidence
    from fairseq_heads.stats.registry import TRANSLATION

    class EncoderOnlyToy(Confidence):
        name, model_kinds = "encoder_only_toy", (TRANSLATION,)

    stats.register(EncoderOnlyToy())
    try:
        assert_fails_leaving_nothing(["stats", str(tmp_path / "lm"), "--path", checkpoint, "--out-dir",
                                      str(out_dir), "--cpu", "--metrics", "encoder_only_toy"],
                                     out_dir, capsys, "encoder_only_toy heads are computed for translation "
                                                      "models only")
    finally:
        stats.unregister("encoder_only_toy")


def test_gated_checkpoint_with_step_normalised_lrp(toy_data_bin, tmp_path):
    """A gated_transformer checkpoint: P(open) per gated head enters the table and agreement."""
    _, model = build_model(toy_data_bin.data_bin, "gated_transformer",
                           ["--gated-attention", "enc-self,enc-dec"])
    with torch.no_grad():
        for _, _, gate in iter_gates(model):
            gate.log_alpha.copy_(torch.linspace(-2.0, 3.0, gate.num_gates))
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(toy_data_bin.data_bin), "--task", "translation_heads", "--arch", "gated_transformer",
        "-s", "src", "-t", "tgt", "--gated-attention", "enc-self,enc-dec", "--cpu",
        "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
        "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"])
    checkpoint = save_args_checkpoint(model, args, tmp_path / "gated.pt")
    statistics = compute_head_statistics(
        str(toy_data_bin.data_bin), checkpoint, "valid",
        StatsOptions(metrics=("confidence", "lrp", "grad"), lrp_normalise="step", replicates=20,
                     cpu=True, log_format="none", batch_size=50))
    rows = {(r["type"], r["layer"], r["head"]): r for r in statistics.rows}
    p_open = [rows[("enc-self", 0, h)]["gate_p_open"] for h in range(4)]
    assert p_open == sorted(p_open) and p_open[0] < 0.5 < p_open[-1]  # rises with log_alpha
    assert math.isnan(rows[("dec-self", 0, 0)]["gate_p_open"])
    assert rows[("enc-self", 0, 0)]["lrp_count"] == statistics.meta["target_tokens"]  # per step
    assert "confidence~gate_p_open" in statistics.agreement["enc-self"]
    assert "gate_p_open" not in json.dumps(statistics.agreement["dec-self"])


# ------------------------------------------------------------- bad input, before the work


MALFORMED_CONLLU = {
    "spaces": ("1 The the DET _ _ 2 det _ _", "expected 10 tab-separated fields"),
    "head": ("1\tThe\tthe\tDET\t_\t_\tx\tdet\t_\t_", "HEAD 'x' is not a number"),
}


def write_conllu_with_bad_line(tmp_path, toy_data_bin, bad_line):
    """The valid parses with one word line of sentence 3 replaced; returns (path, line number)."""
    lines = toy_data_bin.conllu["valid"].read_text(encoding="utf-8").split("\n")
    sentence, number = 0, None
    for i, line in enumerate(lines):
        if not line.strip():
            sentence += 1
        elif sentence == 2 and not line.startswith("#") and number is None:
            lines[i], number = bad_line, i + 1
    path = tmp_path / "bad.conllu"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path, number


def fail_if_the_work_starts(monkeypatch):
    import fairseq_heads.stats as stats_module

    def never(*args, **kwargs):
        raise AssertionError("the computation started")
    monkeypatch.setattr(stats_module, "compute_head_statistics", never)


@pytest.mark.parametrize("case", ["conllu-spaces", "conllu-head", "out-dir-file", "out-dir-foreign",
                                  "empty-pt", "truncated-pt", "not-a-checkpoint-pt"])
def test_bad_input_exits_2_in_one_line_before_the_work(case, toy_data_bin, trained_checkpoint, tmp_path,
                                                       capsys, monkeypatch):
    fail_if_the_work_starts(monkeypatch)
    out_dir, checkpoint, extra = tmp_path / "out", trained_checkpoint, []
    if case.startswith("conllu"):
        bad_line, expected = MALFORMED_CONLLU[case.split("-")[1]]
        conllu, number = write_conllu_with_bad_line(tmp_path, toy_data_bin, bad_line)
        extra, expected = ["--conllu", str(conllu)], f"{conllu}:{number}: {expected}"
    elif case == "out-dir-file":
        out_dir.write_text("not a folder")
        expected = f"--out-dir {out_dir}: exists and is not a folder"
    elif case == "out-dir-foreign":
        out_dir.mkdir()
        (out_dir / "notes.txt").write_text("mine")
        expected = "holds 'notes.txt', which `stats` did not write"
    else:
        checkpoint = tmp_path / "model.pt"
        whole = open(trained_checkpoint, "rb").read()
        checkpoint.write_bytes({"empty-pt": b"", "truncated-pt": whole[:len(whole) // 2]}.get(case, b""))
        if case == "not-a-checkpoint-pt":
            torch.save({"weights": torch.zeros(3)}, checkpoint)
        expected = {"empty-pt": "not a checkpoint: the file is empty",
                    "truncated-pt": "not a readable checkpoint (truncated",
                    "not-a-checkpoint-pt": "not a fairseq checkpoint (no 'model' weights"}[case]
        expected = f"{checkpoint}: {expected}"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["stats", str(toy_data_bin.data_bin), "--path", str(checkpoint), "--out-dir",
                     str(out_dir), "--cpu", "--log-format", "none", *extra]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fairseq-heads stats: error: "), captured.err
    assert expected in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing left, not even hidden


STATS_QUICK = ["--cpu", "--log-format", "none", "--bootstrap-replicates", "5", "--max-tokens", "800"]


def test_rerun_with_fewer_metrics_leaves_no_stale_figure(toy_data_bin, trained_checkpoint, tmp_path):
    out_dir = tmp_path / "out"
    base = ["stats", str(toy_data_bin.data_bin), "--path", trained_checkpoint, "--out-dir", str(out_dir),
            *STATS_QUICK]
    assert cli.main(base + ["--metrics", "confidence,grad"]) == 0
    assert (out_dir / "heatmap_grad.png").exists()
    assert cli.main(base + ["--metrics", "confidence"]) == 0
    assert not (out_dir / "heatmap_grad.png").exists() and (out_dir / "heatmap_confidence.png").exists()
    assert "grad" not in (out_dir / "heads.csv").read_text().splitlines()[0].split(",")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging or old folder left


def test_stats_outputs_are_readable_by_others(toy_data_bin, trained_checkpoint, tmp_path):
    import os
    import stat

    previous = os.umask(0o022)
    try:
        assert cli.main(["stats", str(toy_data_bin.data_bin), "--path", trained_checkpoint, "--out-dir",
                         str(tmp_path / "out"), "--metrics", "confidence", *STATS_QUICK]) == 0
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(tmp_path / "out").st_mode) == 0o755
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
    assert "heads.csv" in modes and "heatmap_confidence.png" in modes
    assert set(modes.values()) == {0o644}, modes


def prune_to(checkpoint, tmp_path, types, keep):
    """`fairseq-heads prune --keep K` of a 2x4-heads-per-type checkpoint, scored on `types`."""
    scores = tmp_path / f"scores_{'_'.join(types)}.csv"
    rows = ["type,layer,head,confidence"] + [f"{t},{layer},{head},{head}" for t in types
                                              for layer in range(2) for head in range(4)]
    scores.write_text("\n".join(rows) + "\n")
    out = tmp_path / f"pruned_{'_'.join(types)}_{keep}.pt"
    assert cli.main(["prune", "--path", str(checkpoint), "--out", str(out), "--from-importance", str(scores),
                     "--metric", "confidence", "--keep", str(keep), "--per-type"]) == 0
    return out


def test_types_whose_every_head_is_pruned_are_reported_and_the_rest_computed(
        toy_data_bin, trained_checkpoint, tmp_path):
    pruned = prune_to(trained_checkpoint, tmp_path, ["enc-dec"], 0)
    out_dir = tmp_path / "out"
    assert cli.main(["stats", str(toy_data_bin.data_bin), "--path", str(pruned), "--out-dir", str(out_dir),
                     "--metrics", "confidence,lrp,grad", *STATS_QUICK]) == 0
    document = json.loads((out_dir / "heads.json").read_text())
    assert document["meta"]["pruned_types"] == {"enc-dec": 2}
    assert {row["type"] for row in document["heads"]} == {"enc-self", "dec-self"}
    assert all(row["confidence"] is not None and row["lrp"] is not None for row in document["heads"])
    # every head of every type pruned: nothing per head, and the blocks still reported
    everything = prune_to(trained_checkpoint, tmp_path, ["enc-self", "dec-self", "enc-dec"], 0)
    assert cli.main(["stats", str(toy_data_bin.data_bin), "--path", str(everything), "--out-dir",
                     str(tmp_path / "none"), "--metrics", "confidence,lrp,grad", *STATS_QUICK]) == 0
    document = json.loads((tmp_path / "none" / "heads.json").read_text())
    assert document["heads"] == [] and document["meta"]["pruned_types"] == {
        "enc-self": 2, "dec-self": 2, "enc-dec": 2}
