"""Carrying a results folder's unfinished trainings to another machine: a compact form of each
resumable step's `OUT.partial/` that can be committed, and laid out again in a results folder of
the same recipe, where `fairseq-heads recipe` resumes it.

Why: a long CPU training (the Europarl baseline: many 3-hour sessions) outlives the machine it
started on, and only what is committed reaches the next one. The data it reads is not carried
(tens of MB, and the recipe's `data` step makes it again from the corpus): the carried form
records a digest of each input step's files, and unpacking refuses a results folder whose
inputs differ, so that a resumed training never reads other data under the same key.

What is carried of a step (CARRIED below):
- every file of `OUT.partial/` but the checkpoints (its key, its validation trace), its log,
  and the folders the recipe derives from the training as it runs (the formation curve's points);
- its last checkpoint, `checkpoint_last.pt`, with the model's weights exact and the optimiser
  state's float32 tensors (Adam's two moments) rounded to bfloat16: half the optimiser's size
  (on the Europarl model, 183 MB become 122 MB). A training resumed from it takes the same data
  order, learning rate and step count; its moments differ by bf16 rounding (a relative 2^-9),
  which the tests bound on a real resumed update;
- its best checkpoint (`checkpoint_best.pt`, what the recipe's later steps read) only when it is
  not the last one (the valid loss rose since), and then without optimiser state (its weights
  are what is read of it); when it is the last one, unpacking writes it from the last.

What is carried of a finished step (DONE below), so that a protocol whose steps span sessions
(the L0 phases read the finished baseline, the fixed-mask phases the L0 models) goes on: every
done step of the recipe that descends from a training (steps made from the corpus alone, the
data and the parsed set, are made again, as for the unfinished ones), with its marker, its log
and its output folder: every file but the checkpoints, and its `checkpoint_best.pt` and `checkpoint_last.pt` (what later
steps read) with the weights exact and no optimiser state, one file when they are the same
update; its interval checkpoints stay behind (the formation points computed from them are
carried). The same finished step packed again gives the same bytes, which git stores once.
"""
import gzip
import hashlib
import json
import os
import shutil
from typing import Dict, Iterable, List, Mapping, Sequence, Tuple

import torch

from ..files import staged_dir, write_text_atomic
from .runner import LOGS, MARKERS, STEP_KEY_FILE, Step

CARRY_FILE = "carry.json"
CHECKPOINT = "checkpoint_last.pt"
CARRIED_CHECKPOINT = "checkpoint_last.carried.pt"
BEST = "checkpoint_best.pt"
CARRIED_BEST = "checkpoint_best.carried.pt"
CARRY_FORMAT = 2
READABLE_FORMATS = (1, 2)  # format 1: unfinished trainings only
DONE_CHECKPOINTS = (BEST, CHECKPOINT)
LOG_FILE = "step.log.gz"
# folders of the results folder that a running training's companions fill and that outlive its
# checkpoints: `formation_points<suffix>` (recipes/europarl_en_it/watch_formation.py)
DERIVED_FOLDERS = ("formation_points",)


# ------------------------------------------------------------------ the checkpoint (pure)

def _round_tensors(value, path: Tuple, rounded: List[List]):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32 and value.dim() > 0:
        rounded.append(list(path))
        return value.to(torch.bfloat16)
    if isinstance(value, dict):
        return {k: _round_tensors(v, path + (k,), rounded) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_round_tensors(v, path + (i,), rounded) for i, v in enumerate(value))
    return value


def compact_checkpoint(state: Mapping) -> dict:
    """A fairseq checkpoint with its optimiser state's float32 tensors in bfloat16 (weights,
    options, data-iterator and scheduler state untouched), and the paths it rounded under
    "carried_rounded" so that `expand_checkpoint` gives them back their dtype."""
    if "last_optimizer_state" not in state:
        raise ValueError("not a resumable fairseq checkpoint: no 'last_optimizer_state'")
    rounded: List[List] = []
    compact = dict(state)
    compact["last_optimizer_state"] = _round_tensors(state["last_optimizer_state"], (), rounded)
    compact["carried_rounded"] = rounded
    return compact


def expand_checkpoint(compact: Mapping) -> dict:
    """The inverse of `compact_checkpoint` up to bf16 rounding: the rounded tensors in float32."""
    state = dict(compact)
    rounded = state.pop("carried_rounded", None)
    if rounded is None:
        raise ValueError("not a carried checkpoint: no 'carried_rounded'")
    optimizer = state["last_optimizer_state"]
    for path in rounded:
        parent = optimizer
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = parent[path[-1]].to(torch.float32)
    return state


def folder_digest(folder: str, skip_suffixes: Sequence[str] = (".log",)) -> str:
    """sha256 over every file's relative path and contents (logs skipped: they hold times and
    paths, not data)."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(tuple(skip_suffixes)):
                continue
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, folder).encode("utf-8") + b"\0")
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------ packing

def _updates(state: Mapping):
    return (state.get("optimizer_history") or [{}])[-1].get("num_updates")


def _carry_best(partial: str, last_updates, target: str):
    """"last" (the best checkpoint is the last one), "own" (carried beside it, weights only) or
    None (there is none yet)."""
    path = os.path.join(partial, BEST)
    if not os.path.isfile(path):
        return None
    best = torch.load(path, map_location="cpu", weights_only=False)
    if _updates(best) == last_updates:
        return "last"
    best = {k: v for k, v in best.items() if k != "last_optimizer_state"}
    torch.save(best, os.path.join(target, CARRIED_BEST))
    return "own"


def _marker_key(results: str, name: str):
    try:
        with open(os.path.join(results, MARKERS, name + ".json"), encoding="utf-8") as f:
            return json.load(f).get("key")
    except (OSError, ValueError):
        return None


def carried_steps(results: str, steps: Iterable[Step]) -> List[Step]:
    """The resumable steps of `steps` with a checkpoint in their `OUT.partial/` in `results`."""
    return [s for s in steps if s.resumable and s.out is not None
            and os.path.isfile(os.path.join(results, s.out + ".partial", CHECKPOINT))]


def _pack_log(results: str, name: str, target: str) -> bool:
    """TARGET/step.log.gz from the step's log, if it has one (gzip without a time: the same log
    gives the same bytes)."""
    log = os.path.join(results, LOGS, name + ".log")
    if not os.path.isfile(log):
        return False
    with open(log, "rb") as f, open(os.path.join(target, LOG_FILE), "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as g:
        shutil.copyfileobj(f, g)
    return True


def _unpack_log(source: str, results: str, name: str, moved=lambda data: data) -> None:
    os.makedirs(os.path.join(results, LOGS), exist_ok=True)
    with gzip.open(os.path.join(source, LOG_FILE), "rb") as g, open(os.path.join(results, LOGS, name + ".log"), "wb") as f:
        f.write(moved(g.read()))


def _mover(packed_from, results: str):
    """bytes -> bytes: the packed results folder's absolute path (`carry.json` "results") in a log
    or a statistics file made the unpacking folder's, so that `publish`, which makes the folder's
    own paths relative, leaves no other machine's path in the published files."""
    if not packed_from or os.path.abspath(packed_from) == results:
        return lambda data: data
    old, new = (os.path.abspath(packed_from) + os.sep).encode("utf-8"), (results + os.sep).encode("utf-8")
    return lambda data: data.replace(old, new)


def done_steps(results: str, steps: Iterable[Step], keys: Mapping[str, str]) -> List[Step]:
    """The steps of `steps` done in `results` under their key that descend from a training (a
    resumable step, or a step reading one, ...); the others (the data, the parsed set) are made
    again from the corpus on the other machine, and never committed."""
    from_training, done = set(), []
    for s in steps:  # in order: a step reads only steps declared before it
        if s.resumable or from_training.intersection(s.inputs):
            from_training.add(s.name)
            if s.out is not None and _marker_key(results, s.name) == keys[s.name] \
                    and os.path.isdir(os.path.join(results, s.out)):
                done.append(s)
    return done


def weights_only(state: Mapping) -> dict:
    """A fairseq checkpoint without its optimiser state: what fairseq-generate, `stats` and
    --finetune-from-model read of a finished model."""
    return {k: v for k, v in state.items() if k != "last_optimizer_state"}


def _pack_done(results: str, step: Step, folder: str) -> dict:
    """DONE/<step>/out: the output folder's files but the checkpoints, best and last weights only;
    DONE/<step>/step.log.gz: its log (a BLEU step reads the training's speed from it)."""
    out, target = os.path.join(results, step.out), os.path.join(folder, "out")
    os.makedirs(target)
    log = _pack_log(results, step.name, folder)
    files = []
    for root, dirs, names in os.walk(out):
        dirs.sort()
        for name in sorted(names):
            relative = os.path.relpath(os.path.join(root, name), out)
            if name.endswith(".pt"):
                continue
            os.makedirs(os.path.dirname(os.path.join(target, relative)), exist_ok=True)
            shutil.copy2(os.path.join(root, name), os.path.join(target, relative))
            files.append(relative)
    checkpoints, written = {}, {}  # checkpoint name -> the carried file; update -> that file
    for name in DONE_CHECKPOINTS:
        path = os.path.join(out, name)
        if os.path.isfile(path):
            state = torch.load(path, map_location="cpu", weights_only=False)
            updates = _updates(state)
            if updates is None or updates not in written:  # best == last: one file
                torch.save(weights_only(state), os.path.join(target, name))
                written[updates] = name
            checkpoints[name] = written[updates] if updates is not None else name
    with open(os.path.join(results, MARKERS, step.name + ".json"), encoding="utf-8") as f:
        marker = json.load(f)
    return {"out": step.out, "key": marker["key"], "marker": marker, "files": files, "checkpoints": checkpoints,
            "log": log}


def _unpack_done(folder: str, results: str, name: str, carried: Mapping, moved) -> None:
    source = os.path.join(folder, "out")
    with staged_dir(os.path.join(results, carried["out"])) as staging:
        for relative in carried["files"]:
            os.makedirs(os.path.dirname(os.path.join(staging, relative)), exist_ok=True)
            shutil.copy2(os.path.join(source, relative), os.path.join(staging, relative))
        for checkpoint, carried_file in carried["checkpoints"].items():
            shutil.copy2(os.path.join(source, carried_file), os.path.join(staging, checkpoint))
    if carried.get("log"):
        _unpack_log(folder, results, name, moved)
    os.makedirs(os.path.join(results, MARKERS), exist_ok=True)
    write_text_atomic(os.path.join(results, MARKERS, name + ".json"), json.dumps(carried["marker"]) + "\n")


def _derived_folders(results: str) -> List[str]:
    return sorted(name for name in os.listdir(results)
                  if any(name.startswith(prefix) for prefix in DERIVED_FOLDERS)
                  and os.path.isdir(os.path.join(results, name)))


def pack_carry(results: str, dest: str, steps: Sequence[Step], keys: Mapping[str, str],
               invocation: Mapping) -> dict:
    """Write DEST (replaced whole): carry.json and, per carried step, its files. `invocation`
    ({"recipe", "scale", "overrides"}) is how to rebuild the steps on the other machine."""
    results = os.path.abspath(results)
    by_name = {s.name: s for s in steps}
    chosen = carried_steps(results, steps)
    done = done_steps(results, steps, keys)
    if not chosen and not done:
        raise ValueError(f"{results}: no training to carry (no models/*.partial/{CHECKPOINT}, "
                         f"no finished step made from a training)")
    record = {"format": CARRY_FORMAT, "invocation": dict(invocation), "results": results, "steps": {}, "done": {},
              "inputs": {}}
    carried_names = {s.name for s in chosen} | {s.name for s in done}
    with staged_dir(dest) as staging:
        for step in chosen:
            partial = os.path.join(results, step.out + ".partial")
            with open(os.path.join(partial, STEP_KEY_FILE), encoding="utf-8") as f:
                key = f.read().strip()
            if key != keys[step.name]:
                raise ValueError(f"{partial}: its key is not the recipe's key for {step.name} "
                                 f"(the folder was trained under other settings)")
            state = torch.load(os.path.join(partial, CHECKPOINT), map_location="cpu", weights_only=False)
            target = os.path.join(staging, step.name)
            os.makedirs(target)
            torch.save(compact_checkpoint(state), os.path.join(target, CARRIED_CHECKPOINT))
            best = _carry_best(partial, _updates(state), target)
            files = sorted(n for n in os.listdir(partial)
                           if os.path.isfile(os.path.join(partial, n)) and not n.endswith(".pt"))
            for name in files:
                shutil.copy2(os.path.join(partial, name), os.path.join(target, name))
            log = _pack_log(results, step.name, target)
            extra = state.get("extra_state") or {}
            record["steps"][step.name] = {
                "out": step.out, "key": key, "files": files, "log": log,
                "num_updates": _updates(state), "best": best,
                "epoch": (extra.get("train_iterator") or {}).get("epoch"),
                "best_loss": (extra.get("best") if isinstance(extra.get("best"), (int, float)) else None)}
        for step in done:
            record["done"][step.name] = _pack_done(results, step, os.path.join(staging, "done", step.name))
        for step in [*chosen, *done]:
            for name in (n for n in step.inputs if n not in carried_names):
                out = by_name[name].out
                marker = _marker_key(results, name)
                if marker != keys[name] or out is None or not os.path.isdir(os.path.join(results, out)):
                    raise ValueError(f"step {name} (read by {step.name}) is not done in {results}")
                record["inputs"][name] = {"out": out, "key": marker,
                                          "digest": folder_digest(os.path.join(results, out))}
        for folder in _derived_folders(results):
            shutil.copytree(os.path.join(results, folder), os.path.join(staging, "derived", folder))
        record["derived"] = _derived_folders(results)
        write_text_atomic(os.path.join(staging, CARRY_FILE), json.dumps(record, indent=1) + "\n")
    return record


# ------------------------------------------------------------------ unpacking

def read_carry(dest: str) -> dict:
    path = os.path.join(dest, CARRY_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except OSError:
        raise ValueError(f"{path}: not found: not a carried training") from None
    except ValueError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if record.get("format") not in READABLE_FORMATS:
        raise ValueError(f"{path}: format {record.get('format')!r}, this version reads "
                         f"{', '.join(map(str, READABLE_FORMATS))}")
    record.setdefault("done", {})
    return record


def check_unpack(dest: str, results: str, keys: Mapping[str, str]) -> dict:
    """Every reason not to lay DEST out in RESULTS, as one ValueError, before anything is written:
    a step whose key the recipe now computes otherwise, an input not done or with other files,
    a step already there."""
    record = read_carry(dest)
    results = os.path.abspath(results)
    for name, carried in [*record["steps"].items(), *record["done"].items()]:
        if keys.get(name) != carried["key"]:
            raise ValueError(f"step {name}: the recipe's key is {keys.get(name)}, the carried training's "
                             f"{carried['key']} (its settings or code differ)")
        for where in (carried["out"], carried["out"] + ".partial"):
            if os.path.exists(os.path.join(results, where)):
                raise ValueError(f"{os.path.join(results, where)} exists: remove it to lay the carried "
                                 f"training out there")
    for name, carried in record["inputs"].items():
        marker = _marker_key(results, name)
        if marker != carried["key"] or not os.path.isdir(os.path.join(results, carried["out"])):
            raise ValueError(f"step {name} is not done in {results} with the carried key {carried['key']}: "
                             f"run the recipe with `--only {name}` first")
        digest = folder_digest(os.path.join(results, carried["out"]))
        if digest != carried["digest"]:
            raise ValueError(f"{os.path.join(results, carried['out'])}: its files differ from those the carried "
                             f"training read (digest {digest[:12]}, carried {carried['digest'][:12]})")
    for folder in record.get("derived", []):
        if os.path.exists(os.path.join(results, folder)):
            raise ValueError(f"{os.path.join(results, folder)} exists: remove it to lay the carried one out")
    return record


def _move_json_paths(folder: str, moved) -> None:
    for root, _, names in os.walk(folder):
        for path in (os.path.join(root, n) for n in names if n.endswith(".json")):
            with open(path, "rb") as f:
                data = f.read()
            if moved(data) != data:
                with open(path, "wb") as f:
                    f.write(moved(data))


def unpack_carry(dest: str, results: str, keys: Mapping[str, str]) -> Dict[str, dict]:
    """Lay DEST out in RESULTS (checked first: `check_unpack`); returns its record (carry.json)."""
    record = check_unpack(dest, results, keys)
    results = os.path.abspath(results)
    moved = _mover(record.get("results"), results)
    for name, carried in record["steps"].items():
        source = os.path.join(dest, name)
        partial = os.path.join(results, carried["out"] + ".partial")
        with staged_dir(partial) as staging:
            for file in carried["files"]:
                shutil.copy2(os.path.join(source, file), os.path.join(staging, file))
            compact = torch.load(os.path.join(source, CARRIED_CHECKPOINT), map_location="cpu", weights_only=False)
            torch.save(expand_checkpoint(compact), os.path.join(staging, CHECKPOINT))
            if carried.get("best") == "last":
                shutil.copy2(os.path.join(staging, CHECKPOINT), os.path.join(staging, BEST))
            elif carried.get("best") == "own":
                shutil.copy2(os.path.join(source, CARRIED_BEST), os.path.join(staging, BEST))
        if carried.get("log"):
            _unpack_log(source, results, name, moved)
    for name, carried in record["done"].items():
        _unpack_done(os.path.join(dest, "done", name), results, name, carried, moved)
    for folder in record.get("derived", []):
        shutil.copytree(os.path.join(dest, "derived", folder), os.path.join(results, folder))
        _move_json_paths(os.path.join(results, folder), moved)
    return record
