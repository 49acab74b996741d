"""The device and batching options of every command that runs a model (`stats`, `curve`,
`lm-result`), declared once so that they are spelled, checked and meant the same everywhere:

    --cpu             run on CPU even if CUDA is available (default: CUDA when there is one)
    --max-tokens N    tokens per batch
    --batch-size N    sentences per batch

Each command keeps its own defaults (those it had before the options were shared, so that its
results do not change); a batch is full at whichever limit it reaches first.
"""
import argparse
from typing import NamedTuple, Optional


class DeviceAndBatch(NamedTuple):
    cpu: bool
    max_tokens: Optional[int]
    batch_size: Optional[int]


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
                          _positive(args.batch_size, "--batch-size"))
