"""Mixed precision by autocast: one option, `--autocast {none,bf16}`, spelled and meant the same on
fairseq-train (the `*_heads` tasks), `stats`, `curve`, `lm-result`, the in-process BLEU and the recipes
(`train.autocast`).

Under `bf16` the matrix products (linear, bmm, SDPA) run in bfloat16, which the CPU's AMX and
AVX512-BF16 units (and a GPU's tensor cores) execute several times faster than fp32; the weights,
their gradients and the optimizer state stay fp32 (autocast casts copies, so the parameters are
the fp32 master weights and no loss scaling is needed: bf16 has fp32's exponent range).
Element-wise work stays in the dtype it is given: the gates' log-alpha, the Hard Concrete
arithmetic and the L0 penalty are fp32, and fairseq's softmax and log-softmax cast to fp32 first.
fairseq's own `--bf16` is another thing: it converts the model's weights to bf16 (and, in
fairseq 0.12, is tied to TPUs), so the gates would be bf16 too.
"""
import contextlib

import torch

AUTOCAST_CHOICES = ("none", "bf16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16}
AUTOCAST_HELP = ("run the matrix products under torch.autocast in this dtype ('bf16': bfloat16, "
                 "fp32 weights, gates and L0 term; 'none': fp32 throughout)")


def check_autocast(name: str, option: str = "--autocast") -> str:
    """`name` if it is one of AUTOCAST_CHOICES, else ValueError naming the option."""
    if name not in AUTOCAST_CHOICES:
        raise ValueError(f"{option}: expected one of {', '.join(AUTOCAST_CHOICES)}, got {name!r}")
    return name


def autocast(name: str, device_type: str = "cpu"):
    """The context to run a forward (and its backward) in: torch.autocast for `name`, or nothing."""
    check_autocast(name)
    if name == "none":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=AUTOCAST_DTYPES[name])


def model_device_type(model: torch.nn.Module) -> str:
    """'cuda' or 'cpu': where the model's first parameter is (autocast is per device type)."""
    for parameter in model.parameters():
        return parameter.device.type
    return "cpu"
