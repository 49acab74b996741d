"""The translation recipe's config sections (frozen dataclasses, `--set section.field=value`) and
the names its steps share: nmt.py builds the steps, nmt_converged.py the converged protocol's."""
from dataclasses import dataclass
from typing import Tuple

from .config import settings_except

ALL_TYPES = "enc-self,dec-self,enc-dec"
# The baseline every later step reads: its best validation (the last one too, when the valid
# loss still falls at the time limit); an L0 fine-tune's last checkpoint (a fixed length).
BASELINE_CHECKPOINT = "checkpoint_best.pt"


@dataclass(frozen=True)
class Data:
    corpus: str = "synthetic"   # "synthetic" (the toy grammar) or a folder under --data-root
    prefix: Tuple[str, ...] = ("train", "valid", "test")  # file stems of the splits in the folder
    src: str = "src"
    tgt: str = "tgt"
    vocab_size: int = 400
    max_len: int = 250          # train pairs longer than this (whitespace tokens) are dropped
    synthetic_sizes: Tuple[int, ...] = (1500, 60, 60)  # train, valid, test sentences of the toy corpus


@dataclass(frozen=True)
class Syntax:
    """A parsed set for syntactic heads. Empty: the data's own test split and its parses
    (the toy corpus has them)."""
    source: str = ""            # files under --data-root
    target: str = ""            # no parallel PUD for every target language: the source again will do,
    conllu: str = ""            # as syntactic heads read only the encoder
    # also compute the in-domain statistics (Stats.metrics) on this set, so that the report can
    # say where the two sets give different answers (issue 37: PUD is out of domain for Multi30k)
    compare: bool = False


def syntax_data_settings(syntax: Syntax) -> dict:
    """What binarising the parsed set depends on: not whether other statistics are computed on it."""
    return settings_except(syntax, "compare")


@dataclass(frozen=True)
class Model:
    layers: int = 2
    dim: int = 32
    heads: int = 4
    ffn: int = 64
    # pre-norm layers (fairseq's --encoder/--decoder-normalize-before: layer norm before each
    # sublayer, one after the stack), as the paper's own code trained its baseline (docs/results/
    # gpu_baseline_rehearsal); False: fairseq's `transformer`, post-norm
    normalize_before: bool = False


@dataclass(frozen=True)
class Train:
    max_tokens: int = 1024
    lr: float = 5e-3
    warmup: int = 10
    max_update: int = 30
    minutes: float = 0.0        # a cap on the baseline's training time (0: none)
    validate_updates: int = 0   # validate (and checkpoint) every N updates; 0: at epoch ends
    patience: int = 0           # stop after N validations without a better valid loss (0: never)
    # stop once N validations in a row each moved the valid loss by less than plateau_loss_tolerance
    # of the one before (convergence.py's rule, the converged protocol's L0 phases'; 0: never): a
    # flat valid loss, where --patience waits for one that no longer improves at all
    plateau_validations: int = 0
    plateau_loss_tolerance: float = 0.005
    dropout: float = 0.1
    label_smoothing: float = 0.1
    fp16: bool = False
    seed: int = 1
    # batches padded to a multiple of this many positions: fewer distinct shapes, whose first
    # use is what made the first epoch on the GPU twice as slow as the next (docs/results/
    # europarl_en_it_base_gpu_a1)
    seq_len_multiple: int = 1
    num_workers: int = 0        # fairseq's data-loading processes; not part of any step's key
    # interval checkpoints (every validate_updates) the baseline keeps: 1 the last, -1 all (the
    # formation curve reads them); not part of any step's key
    keep_checkpoints: int = 1


@dataclass(frozen=True)
class L0:
    encoder_lambdas: Tuple[float, ...] = (0.002, 0.05)
    all_lambdas: Tuple[float, ...] = ()
    control: bool = True        # also λ=0, fine-tuned as long: the reference of pruning costs
    updates: int = 20
    lr: float = 1e-3
    gate_lr_scale: float = 400.0
    trace_interval: int = 5


@dataclass(frozen=True)
class Generate:
    subset: str = "test"
    beam: int = 2
    batch_size: int = 64


@dataclass(frozen=True)
class Stats:
    subset: str = "valid"
    metrics: Tuple[str, ...] = ("confidence", "lrp", "grad", "positional", "rare")
    grad_normalise: str = "layer"   # Michel et al.'s normalisation over each layer
    rare_outside_top: int = 0       # the paper's rare-word filter (500); 0: every sentence
    bootstrap_replicates: int = 20
    max_tokens: int = 4096


@dataclass(frozen=True)
class Formation:
    """The formation curve (pipeline/formation.py): the head functions at each interval checkpoint
    the baseline kept (train.keep_checkpoints=-1, train.validate_updates apart)."""
    enabled: bool = False
    every: int = 1              # every N-th kept checkpoint
    bleu_sentences: int = 500   # BLEU on the first N sentences of the statistics subset ...
    bleu_beam: int = 1          # ... greedy: a point costs a few minutes on a CPU
    replicates: int = 50


@dataclass(frozen=True)
class Curve:
    metrics: Tuple[str, ...] = ("grad", "confidence")
    steps: Tuple[int, ...] = (0, 2, 4, 6)
    types: str = "enc-self"


def model_settings(model: Model) -> dict:
    """What a model's training depends on; normalize_before only where set, so that adding the
    field (post-norm, as before it) re-ran no step."""
    return settings_except(model, *(() if model.normalize_before else ("normalize_before",)))


PLATEAU_STOP = ("plateau_validations", "plateau_loss_tolerance")


def train_settings(train: Train) -> dict:
    """What a training depends on: not how many processes load its batches; the plateau stop
    only where set, so that adding its fields re-ran no step."""
    return settings_except(train, "num_workers", "keep_checkpoints",
                           *(() if train.plateau_validations else PLATEAU_STOP))


def train_settings_without_plateau_stop(train: Train) -> dict:
    """The settings of the same training before a plateau stop was added to it: a run started
    under them goes on under the stop (runner.Step.resumable_from), which only ends it sooner."""
    return settings_except(train, "num_workers", "keep_checkpoints", *PLATEAU_STOP)


def l0_settings(l0: L0) -> dict:
    """What one L0 fine-tune depends on: not which λs the sweep has."""
    return settings_except(l0, "encoder_lambdas", "all_lambdas", "control")


def lambda_name(value: float) -> str:
    return format(value, "g")
