"""The runner's step keys (runner.py): a hash of a step's name, its settings and the keys of the
steps it reads, so that a change reaches exactly the steps downstream of it."""
import dataclasses
import hashlib
import json
from typing import Dict, Mapping, Optional, Sequence


def step_key(step, input_keys: Mapping[str, str]) -> str:
    """sha256 of the step's name, settings and its inputs' keys (16 hex digits)."""
    payload = json.dumps({"name": step.name, "settings": step.settings,
                          "inputs": {name: input_keys[name] for name in step.inputs}},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def compute_keys(steps: Sequence) -> Dict[str, str]:
    """Every step's key, in order; a step may read only steps declared before it."""
    keys: Dict[str, str] = {}
    for step in steps:
        if step.name in keys:
            raise ValueError(f"two steps are named {step.name}")
        missing = [name for name in step.inputs if name not in keys]
        if missing:
            raise ValueError(f"step {step.name} reads {', '.join(missing)}, not declared before it")
        keys[step.name] = step_key(step, keys)
    return keys


def earlier_reason(step, input_keys: Mapping[str, str], found: str) -> Optional[str]:
    """Why the step may resume a partial output of key `found`: the reason of the first of its
    `resumable_from` settings that had that key (the same inputs), or None."""
    for why, settings in step.resumable_from:
        if step_key(dataclasses.replace(step, settings=settings), input_keys) == found:
            return why
    return None
