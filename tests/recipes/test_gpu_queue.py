"""The GPU queue's experiment (a), europarl_en_it, unchanged at toy scale on the CPU, through the
same two scripts as on the device: recipes/gpu/carry.sh (the data steps run here, packed for the
offline machine; no wheels in CI) and recipes/gpu/device.sh (unpack, run the rest side by side,
pack after every step into $OUT). Then what the CPU side does with $OUT: unpack it as a docs
folder and render the report again from its files alone. Last, changing the baseline's settings
re-runs exactly the steps that read it."""
import gzip
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from fairseq_heads.pipeline.pack import unpack

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS_AFTER_DATA = ["baseline", "bleu_baseline", "stats", "syntax_stats",
                    "enc_l0_0.002", "bleu_enc_l0_0.002", "enc_l0_0.05", "bleu_enc_l0_0.05",
                    "enc_l0_0", "bleu_enc_l0_0", "curve_grad", "curve_confidence", "report"]


def script(name, *args, **env):
    environment = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1", **env)
    environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + environment["PATH"]
    return subprocess.run(["bash", os.path.join(REPO, "recipes", "gpu", name), *args], cwd=REPO,
                          env=environment, capture_output=True, text=True, timeout=1500)


def ran(output):
    return re.findall(r"^(?:run |resume) (\S+)$", output, re.M)


@pytest.fixture(scope="module")
def device_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_queue")
    carry = script("carry.sh", "europarl_en_it", "--scale", "toy", CARRY=str(root / "carry"),
                   WORK=str(root / "cpu"), WHEELS="no")
    assert carry.returncode == 0, carry.stdout[-2000:] + carry.stderr[-2000:]
    # two device calls, as on a warm machine: the first stops after the baseline (on the GPU,
    # its time runs out), the second finds the unpacked data and continues
    for call, args in enumerate((["--only", "baseline"], []), 1):
        device = script("device.sh", "20", "europarl_en_it", "--scale", "toy", "--jobs", "2", *args,
                        CARRY=str(root / "carry"), OUT=str(root / f"out{call}"), RESULTS=str(root / "device"),
                        SITE=str(root / "site"))
        assert device.returncode == 0, device.stdout[-3000:] + device.stderr[-3000:]
        if call == 1:
            assert ran(device.stdout) == ["baseline"] and "continuing" not in device.stdout
    os.replace(root / "out2", root / "out")
    return root, carry, device


def test_the_data_steps_run_on_the_cpu_and_the_device_runs_the_rest(device_run):
    root, carry, device = device_run
    assert ran(carry.stdout) == ["data"]
    console = (root / "out" / "console.log").read_text()
    assert "device.sh: continuing the run in" in device.stdout
    assert "skip data (done)" in console and "skip baseline (done)" in console and "device.sh: exit 0" in console
    rest = [step for step in STEPS_AFTER_DATA if step != "baseline"]
    assert sorted(ran(console)) == sorted(rest)
    steps = json.loads((root / "device" / "steps.json").read_text())
    assert {row["step"]: row["state"] for row in steps} == {"data": "done earlier", "baseline": "done earlier",
                                                            **{s: "ran" for s in rest}}
    assert all(row["seconds"] > 0 for row in steps if row["step"] != "data")


def test_the_packed_results_are_the_committed_subset_and_render_the_same_report(device_run, tmp_path):
    root, _, _ = device_run
    with tarfile.open(root / "out" / "results.tar.gz") as tar:
        names = tar.getnames()
    assert not [n for n in names if n.endswith(".pt") or n.startswith(("data/", "prepare/"))]
    run = "runs/europarl_en_it_toy_s1/"  # a run's own files: seeds unpack side by side
    for name in ("tables.md", "report.html", run + "recipe.json", run + "steps.json", "stats/baseline/heads.csv",
                 "stats/syntax/heads.csv", "curves/grad/curve.csv", "curves/confidence/curve.csv",
                 "results/baseline/result.json", "results/baseline/training.json",
                 "results/enc_l0_0/generate.txt.gz", "models/enc_l0_0.05/gate_trace.jsonl.gz",
                 run + "logs/baseline.log.gz"):
        assert name in names, name
    docs = tmp_path / "docs"
    unpack(str(root / "out" / "results.tar.gz"), str(docs))
    for directory, _, files in os.walk(docs):
        for name in files:
            path = os.path.join(directory, name)
            text = gzip.open(path).read() if name.endswith(".gz") else open(path, "rb").read()
            if not name.endswith(".png"):
                assert str(root / "device").encode() not in text, path
    packed = (docs / "tables.md").read_text()
    report = subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "report", str(docs)],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert (docs / "tables.md").read_text() == packed
    assert "BLEU, heuristic pruning by grad" in packed and "Syntactic relations" in packed
    training = json.loads((docs / "results" / "baseline" / "training.json").read_text())
    assert training["updates"] == 30 and training["target_tokens_per_second"] > 0


def test_changing_the_baseline_reruns_exactly_what_reads_it(device_run):
    root, _, _ = device_run
    rerun = subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", "europarl_en_it",
                            "--scale", "toy", "--results", str(root / "device"),
                            "--set", "train.max_update=25"],
                           capture_output=True, text=True, timeout=1500,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert sorted(ran(rerun.stdout)) == sorted(STEPS_AFTER_DATA)
    assert "skip data (done)" in rerun.stdout
    with open(root / "device" / "results" / "baseline" / "training.json") as f:
        assert json.load(f)["updates"] == 25


def test_a_bad_setting_exits_2_in_one_line_before_any_step(tmp_path):
    process = subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", "europarl_en_it",
                              "--scale", "toy", "--results", str(tmp_path / "r"), "--set", "train.seed=x"],
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 2
    assert process.stderr.strip() == "fairseq-heads recipe: error: --set train.seed: expected int, got 'x'"
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------ experiment (b): the LM
LM_L0 = [f"{step}{lam}" for lam in ("0.05", "0.5", "0") for step in ("l0_", "pruned_l0_", "result_l0_", "stats_l0_")]


def recipe(*args):
    return subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", "lm_gutenberg_large",
                           "--scale", "toy", *args], capture_output=True, text=True, timeout=1500,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_queue_lm")
    process = recipe("--results", str(root / "results"), "--jobs", "2", "--pack", str(root / "out" / "results.tar.gz"))
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return root, process


def test_the_lm_experiment_trains_a_gated_llama_prunes_it_and_reports(lm_run):
    root, process = lm_run
    assert sorted(ran(process.stdout)) == sorted(["data", "open_mask", "baseline", "result_baseline", "stats",
                                                  *LM_L0, "curve_grad", "curve_confidence", "report"])
    results = root / "results"
    baseline = json.loads((results / "results" / "baseline" / "result.json").read_text())
    assert baseline["heads_total"] == 8 and baseline["heads_kept"] == 8 and baseline["perplexity"] > 1
    # the baseline trained with every gate fixed open: no gate moved from its initial log-alpha
    control = json.loads((results / "results" / "l0_0" / "result.json").read_text())
    assert control["l0_lambda"] == 0 and control["checkpoint"] == "models/pruned_l0_0/checkpoint.pt"
    trace = [json.loads(line) for line in open(results / "models" / "l0_0.5" / "gate_trace.jsonl")]
    assert {h["log_alpha"] for h in trace[0]["heads"]} == {3.0}
    heads = (results / "stats" / "baseline" / "heads.csv").read_text().splitlines()[0].split(",")
    for column in ("previous_token_mass", "induction", "copying_score", "duplicate_token_mass", "confidence",
                   "lrp", "grad", "positional_share", "rare_share"):
        assert any(c.startswith(column) for c in heads), column
    tables = (results / "tables.md").read_text()
    assert "## 2. L0 sweep" in tables and "In-context learning on the subset's text" in tables
    with tarfile.open(root / "out" / "results.tar.gz") as tar:
        names = tar.getnames()
    assert "results/l0_0.5/result.json" in names and "curves/grad/curve.csv" in names
    assert not [n for n in names if n.endswith(".pt")]


def test_changing_the_l0_settings_reruns_the_sweep_and_nothing_before_it(lm_run):
    root, _ = lm_run
    process = recipe("--results", str(root / "results"), "--set", "l0.updates=15")
    assert process.returncode == 0, process.stderr[-3000:]
    assert sorted(ran(process.stdout)) == sorted(LM_L0 + ["report"])


# ------------------------------------------------------------------ experiment (c): throughput
def test_the_throughput_experiment_measures_each_pair_side_by_side(tmp_path):
    process = subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", "throughput_europarl",
                              "--scale", "toy", "--results", str(tmp_path / "r"), "--pack", str(tmp_path / "out.tar.gz")],
                             capture_output=True, text=True, timeout=1500, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "bench" / "summary" / "throughput.json").read_text())
    rates = report["training"]["target_tokens_per_second"]
    assert len(rates["plain"]) == len(rates["gated"]) == 2 and min(rates["plain"] + rates["gated"]) > 0
    assert report["stats_over_fairseq_validate"]["stats_s"] > 0 and report["stats_over_fairseq_validate"]["validate_s"] > 0
    decode = report["decode"]["results"]
    assert [r["fraction_kept"] for r in decode] == [0.5, 0.25]
    # pruning removes computation only: the pruned model translates as the masked one, and the
    # FLOPs predict a gain that grows with the heads removed
    assert all(r["same_translations"] for r in decode)
    assert 1 < decode[0]["predicted_speedup_flops"] < decode[1]["predicted_speedup_flops"]
    assert report["machine"]["cpu_count"] >= 1
    with tarfile.open(tmp_path / "out.tar.gz") as tar:
        assert "bench/summary/throughput.json" in tar.getnames()
