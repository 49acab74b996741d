"""The device and batching options of every command that runs a model (`stats`, `curve`,
`lm-result`), declared once so that they are spelled, checked and meant the same everywhere:

    --cpu             run on CPU even if CUDA is available (default: CUDA when there is one)
    --max-tokens N    tokens per batch
    --batch-size N    sentences per batch
    --autocast bf16   bf16 matrix products, fp32 weights (precision.py)

Each command keeps its own defaults (those it had before the options were shared, so that its
results do not change); a batch is full at whichever limit it reaches first.
"""
import argparse
from typing import NamedTuple, Optional

from ..precision import AUTOCAST_CHOICES, AUTOCAST_HELP, autocast, check_autocast


class DeviceAndBatch(NamedTuple):
    cpu: bool
    max_tokens: Optional[int]
    batch_size: Optional[int]
    autocast: str = "none"

    def device_type(self) -> str:
        """Where the model runs ('cuda' or 'cpu'), as place_model decides it."""
        import torch

        return "cuda" if torch.cuda.is_available() and not self.cpu else "cpu"

    def precision(self):
        """The --autocast context for this device."""
        return autocast(self.autocast, self.device_type())


def add_device_and_batch_arguments(parser: argparse.ArgumentParser, *, max_tokens: Optional[int],
                                   batch_size: Optional[int]) -> None:
    """--cpu, --max-tokens and --batch-size, with this command's defaults (None: no limit)."""
    group = parser.add_argument_group("device and batching")
    group.add_argument("--cpu", action="store_true", help="run on CPU even if CUDA is available")
    # Parsed by device_and_batch (not argparse's type=int): a bad value is one line naming it.
    group.add_argument("--max-tokens", default=max_tokens, metavar="N",
                       help=f"tokens per batch (default: {max_tokens or 'no limit'})")
    group.add_argument("--batch-size", default=batch_size, metavar="N",
                       help=f"sentences per batch (default: {batch_size or 'no limit'})")
    # a plain string checked by device_and_batch: a bad value is the same one line everywhere
    group.add_argument("--autocast", default="none", metavar="{" + ",".join(AUTOCAST_CHOICES) + "}",
                       help=AUTOCAST_HELP)


def _positive(value, option: str) -> Optional[int]:
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        raise ValueError(f"{option}: expected a whole number >= 1, got {value!r}")
    return number


def device_and_batch(args: argparse.Namespace) -> DeviceAndBatch:
    """The checked options (ValueError naming the option: a one-line error, exit status 2)."""
    return DeviceAndBatch(bool(args.cpu), _positive(args.max_tokens, "--max-tokens"),
                          _positive(args.batch_size, "--batch-size"),
                          check_autocast(getattr(args, "autocast", "none")))
