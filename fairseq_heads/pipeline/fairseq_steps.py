"""The work of the recipes' steps, in this process where fairseq allows it: `fairseq-heads`
commands through their own argument parsers (the same checks as on the command line), and
fairseq-generate through fairseq's own `main` (no process start, no re-import of torch and
fairseq for each BLEU). Training runs as its own process (`train_argv`): fairseq-train's
global state and its CUDA memory end with it.
"""
import argparse
import json
import os
import platform
import re
import statistics
import sys
from types import ModuleType
from typing import Dict, List, Optional


class StepError(Exception):
    pass


def run_fairseq_heads(command: ModuleType, argv: List[str]) -> None:
    """Run `fairseq-heads <command> ARGV` in this process: the command module's `add_arguments`
    and `run` (a module of fairseq_heads.commands), as cli.py wires them. A non-zero exit raises
    StepError."""
    name = command.__name__.rsplit(".", 1)[-1].replace("_", "-")
    parser = argparse.ArgumentParser(prog=f"fairseq-heads {name}")
    command.add_arguments(parser)
    args = parser.parse_args([str(a) for a in argv])
    status = command.run(args)
    if status:
        raise StepError(f"fairseq-heads {name} exited with {status}")


def train_argv(data_bin: str, options: List[str]) -> List[str]:
    """fairseq-train as a module of this Python (no console script needed where the package
    is only on PYTHONPATH, as on a bare GPU machine)."""
    return [sys.executable, "-m", "fairseq_cli.train", data_bin, *[str(o) for o in options]]


def generate(data_bin: str, options: List[str], out_file: str) -> None:
    """fairseq-generate DATA_BIN OPTIONS in this process; its output (S/T/H/D lines and the
    score line) goes to `out_file`."""
    from fairseq import options as fairseq_options
    from fairseq_cli import generate as fairseq_generate

    results_path = os.path.dirname(os.path.abspath(out_file))
    # fairseq 0.12's batch_by_size drops the last (n mod --required-batch-size-multiple) sentences
    # (default 8: 1,997 sentences of a test set are scored as 1,992); 1 scores every sentence
    options = ["--required-batch-size-multiple", 1, *options]
    parser = fairseq_options.get_generation_parser()
    # as fairseq_cli.generate.cli_main: its parser lacks --arch otherwise
    parser.add_argument("--arch", "-a", metavar="ARCH", default="wav2vec2")
    args = fairseq_options.parse_args_and_arch(
        parser, input_args=[data_bin, *[str(o) for o in options], "--results-path", results_path])
    fairseq_generate.main(args)
    written = os.path.join(results_path, f"generate-{args.gen_subset}.txt")
    os.replace(written, out_file)


_JSON_RECORD = re.compile(r"\| (train_inner|train|valid) \| (\{.*\})\s*$")


def training_summary(log_path: str) -> Dict[str, object]:
    """What a fairseq-train log (--log-format json) says of the run: each epoch's train and
    valid records, the last update, and target tokens per second (fairseq's `wps`: target
    tokens; the epochs' rates weighted by their training wall time, and the steady rate of the
    --log-interval records)."""
    epochs, valid, inner = [], [], []
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            match = _JSON_RECORD.search(line)
            if not match:
                continue
            try:
                record = json.loads(match.group(2))
            except ValueError:
                continue
            {"train": epochs, "valid": valid, "train_inner": inner}[match.group(1)].append(record)

    def number(record, name) -> Optional[float]:
        try:
            return float(record[name])
        except (KeyError, TypeError, ValueError):
            return None

    rated = [(number(r, "train_wps"), number(r, "train_train_wall")) for r in epochs]
    rated = [(wps, wall) for wps, wall in rated if wps is not None]
    weighted = [(wps, wall) for wps, wall in rated if wall]
    total_wall = sum(wall for _, wall in weighted)
    # fairseq logs train_wall in whole seconds: an epoch shorter than half a second logs 0, and
    # its wps (timed precisely) is then averaged unweighted
    overall = (round(sum(w * t for w, t in weighted) / total_wall) if total_wall
               else round(statistics.fmean(wps for wps, _ in rated)) if rated else None)
    return {
        "epochs": len(epochs),
        "updates": int(number(epochs[-1], "train_num_updates") or 0) if epochs else 0,
        "train_wall_seconds": round(total_wall, 1),
        "target_tokens_per_second": overall,
        # the steady rate: the median of the --log-interval records (train_inner: keys without
        # the tag) after the first (start-up, CUDA warm-up); None for a run too short for two
        "steady_target_tokens_per_second": (round(statistics.median(number(r, "wps") for r in inner[1:]))
                                            if len(inner) > 1 else None),
        "best_valid_loss": min((number(r, "valid_loss") for r in valid if number(r, "valid_loss") is not None),
                               default=None),
        "train": epochs,
        "valid": valid,
    }


def machine_info() -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info
