"""Carrying an unfinished training to another machine (pipeline/carry.py, `fairseq-heads carry`):
the compact checkpoint against the real one, and end to end on the toy recipe, a baseline killed
after update 5 carried into a fresh results folder whose data step ran again, resumed there to 10,
against the same baseline resumed in place; and each refusal, in one line, before any write."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from fairseq_heads.pipeline.carry import (BEST, CARRIED_BEST, CARRIED_CHECKPOINT, CARRY_FILE, CHECKPOINT,
                                          compact_checkpoint, expand_checkpoint, folder_digest, pack_carry,
                                          unpack_carry)
from fairseq_heads.pipeline.runner import Step
from fairseq_heads.pipeline.config import apply_overrides
from fairseq_heads.pipeline.recipes import RECIPES, recipe_steps
from fairseq_heads.pipeline.runner import STEP_KEY_FILE, compute_keys

TOY = RECIPES["europarl_en_it"]["toy"]
# the plateau stop writes the validation trace (it cannot hold in the two validations here)
SCHEDULE = ["train.validate_updates=5", "train.patience=0", "train.plateau_validations=3"]
# round-to-nearest bfloat16 keeps 8 significant bits: |x - bf16(x)| <= 2^-8 |x|
BF16_RELATIVE = 2.0 ** -8


def cli(*args, check=True):
    process = subprocess.run([sys.executable, "-m", "fairseq_heads.cli", *map(str, args)], capture_output=True,
                             text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if check:
        assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return process


def recipe(results, *settings, only="baseline"):
    return cli("recipe", "europarl_en_it", "--scale", "toy", "--results", results, "--only", only,
               *[arg for s in settings for arg in ("--set", s)]).stdout


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def adam_checkpoint():
    """A checkpoint-shaped state with a real Adam state after three steps."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 6)).pow(2).sum().backward()
        optimizer.step()
    return {"model": {k: v.clone() for k, v in model.state_dict().items()},
            "last_optimizer_state": optimizer.state_dict(),
            "extra_state": {"train_iterator": {"epoch": 2, "iterations_in_epoch": 7}, "val_loss": 3.5},
            "optimizer_history": [{"num_updates": 3, "lr_scheduler_state": {"best": 3.5}}]}


def test_the_compact_checkpoint_keeps_the_weights_and_rounds_only_the_moments():
    state = adam_checkpoint()
    compact = compact_checkpoint(state)
    moments = [t for entry in compact["last_optimizer_state"]["state"].values()
               for name, t in entry.items() if name in ("exp_avg", "exp_avg_sq")]
    assert moments and all(t.dtype == torch.bfloat16 for t in moments)
    assert all(compact["model"][k] is state["model"][k] for k in state["model"])  # untouched, not copied
    back = expand_checkpoint(compact)
    assert "carried_rounded" not in back
    assert back["extra_state"] == state["extra_state"] and back["optimizer_history"] == state["optimizer_history"]
    for index, entry in state["last_optimizer_state"]["state"].items():
        restored = back["last_optimizer_state"]["state"][index]
        assert torch.equal(restored["step"], entry["step"])  # the step count is exact
        for name in ("exp_avg", "exp_avg_sq"):
            assert restored[name].dtype == torch.float32
            error = (restored[name] - entry[name]).abs()
            assert bool((error <= BF16_RELATIVE * entry[name].abs()).all())
            assert not torch.equal(restored[name], entry[name]) or entry[name].abs().max() == 0
    assert back["last_optimizer_state"]["param_groups"] == state["last_optimizer_state"]["param_groups"]


def test_a_checkpoint_without_optimizer_state_is_refused():
    with pytest.raises(ValueError, match="last_optimizer_state"):
        compact_checkpoint({"model": {}})
    with pytest.raises(ValueError, match="carried"):
        expand_checkpoint({"model": {}, "last_optimizer_state": {}})


def baseline_key(settings) -> str:
    return compute_keys(recipe_steps(apply_overrides(TOY, settings), "/data", "/user_dir"))["baseline"]


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    """A baseline of 10 updates killed after its checkpoint at 5 (folder `killed`), carried
    (`carry`), laid out in a fresh folder whose data step ran again (`fresh`) and resumed there;
    the same killed folder resumed in place (`in_place`)."""
    root = tmp_path_factory.mktemp("carry")
    killed = root / "killed"
    recipe(killed, *SCHEDULE, "train.max_update=5")
    models = killed / "models"
    shutil.move(str(models / "baseline"), str(models / "baseline.partial"))
    os.remove(killed / ".steps" / "baseline.json")
    (models / "baseline.partial" / STEP_KEY_FILE).write_text(baseline_key([*SCHEDULE, "train.max_update=10"]))
    # the recipe.json of the killed run's own settings: what `carry pack` rebuilds the steps from
    (killed / "recipe.json").write_text(json.dumps({"recipe": "europarl_en_it", "scale": "toy",
                                                    "overrides": [*SCHEDULE, "train.max_update=10"]}))
    (killed / "formation_points" / "5").mkdir(parents=True)
    (killed / "formation_points" / "5" / "point.json").write_text('{"update": 5}\n')
    (killed / "formation_points" / "5" / "heads.json").write_text(json.dumps({"checkpoint": str(killed / "models")}))
    in_place = root / "in_place"
    shutil.copytree(killed, in_place)
    carry = root / "carry"
    packed = cli("carry", "pack", killed, carry).stdout
    fresh = root / "fresh"
    recipe(fresh, *SCHEDULE, "train.max_update=10", only="data")
    unpacked = cli("carry", "unpack", carry, fresh).stdout
    resumed = recipe(fresh, *SCHEDULE, "train.max_update=10")
    recipe(in_place, *SCHEDULE, "train.max_update=10")
    return dict(root=root, killed=killed, carry=carry, fresh=fresh, in_place=in_place, packed=packed,
                unpacked=unpacked, resumed=resumed)


def test_the_carried_training_resumes_as_the_one_resumed_in_place(carried):
    assert "carried baseline: update 5" in carried["packed"]
    assert "--only baseline" in carried["unpacked"] and "resume baseline" in carried["resumed"]
    record = json.loads((carried["carry"] / CARRY_FILE).read_text())
    assert set(record["inputs"]) == {"data"} and record["steps"]["baseline"]["num_updates"] == 5
    assert record["steps"]["baseline"]["best"] == "last"  # one validation: the best is the last
    # the data step made again from the corpus gave the same files (what unpacking checked)
    assert folder_digest(str(carried["fresh"] / "data")) == folder_digest(str(carried["killed"] / "data"))
    start = load(carried["killed"] / "models" / "baseline.partial" / "checkpoint_last.pt")
    ours = load(carried["fresh"] / "models" / "baseline" / "checkpoint_last.pt")
    theirs = load(carried["in_place"] / "models" / "baseline" / "checkpoint_last.pt")
    for state in (ours, theirs):
        assert state["optimizer_history"][-1]["num_updates"] == 10
    assert ours["extra_state"]["train_iterator"] == theirs["extra_state"]["train_iterator"]
    moved = max((theirs["model"][k].float() - start["model"][k].float()).abs().max().item() for k in start["model"])
    apart = max((ours["model"][k].float() - theirs["model"][k].float()).abs().max().item() for k in start["model"])
    assert moved > 0
    # five updates from moments rounded at a relative 2^-9 end a small part of their own step
    # apart (0.009 of it, measured); an unrelated training would be as far apart as the steps
    assert apart <= 0.1 * moved, (apart, moved)
    # the validations before the carry are kept: the plateau rule reads the whole record
    lines = (carried["fresh"] / "models" / "baseline" / "validations.jsonl").read_text().splitlines()
    assert [json.loads(line)["update"] for line in lines] == [5, 10]
    assert (carried["fresh"] / "formation_points" / "5" / "point.json").is_file()
    # the other machine's results path, in the carried statistics and log, is this folder's
    heads = json.loads((carried["fresh"] / "formation_points" / "5" / "heads.json").read_text())
    assert heads == {"checkpoint": str(carried["fresh"] / "models")}
    log = (carried["fresh"] / "logs" / "baseline.log").read_text()
    assert str(carried["killed"]) + os.sep not in log and str(carried["fresh"]) + os.sep in log


def test_the_carried_form_holds_no_full_checkpoint(carried):
    names = {p.name for p in carried["carry"].rglob("*.pt")}
    assert names == {CARRIED_CHECKPOINT}
    compact = os.path.getsize(next(carried["carry"].rglob(CARRIED_CHECKPOINT)))
    full = os.path.getsize(carried["killed"] / "models" / "baseline.partial" / "checkpoint_last.pt")
    assert compact < full


def one_line_refusal(process, *words):
    assert process.returncode == 2, process.stdout + process.stderr
    assert process.stderr.count("\n") == 1 and all(w in process.stderr for w in words), process.stderr


def test_unpacking_refuses_other_data_a_step_already_there_and_a_missing_input(carried, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(carried["fresh"], other)
    shutil.rmtree(other / "models" / "baseline")
    shutil.rmtree(other / "formation_points")
    with open(other / "data" / "bin" / "dict.src.txt", "a") as f:
        f.write("extra 1\n")
    one_line_refusal(cli("carry", "unpack", carried["carry"], other, check=False), "differ", "data")
    assert not (other / "models" / "baseline.partial").exists()  # nothing written
    one_line_refusal(cli("carry", "unpack", carried["carry"], carried["fresh"], check=False), "exists")
    empty = tmp_path / "empty"
    one_line_refusal(cli("carry", "unpack", carried["carry"], empty, check=False), "--only data")
    one_line_refusal(cli("carry", "unpack", tmp_path / "nothing", empty, check=False), CARRY_FILE)


def test_packing_refuses_a_folder_with_nothing_to_carry_or_a_running_recipe(carried, tmp_path):
    data_only = tmp_path / "data_only"  # the data step alone is made again, not carried
    shutil.copytree(carried["fresh"], data_only)
    shutil.rmtree(data_only / "models")
    os.remove(data_only / ".steps" / "baseline.json")
    one_line_refusal(cli("carry", "pack", data_only, tmp_path / "c", check=False), "no training to carry")
    one_line_refusal(cli("carry", "pack", tmp_path, tmp_path / "c", check=False), "recipe.json")
    from fairseq_heads.pipeline.folder_lock import folder_lock

    with folder_lock(str(carried["killed"])):
        one_line_refusal(cli("carry", "pack", carried["killed"], tmp_path / "c", check=False), "lock")
    assert not (tmp_path / "c").exists()


def test_a_best_checkpoint_older_than_the_last_is_carried_beside_it_without_optimizer_state(tmp_path):
    """The valid loss rose after the best checkpoint: the later steps read that one, so it goes
    along (its weights: the optimiser state is the last one's to resume from)."""
    results, carry, other = tmp_path / "results", tmp_path / "carry", tmp_path / "other"
    partial = results / "models" / "train.partial"
    partial.mkdir(parents=True)
    last, best = adam_checkpoint(), adam_checkpoint()
    best["optimizer_history"] = [{"num_updates": 2}]
    best["model"] = {k: v + 1 for k, v in best["model"].items()}
    torch.save(last, partial / CHECKPOINT)
    torch.save(best, partial / BEST)
    (partial / STEP_KEY_FILE).write_text("k")
    step = Step("train", "models/train", {}, argv=lambda context: [], resumable=True)
    record = pack_carry(str(results), str(carry), [step], {"train": "k"}, {"recipe": "r", "scale": "s", "overrides": []})
    assert record["steps"]["train"]["best"] == "own" and record["steps"]["train"]["num_updates"] == 3
    carried_best = load(carry / "train" / CARRIED_BEST)
    assert "last_optimizer_state" not in carried_best
    unpack_carry(str(carry), str(other), {"train": "k"})
    restored = load(other / "models" / "train.partial" / BEST)
    assert all(torch.equal(restored["model"][k], best["model"][k]) for k in best["model"])
    assert load(other / "models" / "train.partial" / CHECKPOINT)["optimizer_history"] == last["optimizer_history"]


def result_files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_finished_baseline_and_a_step_done_on_it_are_carried_and_a_later_step_reads_them(carried, tmp_path):
    """A protocol that spans machines: the finished baseline (weights only, best == last in one
    file) and its BLEU step go along with their markers; on the other machine the recipe skips
    both and the statistics step computes from the carried weights what it computes in place.
    Packed again, the same finished step gives the same bytes (git stores it once)."""
    origin, carry, again, other = tmp_path / "origin", tmp_path / "carry", tmp_path / "again", tmp_path / "other"
    shutil.copytree(carried["fresh"], origin)
    settings = [*SCHEDULE, "train.max_update=10"]
    recipe(origin, *settings, only="bleu_baseline")
    assert "carried baseline: finished" in cli("carry", "pack", origin, carry).stdout
    cli("carry", "pack", origin, again)
    record = json.loads((carry / CARRY_FILE).read_text())
    assert record["steps"] == {} and set(record["done"]) == {"baseline", "bleu_baseline"}
    assert set(record["inputs"]) == {"data"}  # what the other machine makes again and checks
    assert record["done"]["baseline"]["checkpoints"] == {BEST: BEST, CHECKPOINT: BEST}
    assert {p.name for p in carry.rglob("*.pt")} == {BEST}
    carried_file = carry / "done" / "baseline" / "out" / BEST
    assert carried_file.read_bytes() == (again / "done" / "baseline" / "out" / BEST).read_bytes()
    carried_state = load(carried_file)
    original = load(origin / "models" / "baseline" / BEST)
    assert "last_optimizer_state" not in carried_state
    assert all(torch.equal(carried_state["model"][k], original["model"][k]) for k in original["model"])

    recipe(other, *settings, only="data")
    assert "laid out baseline (finished)" in cli("carry", "unpack", carry, other).stdout
    out = recipe(other, *settings, only="bleu_baseline,stats")
    assert "skip baseline (done)" in out and "skip bleu_baseline (done)" in out and "run  stats" in out
    # the training's log goes along (a BLEU step reads the training's speed from it)
    assert (other / "logs" / "baseline.log").read_bytes() == (origin / "logs" / "baseline.log").read_bytes()
    assert load(other / "models" / "baseline" / CHECKPOINT).keys() == carried_state.keys()
    assert result_files(other / "results") == result_files(origin / "results")  # the BLEU step's output
    recipe(origin, *settings, only="stats")
    ours, theirs = result_files(other / "stats" / "baseline"), result_files(origin / "stats" / "baseline")
    assert ours.keys() == theirs.keys() and ours
    for name in (n for n in ours if n.endswith(".json")):
        assert _without_paths(json.loads(ours[name]), other) == _without_paths(json.loads(theirs[name]), origin), name
    # a carried finished step already there is refused like an unfinished one
    one_line_refusal(cli("carry", "unpack", carry, other, check=False), "exists")


def _without_paths(value, folder):
    """A result file's content with the results folder's path taken out (the files name their inputs)."""
    return json.loads(json.dumps(value).replace(str(folder), "RESULTS"))
