"""Do the seeds keep the same heads? Under the converged protocol every seed fine-tunes the *same*
baseline, so its heads are the same heads in every seed and the masks L0 ends with can be set side
by side: per λ, the heads each seed kept, those every seed kept, and the mean Jaccard index of the
seeds' kept sets against what sets of those sizes drawn at random would share. (Quick-protocol
seeds of the GPU queue train a baseline each: their heads are not the same heads, not compared.)
Pure functions over result dicts, no I/O."""
from itertools import combinations
from math import comb
from typing import Dict, FrozenSet, List, Sequence, Tuple

from .layout import CONVERGED, ENCODER_L0, baseline_seed, protocol_of, seeds_of, training_seed
from .table_basics import MissingInput, Table, by_kind, format_lambda

Head = Tuple[str, int, int]  # (attention type, layer, head)


def kept_heads(result: dict, types: Sequence[str]) -> FrozenSet[Head]:
    """The heads of `types` a result file's `kept` marks as kept."""
    return frozenset((t, layer, head) for t in types for layer, row in enumerate(result["kept"][t])
                     for head, kept in enumerate(row) if kept)


def jaccard(a: FrozenSet, b: FrozenSet) -> float:
    """|A ∩ B| / |A ∪ B| (1 for two empty sets: they agree)."""
    return len(a & b) / len(a | b) if a | b else 1.0


def chance_jaccard(n: int, a: int, b: int) -> float:
    """E[J(A, B)] for A, B drawn uniformly at random among the subsets of sizes a and b of n heads:
    the overlap k is hypergeometric, P(k) = C(a, k) C(n - a, b - k) / C(n, b), and J = k / (a + b - k)."""
    if a + b == 0:
        return 1.0
    return sum(comb(a, k) * comb(n - a, b - k) * k / (a + b - k)
               for k in range(max(0, a + b - n), min(a, b) + 1)) / comb(n, b)


def seed_mask_table(results: Sequence[dict], kind: str = ENCODER_L0) -> Table:
    """Per converged λ > 0 of `kind` and baseline with two seeds or more: heads kept per seed, by
    every seed, by any seed, and the seeds' mean pairwise Jaccard index beside its chance value
    (fine-tunes of different baselines keep heads of different models: each baseline its row)."""
    groups: Dict[Tuple, List[dict]] = {}
    for result in sorted(by_kind(results, kind), key=seeds_of):
        if protocol_of(result) == CONVERGED and result.get("l0_lambda"):
            key = (result["l0_lambda"], result.get("gate_lr_scale"), baseline_seed(result))
            groups.setdefault(key, []).append(result)
    rows = []
    for (lam, _, base), models in sorted(groups.items(), key=lambda i: (i[0][0], i[0][1] or 0, i[0][2])):
        if len(models) < 2:
            continue
        types = ["enc-self"] if kind == ENCODER_L0 else sorted(models[0]["kept"])
        total = sum(models[0]["heads_total"][t] for t in types)
        sets = [kept_heads(m, types) for m in models]
        pairs = list(combinations(sets, 2))
        rows.append([f"{kind} λ={format_lambda(lam)}" + ("" if base == 1 else f", baseline seed {base}"),
                     " ".join(str(training_seed(m)) for m in models),
                     " ".join(str(len(s)) for s in sets), total, len(frozenset.intersection(*sets)),
                     len(frozenset.union(*sets)), sum(jaccard(a, b) for a, b in pairs) / len(pairs),
                     sum(chance_jaccard(total, len(a), len(b)) for a, b in pairs) / len(pairs)])
    if not rows:
        raise MissingInput(f"no converged {kind} λ with two seeds or more")
    return Table(["models", "seeds", "heads kept per seed", "heads", "kept by every seed", "kept by any seed",
                  "mean Jaccard of the seeds' kept sets", "by chance (random sets of those sizes)"],
                 rows, "each seed fine-tunes the same baseline, so a head is the same head in every seed; "
                       "chance: the expected Jaccard index of uniformly random sets of the same sizes")
