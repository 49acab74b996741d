"""fairseq's own CLIs with --user-dir, end to end on the toy corpus (subprocesses)."""
import json
import os
import shutil

import pytest
import torch

from fairseq_heads.checkpoints import load_checkpoint
from fairseq_heads.gating.gate_table import gate_rows

from .helpers import PLAIN_TRAINING, reordered_tolerance, run_cli, toy_cli_common, toy_train_args

ALL_TYPES = "enc-self,dec-self,enc-dec"


def check(process):
    assert process.returncode == 0, process.stderr[-3000:]
    return process


def open_heads(checkpoint) -> int:
    return sum(row.kept for row in gate_rows(load_checkpoint(str(checkpoint))))


@pytest.fixture(scope="module")
def plain_checkpoint(toy_data_bin, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("plain")
    check(run_cli(toy_train_args(toy_data_bin.data_bin, save_dir, *PLAIN_TRAINING, "--max-update", "30")))
    return save_dir / "checkpoint_last.pt"


def finetune(data_bin, save_dir, plain, l0_lambda, updates, *extra):
    return run_cli(toy_train_args(
        data_bin, save_dir, "--arch", "gated_transformer", "--gated-attention", ALL_TYPES,
        "--finetune-from-model", str(plain), "--criterion", "label_smoothed_cross_entropy_l0",
        "--label-smoothing", "0.1", "--l0-lambda", str(l0_lambda), "--optimizer", "gate_adam",
        "--lr", "1e-3", "--gate-lr-scale", "150", "--lr-scheduler", "fixed",
        "--max-update", str(updates), *extra))


@pytest.fixture(scope="module")
def finetuned(toy_data_bin, plain_checkpoint, tmp_path_factory):
    runs = {}
    for l0_lambda in (0.0, 5.0):
        save_dir = tmp_path_factory.mktemp(f"l0_{l0_lambda}")
        trace = save_dir / "gate_trace.jsonl"
        logs = ["--gate-trace", str(trace), "--gate-trace-interval", "5",
                "--tensorboard-logdir", str(save_dir / "tensorboard")]
        first = check(finetune(toy_data_bin.data_bin, save_dir, plain_checkpoint, l0_lambda, 25, *logs))
        # Resume from checkpoint_last.pt (fairseq ignores --finetune-from-model once it exists).
        resumed = check(finetune(toy_data_bin.data_bin, save_dir, plain_checkpoint, l0_lambda, 40, *logs))
        runs[l0_lambda] = dict(save_dir=save_dir, first=first, resumed=resumed, trace=trace)
    return runs


def test_large_lambda_closes_heads_and_zero_lambda_does_not(finetuned):
    heads = 3 * 2 * 4
    assert open_heads(finetuned[0.0]["save_dir"] / "checkpoint_last.pt") == heads
    assert open_heads(finetuned[5.0]["save_dir"] / "checkpoint_last.pt") < heads


def console_records(process):
    """The JSON records of fairseq-train's console lines (train, train_inner, valid)."""
    log = process.stderr + process.stdout
    return [json.loads(line[line.index("{"):]) for line in log.splitlines()
            if "{" in line and ("| train |" in line or "| valid |" in line or "| train_inner |" in line)]


def test_l0_metrics_are_logged_at_training_and_validation(finetuned):
    records = console_records(finetuned[5.0]["resumed"])
    valid = [r for r in records if "valid_loss" in r]
    train = [r for r in records if "train_inner_loss" in r or "train_loss" in r]
    assert valid and train
    for r, prefix in ((valid[-1], "valid_"), (train[-1], "train_inner_" if "train_inner_loss" in train[-1] else "train_")):
        for key in ("expected_l0", "open_heads_enc_self", "open_heads_dec_self", "open_heads_enc_dec"):
            assert prefix + key in r, (prefix + key, r)
    assert float(valid[-1]["valid_expected_l0"]) < 24


def test_the_console_line_has_summaries_and_no_per_head_gate_values(finetuned):
    for run in ("first", "resumed"):
        records = console_records(finetuned[5.0][run])
        prefixes = {next((p for p in ("train_", "valid_", "") if f"{p}loss" in r), None) for r in records}
        assert prefixes == {"train_", "valid_", ""}  # "": train_inner lines (fairseq: no prefix)
        assert all(f"{p}expected_l0" in r for r in records for p in prefixes if f"{p}loss" in r)
        assert [key for r in records for key in r if "p_open" in key] == []


def test_gate_metrics_are_in_the_tensorboard_event_files(finetuned):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = finetuned[5.0]
    heads = [f"p_open/{t.replace('-', '_')}/{layer}/{head}" for t in ALL_TYPES.split(",")
             for layer in range(2) for head in range(4)]
    summaries = {"expected_l0", "open_heads_enc_self", "open_heads_dec_self", "open_heads_enc_dec"}
    def scalars(run_name):
        events = EventAccumulator(str(run["save_dir"] / "tensorboard" / run_name))
        events.Reload()
        return events, set(events.Tags()["scalars"])

    for tag in ("train_inner", "train", "valid"):
        events, tags = scalars(tag)
        assert summaries <= tags and not tags & set(heads), (tag, sorted(tags))
        if tag == "train_inner":  # both runs, every --log-interval 5 updates
            assert [e.step for e in events.Scalars("expected_l0")] == list(range(5, 41, 5))
    # each head's P(open), a run of its own: the gates after N updates at step N, every
    # --log-interval updates, the values the gate trace records (its interval is 5 too)
    events, tags = scalars("gates")
    assert tags == set(heads)
    trace = {record["update"]: {(h["type"], h["layer"], h["head"]): h["p_open"] for h in record["heads"]}
             for record in map(json.loads, run["trace"].read_text().splitlines())}
    for t, layer, head in (("enc-self", 0, 0), ("enc-dec", 1, 3)):
        p_open = {e.step: e.value for e in events.Scalars(f"p_open/{t.replace('-', '_')}/{layer}/{head}")}
        assert sorted(p_open) == sorted(trace) == list(range(0, 36, 5))
        assert all(p_open[u] == pytest.approx(trace[u][(t, layer, head)], abs=1e-5) for u in trace)
    log = "".join(run[r].stdout + run[r].stderr for r in ("first", "resumed"))
    assert "Please install tensorboardX" not in log and "tensorboard not found" not in log


def test_training_resumes_from_its_checkpoint(finetuned):
    run = finetuned[5.0]
    state = load_checkpoint(str(run["save_dir"] / "checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 40
    log = run["resumed"].stderr + run["resumed"].stdout
    assert "checkpoint_last.pt" in log and "25 updates" in log
    updates = [json.loads(line)["update"] for line in run["trace"].read_text().splitlines()]
    assert updates == [0, 5, 10, 15, 20, 25, 30, 35]


def test_finetuned_checkpoint_loads_in_fairseq_generate_and_validate(finetuned, toy_data_bin):
    checkpoint = str(finetuned[5.0]["save_dir"] / "checkpoint_last.pt")
    out = check(run_cli(["fairseq-generate", *toy_cli_common(toy_data_bin.data_bin), "--path", checkpoint,
                         "--gen-subset", "valid", "--beam", "3", "--batch-size", "64",
                         "--remove-bpe", "sentencepiece", "--scoring", "sacrebleu"]))
    assert "Generate valid with beam=3" in out.stdout
    lines = out.stdout.splitlines()
    hypotheses = sum(line.startswith("H-") for line in lines)
    assert hypotheses == sum(line.startswith("S-") for line in lines) >= 90
    assert "BLEU" in lines[-1]
    check(run_cli(["fairseq-validate", *toy_cli_common(toy_data_bin.data_bin), "--path", checkpoint,
                   "--valid-subset", "valid", "--max-tokens", "2000"]))


def test_plain_checkpoint_loads_into_gated_transformer_with_same_outputs(plain_checkpoint, toy_data_bin):
    from fairseq import checkpoint_utils

    from .helpers import build_model

    [plain], _ = checkpoint_utils.load_model_ensemble([str(plain_checkpoint)])
    _, gated = build_model(toy_data_bin.data_bin, "gated_transformer",
                           ["--gated-attention", ALL_TYPES, "--share-all-embeddings"])
    gated.load_state_dict(load_checkpoint(str(plain_checkpoint))["model"], strict=True)
    src = torch.tensor([[5, 9, 14, 22, 7, 2], [1, 1, 30, 8, 11, 2]])
    lengths = torch.tensor([6, 4])
    prev = torch.tensor([[2, 6, 12, 19, 4], [2, 25, 9, 1, 1]])
    with torch.no_grad():
        a = plain.eval()(src, lengths, prev)[0]
        b = gated.eval()(src, lengths, prev)[0]
    assert (a - b).abs().max() <= reordered_tolerance(a)  # logits: open gates, another attention path


@pytest.mark.parametrize("extra, message", [
    (["--l0-lambda", "-1"], "--l0-lambda"),
    (["--gated-attention", "enc-self,cross"], "--gated-attention"),
])
def test_bad_training_options_fail_naming_the_option(toy_data_bin, tmp_path, extra, message):
    process = run_cli(toy_train_args(toy_data_bin.data_bin, tmp_path, "--arch", "gated_transformer_tiny",
                                 "--criterion", "label_smoothed_cross_entropy_l0", "--optimizer",
                                 "adam", "--lr", "1e-3", "--max-update", "1", *extra))
    assert process.returncode != 0
    assert message in process.stderr
    assert not any(name.endswith(".pt") for name in os.listdir(tmp_path))


@pytest.mark.parametrize("content, message", [
    (None, "file not found"),
    ({"enc-self": [[1, 0, 1, 1]]}, "shape"),
    ({"encoder": [[1, 1, 1, 1], [1, 1, 1, 1]]}, "unknown attention type 'encoder'"),
    ({"enc-self": [[1, 0, 2, 1], [1, 1, 1, 1]]}, "0/1"),
])
def test_bad_head_mask_fails_naming_the_file(plain_checkpoint, toy_data_bin, tmp_path, content, message):
    mask = tmp_path / "mask.json"
    if content is not None:
        mask.write_text(json.dumps(content))
    process = run_cli(["fairseq-generate", *toy_cli_common(toy_data_bin.data_bin), "--path", str(plain_checkpoint),
                       "--gen-subset", "valid", "--head-mask", str(mask), "--batch-size", "64"])
    assert process.returncode != 0
    assert str(mask) in process.stderr and message in process.stderr


def test_resuming_from_an_earlier_checkpoint_drops_the_trace_records_after_it(plain_checkpoint, toy_data_bin,
                                                                               tmp_path):
    trace = tmp_path / "gate_trace.jsonl"
    validations = tmp_path / "validations.jsonl"  # the converged protocol's record, resumed alike
    options = ["--gate-trace", str(trace), "--gate-trace-interval", "3", "--save-interval-updates", "4",
               "--keep-interval-updates", "2", "--max-valid-steps", "1",
               "--validation-trace", str(validations), "--validate-interval-updates", "4"]
    check(finetune(toy_data_bin.data_bin, tmp_path, plain_checkpoint, 0.0, 10, *options))
    assert [json.loads(line)["update"] for line in trace.read_text().splitlines()] == [0, 3, 6, 9]
    validated = [json.loads(line)["update"] for line in validations.read_text().splitlines()]
    assert validated[:2] == [4, 8] and validated[-1] == 10 and validated == sorted(set(validated))
    with open(trace, "a") as f:
        f.write('{"update": 12, "hea')  # what a kill mid-append leaves
    # Back to update 4 (as after a crash before the last save): 6 and 9 are done again, traced once.
    shutil.copyfile(tmp_path / "checkpoint_1_4.pt", tmp_path / "checkpoint_last.pt")
    check(finetune(toy_data_bin.data_bin, tmp_path, plain_checkpoint, 0.0, 10, *options))
    assert [json.loads(line)["update"] for line in trace.read_text().splitlines()] == [0, 3, 6, 9]
    assert [json.loads(line)["update"] for line in validations.read_text().splitlines()] == validated


def test_patience_counts_across_a_resumed_run(plain_checkpoint, toy_data_bin, tmp_path):
    """fairseq keeps its --patience count in the process only; the hook feeds a resumed run the
    validations before its checkpoint, so it stops where one uninterrupted run would. At lr 0
    every validation has the same loss: the best is the first, and with --patience 3 the run
    stops at the fourth validation, whether or not it was cut in between."""
    validations = tmp_path / "validations.jsonl"
    options = ["--arch", "transformer", "--finetune-from-model", str(plain_checkpoint),
               "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
               "--optimizer", "adam", "--lr", "0", "--lr-scheduler", "fixed",
               "--validate-interval-updates", "1", "--save-interval-updates", "1",
               "--validate-interval", "1000", "--keep-interval-updates", "1", "--max-valid-steps", "1",
               "--patience", "3", "--validation-trace", str(validations)]
    check(run_cli(toy_train_args(toy_data_bin.data_bin, tmp_path, *options, "--max-update", "2")))
    resumed = check(run_cli(toy_train_args(toy_data_bin.data_bin, tmp_path, *options, "--max-update", "20")))
    assert "early stop" in resumed.stdout + resumed.stderr
    records = [json.loads(line) for line in validations.read_text().splitlines()]
    assert [r["update"] for r in records] == [1, 2, 3, 4]
    assert len({r["loss"] for r in records}) == 1


def test_finetuning_from_a_plain_checkpoint_with_other_head_counts_is_refused(plain_checkpoint, toy_data_bin,
                                                                              tmp_path):
    process = finetune(toy_data_bin.data_bin, tmp_path, plain_checkpoint, 0.0, 2,
                       "--encoder-attention-heads", "2")
    assert process.returncode == 2, process.stderr[-3000:]
    errors = [line for line in process.stderr.splitlines() if "error" in line.lower()]
    assert errors == [f"error: {plain_checkpoint} was trained with --encoder-attention-heads 4, this gated "
                      f"model has 2: its attention weights would be split into other heads; use "
                      f"--encoder-attention-heads 4"], process.stderr[-3000:]
    assert not list(tmp_path.glob("*.pt"))


def test_the_recipes_generate_scores_every_sentence_of_a_subset(toy_data_bin, plain_checkpoint, tmp_path):
    """fairseq 0.12 drops the last n mod 8 sentences under its default --required-batch-size-multiple;
    the recipes' in-process fairseq-generate (pipeline/fairseq_steps.generate) scores all of them."""
    from fairseq_heads.pipeline.fairseq_steps import generate

    sentences = sum(1 for _ in open(os.path.join(toy_data_bin.clean_dir, "test.tgt"), encoding="utf-8"))
    assert sentences % 8  # the case fairseq's default gets wrong
    out = tmp_path / "generate.txt"
    generate(str(toy_data_bin.data_bin), toy_cli_common(toy_data_bin.data_bin)[1:] + [
        "--path", str(plain_checkpoint), "--gen-subset", "test", "--beam", "1", "--batch-size", "16"], str(out))
    hypotheses = [line for line in out.read_text().splitlines() if line.startswith("H-")]
    assert len(hypotheses) == sentences
