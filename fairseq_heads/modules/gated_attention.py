"""fairseq MultiheadAttention whose head outputs are multiplied by per-head gates."""
import re
from typing import Iterator, Optional, Tuple

from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from .hard_concrete import HardConcreteGate

ATTENTION_TYPES = ("enc-self", "dec-self", "enc-dec")

# Module names fairseq's Transformer encoders/decoders give their attention blocks.
_ATTENTION_NAME = re.compile(r"(?:^|\.)(encoder|decoder)\.layers\.(\d+)\.(self_attn|encoder_attn)$")


def attention_type_of(module_name: str) -> Optional[Tuple[str, int]]:
    """('enc-self' | 'dec-self' | 'enc-dec', layer) for a fairseq attention module name, else None."""
    match = _ATTENTION_NAME.search(module_name)
    if match is None:
        return None
    side, layer, kind = match.groups()
    if side == "encoder":
        return ("enc-self", int(layer)) if kind == "self_attn" else None
    return ("dec-self" if kind == "self_attn" else "enc-dec"), int(layer)


def iter_attention(model: nn.Module) -> Iterator[Tuple[str, int, MultiheadAttention]]:
    """Every attention block of a fairseq Transformer (encoder-decoder or decoder-only) as
    (attention type, layer, module), in encoder, decoder order."""
    for name, module in model.named_modules():
        address = attention_type_of(name)
        if address is not None and isinstance(module, MultiheadAttention):
            yield address[0], address[1], module


def scale_heads(head_outputs: Tensor, per_head: Tensor) -> Tensor:
    """Multiply each head's slice of the concatenated head outputs (..., H * D) by per_head (H,)."""
    num_heads = per_head.numel()
    shape = head_outputs.shape
    per_head = per_head.to(head_outputs.dtype)
    return (head_outputs.view(*shape[:-1], num_heads, shape[-1] // num_heads)
            * per_head.unsqueeze(-1)).view(shape)


class GatedMultiheadAttention(MultiheadAttention):
    """MultiheadAttention with a HardConcreteGate on its heads: each head's context vector is
    multiplied by its gate before the output projection.

    The gate acts on the input of `out_proj`. PyTorch's fused attention kernel (fairseq's fast
    path) applies `out_proj` internally where no gate can act, so a gated module always takes
    fairseq's Python path (the one incremental decoding uses anyway); parameter names are
    unchanged, so plain `transformer` checkpoints load.
    """

    def __init__(self, *args, gate: Optional[HardConcreteGate] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._attach_gate(gate if gate is not None else HardConcreteGate(self.num_heads))

    @classmethod
    def from_attention(cls, attention: MultiheadAttention,
                       gate: Optional[HardConcreteGate] = None) -> "GatedMultiheadAttention":
        """Gate a module fairseq already built, in place. Re-classing keeps every option fairseq
        chose for it (dims, dropout, quant-noise, ...) without restating its constructor here."""
        if isinstance(attention, cls):
            raise ValueError("attention module is already gated")
        attention.__class__ = cls
        attention._attach_gate(gate if gate is not None else HardConcreteGate(attention.num_heads))
        return attention

    def _attach_gate(self, gate: HardConcreteGate) -> None:
        if gate.num_gates != self.num_heads:
            raise ValueError(f"gate has {gate.num_gates} gates for {self.num_heads} heads")
        self.gate = gate.to(self.out_proj.weight.device)
        self._set_skip_embed_dim_check()  # never take the fused path, which would skip the gate
        self.out_proj.register_forward_pre_hook(self._gate_head_outputs)

    def _gate_head_outputs(self, out_proj: nn.Module, inputs: Tuple[Tensor, ...]):
        (head_outputs,) = inputs
        return (scale_heads(head_outputs, self.gate()),)

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        # A checkpoint of a plain transformer has no gates: start them as initialised (open).
        prefix = name + "." if name != "" else ""
        key = prefix + "gate.log_alpha"
        if key not in state_dict:
            state_dict[key] = self.gate.log_alpha.detach().clone()
