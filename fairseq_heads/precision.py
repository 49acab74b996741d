"""Mixed precision by autocast: one option, `--autocast {none,bf16,auto}`, spelled and meant the same on
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

Not every processor has those units. Without AVX512 (an AVX2 AMD EPYC, say) oneDNN takes no bf16
matrix product and torch runs it in its reference kernel: measured there, a 2048x512x2048 product
at 0.5 GFLOP/s in bf16 against 76 in fp32 (1 thread), a training step many times slower. So `auto`
is bf16 where the device has a fast bf16 kernel (`fast_bf16`) and fp32 elsewhere, and `bf16` on a
device without one runs as asked, after a warning.
"""
import contextlib
import functools
import logging

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

logger = logging.getLogger(__name__)

AUTOCAST_CHOICES = ("none", "bf16", "auto")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16}
AUTOCAST_HELP = ("run the matrix products under torch.autocast in this dtype ('bf16': bfloat16, "
                 "fp32 weights, gates and L0 term; 'none': fp32 throughout; 'auto': bf16 where the "
                 "device has fast bf16 kernels, else fp32)")


@functools.lru_cache(maxsize=None)
def fast_bf16(device_type: str = "cpu") -> bool:
    """Whether `device_type` here runs bf16 matrix products in a fast kernel: on a CPU, oneDNN's own
    check (AVX512 with BW/VL/DQ, AVX512-BF16 or AMX), which is what makes torch send a bf16 product
    to oneDNN rather than to its reference kernel; on CUDA, the GPU's bf16 support."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    try:
        return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without the check: assume the reference kernel
        return False


@functools.lru_cache(maxsize=None)
def resolve_autocast(name: str, device_type: str = "cpu") -> str:
    """'bf16' or 'none': what `name` runs as on this machine's `device_type` (`auto` decided by
    `fast_bf16`; an explicit `bf16` without a fast kernel warned about, once)."""
    check_autocast(name)
    if name == "auto":
        resolved = "bf16" if fast_bf16(device_type) else "none"
        logger.info("--autocast auto: %s on this %s", "bf16" if resolved == "bf16" else "fp32 (no fast bf16 kernel)",
                    device_type)
        return resolved
    if name == "bf16" and not fast_bf16(device_type):
        logger.warning("--autocast bf16: this %s has no fast bf16 matrix kernel (no AVX512 or AMX for oneDNN): "
                       "torch runs bf16 products in its reference kernel, many times slower than fp32; "
                       "--autocast auto runs fp32 here", device_type)
    return name


def check_autocast(name: str, option: str = "--autocast") -> str:
    """`name` if it is one of AUTOCAST_CHOICES, else ValueError naming the option."""
    if name not in AUTOCAST_CHOICES:
        raise ValueError(f"{option}: expected one of {', '.join(AUTOCAST_CHOICES)}, got {name!r}")
    return name


def autocast(name: str, device_type: str = "cpu", backward: bool = False):
    """The context to run a forward (and its backward) in: torch.autocast for `name`, or nothing.
    `backward`: a backward follows (a training step); see `sdpa_backends`."""
    name = resolve_autocast(name, device_type)
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
