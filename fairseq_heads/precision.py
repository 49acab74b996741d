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
from torch.nn.attention import SDPBackend, sdpa_kernel

AUTOCAST_CHOICES = ("none", "bf16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16}
AUTOCAST_HELP = ("run the matrix products under torch.autocast in this dtype ('bf16': bfloat16, "
                 "fp32 weights, gates and L0 term; 'none': fp32 throughout)")


def check_autocast(name: str, option: str = "--autocast") -> str:
    """`name` if it is one of AUTOCAST_CHOICES, else ValueError naming the option."""
    if name not in AUTOCAST_CHOICES:
        raise ValueError(f"{option}: expected one of {', '.join(AUTOCAST_CHOICES)}, got {name!r}")
    return name


def autocast(name: str, device_type: str = "cpu", backward: bool = False):
    """The context to run a forward (and its backward) in: torch.autocast for `name`, or nothing.
    `backward`: a backward follows (a training step); see `sdpa_backends`."""
    check_autocast(name)
    if name == "none":
        return contextlib.nullcontext()
    backends = sdpa_backends(device_type, backward)
    if backends is None:
        return torch.autocast(device_type=device_type, dtype=AUTOCAST_DTYPES[name])
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast(device_type=device_type, dtype=AUTOCAST_DTYPES[name]))
    stack.enter_context(sdpa_kernel(backends))
    return stack


def sdpa_backends(device_type: str, backward: bool):
    """The SDPA backends a reduced-precision pass may use; None: torch's choice.

    On a CPU, torch's flash kernel runs its bf16 backward several times slower than the plain
    arithmetic of its math backend: fairseq's MultiheadAttention (d=256, 8 heads, 114 x 35 tokens,
    1 thread) took 100 ms forward + backward under bf16 autocast, 35 ms held to the math backend,
    and the flash backward was a third of a Europarl training step. Inference alone is faster with
    the flash kernel (a gated block's forward: 11 ms fused against 21 ms with the bmm arithmetic),
    so only passes with a backward are held to math."""
    if device_type == "cpu" and backward:
        return [SDPBackend.MATH]
    return None


def model_device_type(model: torch.nn.Module) -> str:
    """'cuda' or 'cpu': where the model's first parameter is (autocast is per device type)."""
    for parameter in model.parameters():
        return parameter.device.type
    return "cpu"
