"""recipes/multi30k_en_de/converged_plan.sh: the issue-13 runs, as one chain or two side by side.

The runs themselves are CPU hours (recipes/README.md); these tests check the plan's structure
through DRY_RUN: the two chains together are the whole plan, and no two runs share a model (a
lambda, seed and gate lr), which two chains writing to one results folder must never do."""
import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAN = os.path.join(REPO, "recipes", "multi30k_en_de", "converged_plan.sh")


def plan(chain: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", PLAN], env=dict(os.environ, CHAIN=chain, **env),
                          capture_output=True, text=True, timeout=60)


def dry_run(chain: str, published="/nonexistent") -> list:
    """Each run as (its settings, "run.sh VAR=value ...", and the models it names)."""
    process = plan(chain, DRY_RUN="1", PUBLISHED=str(published))
    assert process.returncode == 0, process.stderr
    return [tuple(line.split(" -> ")) for line in process.stdout.splitlines()]


def models(line: str) -> set:
    """The converged models one run.sh call trains, as recipes/paper_tables.sh names them."""
    settings = dict(re.findall(r"(\w+)=(\S+(?: [0-9.]+)*)", line.removeprefix("run.sh ")))
    suffix = "" if settings.get("GATE_LR_SCALE", "1000") == "1000" else f"_glr{settings['GATE_LR_SCALE']}"
    seeds = settings.get("SEEDS", "1").split()
    scratch = settings.get("SCRATCH_LAMBDAS", "").split()
    names = {f"enc_l0_{lam}_conv_s1{suffix}" for lam in settings.get("LAMBDAS_ENC", "").split()}
    for lam in settings.get("LAMBDAS_ALL", "").split():
        for seed in (seeds if lam in scratch else seeds[:1]):
            names.add(f"all_l0_{lam}_conv_s{seed}{suffix}")
            if lam in scratch:
                names.add(f"scratch_all_l0_{lam}_conv_s{seed}{suffix}")
    return names


def test_the_two_chains_are_the_whole_plan_each_run_once():
    everything, chain_a, chain_b = dry_run("all"), dry_run("A"), dry_run("B")
    assert sorted(chain_a + chain_b) == sorted(everything)
    assert len(set(everything)) == len(everything)
    # the order of `all` is the priority order: the encoder control, then the first
    # trained-vs-scratch pair; the heads-dying run, whose figure is published, last
    assert [line for line, _ in everything[:2]] == [
        "run.sh LAMBDAS_ENC=0", "run.sh LAMBDAS_ALL=0.02 SCRATCH_LAMBDAS=0.02 SEEDS=1"]
    assert everything[-1][0] == "run.sh GATE_LR_SCALE=100 LAMBDAS_ALL=0.02"


def test_each_run_names_the_models_the_recipe_trains():
    for line, named in dry_run("all"):
        assert set(named.split()) == models(line), line  # nothing published in /nonexistent


def test_the_dry_run_says_which_models_are_published(tmp_path):
    for model in ("enc_l0_0_conv_s1", "all_l0_0.02_conv_s1"):
        (tmp_path / "results" / model).mkdir(parents=True)
        (tmp_path / "results" / model / "result.json").write_text("{}")
    published = {line: named.partition(" (published: ")[2] for line, named in dry_run("all", tmp_path)}
    assert published["run.sh LAMBDAS_ENC=0"] == "enc_l0_0_conv_s1)"
    assert published["run.sh LAMBDAS_ALL=0.02 SCRATCH_LAMBDAS=0.02 SEEDS=1"] == "all_l0_0.02_conv_s1)"
    assert sum(map(bool, published.values())) == 2


def test_no_two_runs_train_the_same_model():
    seen = {}
    for line, _ in dry_run("all"):
        for name in models(line):
            assert name not in seen, f"{name} in both '{seen.get(name)}' and '{line}'"
            seen[name] = line
    # the trained-vs-scratch pairs of item 2: two layouts, two seeds, both sides
    for lam in ("0.005", "0.02"):
        for seed in (1, 2):
            assert {f"all_l0_{lam}_conv_s{seed}", f"scratch_all_l0_{lam}_conv_s{seed}"} <= set(seen)
    # and the full layout both ways: the lambda=0 control and all 144 heads from scratch, in
    # one run, so that no other chain trains the control's model beside it
    for seed in (1, 2):
        assert seen[f"all_l0_0_conv_s{seed}"] == seen[f"scratch_all_l0_0_conv_s{seed}"]


@pytest.mark.parametrize("chain", ["", "C", "a"])
def test_a_bad_chain_exits_2_with_one_line(chain):
    process = plan(chain)
    assert process.returncode == 2
    assert process.stdout == ""
    assert process.stderr.count("\n") == 1 and "CHAIN must be" in process.stderr


def test_prepare_runs_the_recipe_with_no_sweep():
    # the data, the baseline and its BLEU only: no model of the plan
    assert dry_run("prepare") == [("run.sh", "")]
