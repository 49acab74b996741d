"""Building tiny `gated_llama` models in-process and running them: full sequence, incremental
(KV cache) and greedy decoding."""
import os
from typing import List

import torch
from fairseq import options, tasks

from core.helpers import USER_DIR
from core.rounding import sum_tolerance

# Two float32 evaluations of gated_llama_tiny that differ only in the order of their sums (the KV
# cache, fused against explicit attention, fewer heads, Hugging Face's eager kernels) differ by
# about the rounding bound of its widest sum (the FFN's 128 terms; tests/core/rounding.py) at
# the scale of its log-probabilities (|log p| <= 8 over 40 words at initialisation): 1.2e-4.
# Measured: 4.8e-7 (one ulp at |log p| ~ 4) under AVX512, AVX2 and default CPU kernels alike (the
# model cast to float64 gives the same: the log-softmax is float32); a semantic slip (a wrong
# head, mask, rotation or norm) moves them by more than 1e-3.
WIDEST_SUM, LPROBS_SCALE = 128, 8.0
LPROBS_TOLERANCE = sum_tolerance(torch.float32, WIDEST_SUM, LPROBS_SCALE)


def write_lm_dictionary(directory, size=40) -> str:
    """A language-model data directory's dict.txt with `size` made-up words."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "dict.txt"), "w") as f:
        for i in range(size):
            f.write(f"w{i} {1000 - i}\n")
    return str(directory)


def build_llama(data_dir, extra: List[str] = (), arch="gated_llama_tiny", seed=0):
    """(task, model) as fairseq-train builds them, in eval mode."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data_dir), "--task", "language_modeling_heads", "--arch", arch, "--user-dir", USER_DIR,
        "--cpu", "--tokens-per-sample", "64", *extra])
    torch.manual_seed(seed)
    task = tasks.setup_task(args)
    return task, task.build_model(args).eval()


def random_tokens(vocab: int, batch=3, length=12, seed=0, eos=2):
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(4, vocab, (batch, length), generator=g)
    out[:, 0] = eos
    return out


def full_lprobs(model, x):
    with torch.no_grad():
        return model.get_normalized_probs(model(x), log_probs=True)


def incremental_lprobs(model, x):
    """Log-probs with the KV cache, one token at a time (as fairseq's generator feeds them)."""
    state, steps = {}, []
    with torch.no_grad():
        for t in range(x.size(1)):
            out = model.decoder(x[:, : t + 1], incremental_state=state)
            steps.append(model.get_normalized_probs(out, log_probs=True))
    return torch.cat(steps, dim=1)


def greedy(model, x, steps=10, incremental=True):
    """Greedy continuation of x; also the smallest top-1/top-2 log-prob margin seen (a tie
    could flip between machines; the tests check the margin is above twice the rounding bound,
    so that two paths within LPROBS_TOLERANCE of each other pick the same token)."""
    state = {} if incremental else None
    margin = float("inf")
    with torch.no_grad():
        if incremental:  # the cache of the prefix (fairseq's decoder reads only the last token)
            for t in range(1, x.size(1)):
                model.decoder(x[:, :t], incremental_state=state)
        for _ in range(steps):
            out = model.decoder(x, incremental_state=state)
            lprobs = model.get_normalized_probs(out, log_probs=True)[:, -1]
            top = lprobs.topk(2, dim=-1).values
            margin = min(margin, float((top[:, 0] - top[:, 1]).min()))
            x = torch.cat([x, lprobs.argmax(-1, keepdim=True)], dim=1)
    return x, margin
