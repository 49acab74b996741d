"""The recipes as code: steps keyed by their settings and their inputs' keys (runner), configs
per recipe and scale with --set overrides (config, recipes), the translation recipe's steps
(nmt), the work of a step in this process where fairseq allows it (fairseq_steps), and the
committed subset of a results folder (pack). `fairseq-heads recipe` and `publish` are
commands/recipe.py and commands/publish.py."""
from .config import apply_overrides
from .runner import Runner, Step, StepContext, compute_keys

__all__ = ["Runner", "Step", "StepContext", "apply_overrides", "compute_keys"]
