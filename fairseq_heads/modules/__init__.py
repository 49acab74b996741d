from .gated_attention import ATTENTION_TYPES, GatedMultiheadAttention, iter_attention  # noqa: F401
from .hard_concrete import HardConcreteGate  # noqa: F401
