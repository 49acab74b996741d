"""What pruning buys at inference (issue 37, item 7): for each pruned encoder model whose decoding
speed was measured (`speed/<model>/decode_speed.json`, pruning/decode_speed.py), its BLEU against
the same seed's λ=0 control beside the measured speed-up (physically pruned against the same
checkpoint with the heads masked: the two translate alike) and the speed-up its FLOPs predict.
Pure functions over result dicts, translations and the speed files, no I/O."""
from typing import Dict, List, Sequence, Tuple

from .layout import ENCODER_L0, seed_label, seeds_of
from .seed_means import control_pairs
from .table_basics import MissingInput, Table

COLUMNS = ["model", "seed", "encoder heads kept", "BLEU", "Δ vs its control", "95% CI low", "95% CI high",
           "tokens/s masked", "tokens/s pruned", "speed-up measured", "speed-up predicted (FLOPs)",
           "same translations"]


def _controls(results: Sequence[dict]) -> Dict[str, dict]:
    """{L0 model name: its same-seed λ=0 control} (seed_means.control_pairs' pairing)."""
    return {model["name"]: control for pairs in control_pairs(results, ENCODER_L0).values()
            for model, control in pairs}


def decode_speed_table(results: Sequence[dict], translations: Dict[str, Tuple[List[str], List[str]]],
                       speeds: Dict[str, dict], samples: int = 1000) -> Table:
    """One row per measured model (a speed file's every mask), with ΔBLEU against its control and
    the paired-bootstrap 95% CI where the control and both translations are there (else blank)."""
    from .significance import paired_bootstrap, sentence_statistics

    if not speeds:
        raise MissingInput("no decoding speed measured (speed/<model>/decode_speed.json)")
    by_name, controls = {r["name"]: r for r in results}, _controls(results)
    rows, settings = [], set()
    for name in sorted(speeds, key=lambda n: (seeds_of(by_name.get(n) or {}), n)):
        report, result = speeds[name], by_name.get(name)
        if result is None:
            raise MissingInput(f"speed/{name}: the model has no result file (results/{name}/result.json)")
        settings.add(tuple(report[k] for k in ("device", "sentences", "subset", "beam", "batch_size", "rounds")))
        control = controls.get(name)
        delta = [""] * 3
        if control is not None and name in translations and control["name"] in translations:
            difference = paired_bootstrap(sentence_statistics(*translations[name]),
                                          sentence_statistics(*translations[control["name"]]), samples=samples)
            delta = [difference.delta, difference.ci_low, difference.ci_high]
        for measured in report["results"]:
            masked, pruned = (measured["tokens_per_s"][f"{side}_{measured['mask']}"] for side in ("masked", "pruned"))
            rows.append([name, seed_label(result),
                         f"{measured['heads_kept']['enc-self']}/{result['heads_total']['enc-self']}", result["bleu"],
                         *delta, masked, pruned, measured["speedup"], measured["predicted_speedup_flops"],
                         "yes" if measured["same_translations"] else "NO"])
    note = "; ".join(f"{device}, {sentences} sentences of {subset}, beam {beam}, batch {batch}, median of {rounds} "
                     f"interleaved rounds" for device, sentences, subset, beam, batch, rounds in sorted(settings))
    return Table(COLUMNS, rows, f"decoding tokens/s ({note}); the pruned checkpoint against the same checkpoint "
                                f"with those heads masked; ΔBLEU against the same seed's λ=0 control, paired "
                                f"bootstrap over the test sentences, {samples} resamples")
