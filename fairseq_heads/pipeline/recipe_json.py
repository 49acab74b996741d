"""A results folder's `recipe.json`: how it was made (the recipe, its scale, the `--set`s of this
invocation and of the earlier ones on the same folder, the config, the machine), and the run's
name in a pack (`runs/<name>/`), which `publish` reads back from it."""
import json
import os
from typing import List, Tuple

from ..files import write_text_atomic

RECIPE_JSON = "recipe.json"


def packed_run_name(recipe: str, scale: str, config) -> str:
    """runs/<this>/ in a pack: the recipe, its scale and the training seed (seeds side by side)."""
    train = getattr(getattr(config, "nmt", config), "train", None)
    return f"{recipe}_{scale}" + (f"_s{train.seed}" if train is not None else "")


def earlier_overrides(recipe_json: str, overrides: List[str]) -> List[List[str]]:
    """The `--set`s of the earlier invocations on this results folder that differ from this one
    (from its recipe.json, which this invocation replaces): a folder that grows by re-runs with
    other settings (the converged protocol's seeds, then its all-types point) keeps how to
    reproduce every step in it."""
    try:
        with open(recipe_json, encoding="utf-8") as f:
            previous = json.load(f)
    except (OSError, ValueError):
        return []
    earlier = [list(o) for o in previous.get("earlier_overrides", [])] + [list(previous.get("overrides", []))]
    kept = []
    for item in earlier:
        if item != list(overrides) and item not in kept:
            kept.append(item)
    return kept


def write_recipe_json(results: str, recipe: str, scale: str, overrides: List[str], config) -> None:
    """RESULTS/recipe.json for this invocation, keeping the earlier invocations' `--set`s."""
    from .config import config_dict
    from .fairseq_steps import machine_info

    path = os.path.join(results, RECIPE_JSON)
    write_text_atomic(path, json.dumps(
        {"recipe": recipe, "scale": scale, "overrides": overrides,
         "earlier_overrides": earlier_overrides(path, overrides),
         "config": config_dict(config), "machine": machine_info()}, indent=1) + "\n")


def read_recipe_json(results: str) -> dict:
    """RESULTS/recipe.json; ValueError (one line, naming the file) when it is missing or unreadable."""
    path = os.path.join(results, RECIPE_JSON)
    try:
        with open(path, encoding="utf-8") as f:
            recorded = json.load(f)
    except OSError:
        raise ValueError(f"{path}: not found: not a recipe's results folder") from None
    except ValueError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    missing = [k for k in ("recipe", "scale", "overrides") if k not in recorded]
    if missing:
        raise ValueError(f"{path}: no {missing[0]!r}: not written by `fairseq-heads recipe`")
    return recorded


def recorded_config(recorded: dict, source: str = RECIPE_JSON) -> Tuple[str, str, List[str], object]:
    """(recipe, scale, overrides, config) of a recipe.json's invocation: the config rebuilt from the
    recipe table and the `--set`s it records (so that a folder's step names and keys are the ones
    its run computed)."""
    from .config import apply_overrides
    from .recipes import RECIPES

    recipe, scale, overrides = recorded["recipe"], recorded["scale"], list(recorded["overrides"])
    if recipe not in RECIPES or scale not in RECIPES[recipe]:
        raise ValueError(f"{source}: recipe {recipe} --scale {scale}: no such recipe or scale here")
    return recipe, scale, overrides, apply_overrides(RECIPES[recipe][scale], overrides)
