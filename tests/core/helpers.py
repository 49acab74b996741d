"""Build fairseq models in-process the way fairseq's CLIs do (options parser -> task -> model)."""
import os
import subprocess
import sys
from typing import List

import torch
from fairseq import options, tasks

import fairseq_heads  # noqa: F401  (registers model, criterion, task)

from .rounding import magnitude, sum_tolerance

USER_DIR = os.path.dirname(os.path.abspath(fairseq_heads.__file__))
BIN_DIR = os.path.dirname(sys.executable)


def write_dictionaries(directory, size=40) -> str:
    os.makedirs(directory, exist_ok=True)
    for lang in ("src", "tgt"):
        with open(os.path.join(directory, f"dict.{lang}.txt"), "w") as f:
            for i in range(size):
                f.write(f"w{i} {1000 - i}\n")
    return str(directory)


TINY_SIZES = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
              "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
              "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
              "--decoder-attention-heads", "4"]
TINY_WIDEST_SUM = 64  # TINY_SIZES' FFN width: the widest sum inside such a model


def reordered_tolerance(reference: torch.Tensor, widest_sum: int = TINY_WIDEST_SUM) -> float:
    """How far two float32 evaluations of one tiny model (TINY_SIZES or the LM tests' d=32 /
    FFN 64) may be apart when they differ only in the order of their sums (fewer heads after
    pruning, gates folded or reloaded, another attention kernel): the rounding bound of the
    widest sum (tests/core/rounding.py) at the scale of the outputs compared. For log-probs the
    widest sum may be the log-sum-exp over the vocabulary: pass max(TINY_WIDEST_SUM, vocab).
    ~5e-5 for |log p| ~ 6; any semantic difference (a wrong head, mask or cache step) moves the
    outputs by more than 1e-3. (model_rounding_tolerance in rounding.py is the worst case
    over every sum of the model, for kernels that differ in kind.)"""
    return sum_tolerance(torch.float32, widest_sum, magnitude(reference))


def build_model(data_dir, arch: str, extra: List[str] = (), task: str = "translation_heads"):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data_dir), "--task", task, "--arch", arch, "-s", "src", "-t", "tgt",
        "--user-dir", USER_DIR, "--dropout", "0", "--attention-dropout", "0", "--cpu",
        *TINY_SIZES, *extra])
    task_obj = tasks.setup_task(args)
    return task_obj, task_obj.build_model(args)


def random_batch(vocab: int, bsz=3, src_len=7, tgt_len=6, pad=1, eos=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (bsz, src_len), generator=g)
    src[:, -1] = eos
    src[0, :2] = pad  # left padding, as fairseq pads sources
    src[0, 2:] = torch.cat([torch.randint(4, vocab, (src_len - 3,), generator=g), torch.tensor([eos])])
    lengths = (src != pad).sum(1)
    prev = torch.randint(4, vocab, (bsz, tgt_len), generator=g)
    prev[:, 0] = eos
    return src, lengths, prev


def run_cli(args: List[str], cwd=None, timeout=600, env=None) -> subprocess.CompletedProcess:
    """Run a console script from this venv; returns the completed process (no check)."""
    exe = os.path.join(BIN_DIR, args[0])
    full_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run([exe, *args[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def toy_cli_common(data_bin) -> List[str]:
    """fairseq's CLIs on the toy corpus (conftest's toy_data_bin) with our user dir, on the CPU."""
    return [str(data_bin), "--user-dir", USER_DIR, "--task", "translation_heads", "-s", "src",
            "-t", "tgt", "--cpu", "--num-workers", "0", "--seed", "1"]


# a plain transformer's training on the toy corpus (with toy_train_args)
PLAIN_TRAINING = ["--arch", "transformer", "--criterion", "label_smoothed_cross_entropy",
                  "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "5e-3"]


def toy_train_args(data_bin, save_dir, *extra) -> List[str]:
    """A tiny fairseq-train on the toy corpus into `save_dir`; `extra` adds the model, criterion,
    optimizer (PLAIN_TRAINING) and the length of training."""
    return ["fairseq-train", *toy_cli_common(data_bin), *TINY_SIZES, "--share-all-embeddings",
            "--dropout", "0.1", "--max-tokens", "1500", "--adam-betas", "(0.9,0.98)",
            "--no-epoch-checkpoints", "--save-dir", str(save_dir), "--log-format", "json",
            "--log-interval", "5", "--no-progress-bar", *[str(a) for a in extra]]
