"""Build fairseq models in-process the way fairseq's CLIs do (options parser -> task -> model)."""
import os
import subprocess
import sys
from typing import List

import torch
from fairseq import options, tasks

import fairseq_heads  # noqa: F401  (registers model, criterion, task)

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
