"""L0 against Michel et al.'s heuristic pruning, compared fairly (issue 37): the same number of
encoder heads kept, and the same fixed-mask fine-tune after the heads are chosen. A `heuristic`
result (layout.HEURISTIC) is the baseline with the top-K encoder heads of an importance metric
kept (K = the heads its `from_model`, a converged encoder L0 model, kept), fine-tuned with that
mask as the L0 model's fixed-mask phase is; its result file records the metric ("metric")."""
from typing import Dict, List, Sequence, Tuple

from .layout import HEURISTIC, seed_label
from .seed_masks import kept_heads
from .table_basics import MissingInput, Table, by_kind


def heuristic_metric(result: dict) -> str:
    """The importance metric that chose a heuristic model's heads ('?': a file without it)."""
    return result.get("metric") or "?"


def michel_comparison_table(results: Sequence[dict], translations: Dict[str, Tuple[List[str], List[str]]],
                            samples: int = 1000) -> Table:
    """Per heuristic model: the L0 model it matches, heads kept by each, the heads both keep
    (beside a·b/n, what random sets of those sizes would share), both BLEUs and ΔBLEU
    (L0 - heuristic) with its paired-bootstrap 95% CI over the test sentences."""
    from .significance import paired_bootstrap, sentence_statistics

    heuristics = by_kind(results, HEURISTIC)
    if not heuristics:
        raise MissingInput("no heuristic-pruning models fine-tuned like L0 (kind heuristic)")
    by_name = {r["name"]: r for r in results}
    rows = []
    for result in sorted(heuristics, key=lambda r: (r.get("from_model") or "", r["name"])):
        l0 = by_name.get(result.get("from_model"))
        if l0 is None:
            raise MissingInput(f"{result['name']}: its L0 model {result.get('from_model')} has no result")
        for name in (result["name"], l0["name"]):
            if name not in translations:
                raise MissingInput(f"no fairseq-generate output (results/{name}/generate.txt) of {name}")
        difference = paired_bootstrap(sentence_statistics(*translations[l0["name"]]),
                                      sentence_statistics(*translations[result["name"]]), samples=samples)
        kept = [r["heads_kept"]["enc-self"] for r in (l0, result)]
        total = l0["heads_total"]["enc-self"]
        shared = len(kept_heads(l0, ["enc-self"]) & kept_heads(result, ["enc-self"]))
        rows.append([l0["name"], seed_label(l0), f"{kept[0]}/{total}", l0["bleu"],
                     heuristic_metric(result), f"{kept[1]}", shared, kept[0] * kept[1] / total, result["bleu"],
                     difference.delta, difference.ci_low, difference.ci_high])
    return Table(["L0 model", "seed", "encoder heads kept (L0)", "BLEU L0", "heuristic metric",
                  "heads kept (heuristic)", "heads both keep", "by chance (expected)", "BLEU heuristic",
                  "Δ L0 − heuristic", "95% CI low", "95% CI high"],
                 rows, f"both sides fine-tuned with their head mask fixed, to the same patience; paired "
                       f"bootstrap over the test sentences, {samples} resamples")
