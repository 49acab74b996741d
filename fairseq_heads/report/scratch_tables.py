"""The fair comparisons: a pruned model against its layout trained from scratch (per seed and
over seeds), what pruning costs against each side's own full layout, and paired-bootstrap BLEU
differences against the baseline and the λ=0 control (significance.py does the resampling).
`translations`: model name -> (hypotheses, references) of its fairseq-generate output.
"""
from typing import Dict, List, Optional, Sequence, Tuple

from .layout import ALL_L0, CONVERGED, ENCODER_L0, FROM_SCRATCH, baseline_seed, protocol_of, seed_label, seeds_of
from .table_basics import MissingInput, Table, baseline_result, by_kind, format_lambda


def _training_updates(result: dict) -> Optional[int]:
    """The updates this model's own training ran: the summed phases of a converged model
    (result["training"], patience tails included), else its checkpoint's update count."""
    training = result.get("training") or {}
    return training.get("updates", result.get("updates"))


def _phase(result: dict, name: str, field: str):
    return ((result.get("training") or {}).get("phases") or {}).get(name, {}).get(field)


def trained_vs_scratch_table(results: Sequence[dict],
                             translations: Dict[str, Tuple[List[str], List[str]]],
                             samples: int = 1000) -> Table:
    """The fair comparison: every converged all-types model that has its layout trained from
    scratch too, one row per seed (ΔBLEU = scratch - trained, paired bootstrap 95% CI), and per
    lambda a row of the means with the seed spread (max - min over seeds) of either side.
    Updates: trained = the baseline's + the L0 phase's + the fixed-mask phase's (patience tail
    included); scratch = its own (patience tail included)."""
    from .significance import paired_bootstrap, sentence_statistics

    pairs = _converged_pairs(results)
    if not pairs:
        raise MissingInput("no converged all-types model with its layout trained from scratch "
                           "(PROTOCOL=converged, SCRATCH_LAMBDAS)")
    missing = sorted({r["name"] for pair in pairs for r in pair if r["name"] not in translations})
    if missing:
        raise MissingInput("no fairseq-generate output (results/<model>/generate.txt) of " + ", ".join(missing))
    baseline_updates = baseline_result(results).get("updates") or 0
    rows = []
    for trained, from_scratch in pairs:
        difference = paired_bootstrap(sentence_statistics(*translations[from_scratch["name"]]),
                                      sentence_statistics(*translations[trained["name"]]), samples=samples)
        kept = sum(trained["heads_kept"].values())
        total = sum(trained["heads_total"].values())
        trained_updates = _training_updates(trained)
        rows.append([f"λ={format_lambda(trained['l0_lambda'])}", seed_label(trained), f"{kept}/{total}",
                     trained["bleu"], from_scratch["bleu"], difference.delta, difference.ci_low,
                     difference.ci_high, _phase(trained, "l0", "updates"),
                     _phase(trained, "l0", "converged_at") or "cap",
                     _phase(trained, "fixed_mask", "updates"),
                     None if trained_updates is None else baseline_updates + trained_updates,
                     _training_updates(from_scratch)])
    return Table(["layout", "seed", "heads kept", "BLEU trained", "BLEU scratch", "Δ scratch − trained",
                  "95% CI low", "95% CI high", "L0 updates", "plateau at", "fixed-mask updates",
                  "updates trained (incl. baseline)", "updates scratch"], rows,
                 f"converged protocol; paired bootstrap over the test sentences, {samples} resamples; "
                 "'plateau at' is the update where the plateau rule held ('cap': it never did)")


def _converged_pairs(results: Sequence[dict]) -> List[Tuple[dict, dict]]:
    scratch = {r.get("from_model"): r for r in by_kind(results, FROM_SCRATCH) if protocol_of(r) == CONVERGED}
    return sorted([(r, scratch[r["name"]]) for r in by_kind(results, ALL_L0)
                   if protocol_of(r) == CONVERGED and r["name"] in scratch],
                  key=lambda p: (p[0]["l0_lambda"], seeds_of(p[0])))


def pruning_cost_table(results: Sequence[dict],
                       translations: Dict[str, Tuple[List[str], List[str]]],
                       samples: int = 1000) -> Table:
    """Trained vs from scratch with each side measured against its own full layout, for the
    pairs of `trained_vs_scratch_table` whose λ=0 control (`control_model`) was also trained
    from scratch with all heads: cost from trained = BLEU(pruned) - BLEU(control), cost from
    scratch = BLEU(layout from scratch) - BLEU(full layout from scratch), and trained's
    advantage = the first minus the second (> 0: pruning the trained model loses less, the
    paper's claim). It takes the two training schedules out of the comparison, which the
    absolute one cannot. A layout with several seeds gets a row of the three contrasts
    averaged over its seeds, and several layouts a row averaged over every pair. Every system
    shares each bootstrap resample, so the intervals of differences of differences are paired
    too; a mean's interval adds the spread between the seeds (or pairs) it averages
    (significance.seed_and_test_interval)."""
    import numpy as np

    from .significance import bootstrap_bleu, contrast, seed_mean_contrast, sentence_statistics

    pairs = _converged_pairs(results)
    if not any(trained["l0_lambda"] for trained, _ in pairs):
        # the λ=0 pair alone (its full layouts finish first) has no pruning cost to compare
        raise MissingInput("no converged pruned layout (λ > 0) trained from scratch yet")
    scratch_of = {trained["name"]: scratch for trained, scratch in pairs}
    # (trained, control, from scratch, full layout from scratch) per seed, grouped by layout
    quadruples: Dict[float, List[List[dict]]] = {}
    # a control counts only with its full layout from scratch: a seed whose own pair is not
    # finished yet is measured against the lowest seed's full layouts meanwhile
    complete = [r for r in results if r.get("l0_lambda") != 0 or r["name"] in scratch_of]
    for trained, from_scratch in pairs:
        control = control_model(trained, complete)
        full_scratch = scratch_of.get(control["name"]) if control else None
        if full_scratch is not None:
            quadruples.setdefault(trained["l0_lambda"], []).append([trained, control, from_scratch, full_scratch])
    if not quadruples:
        raise MissingInput("no converged λ=0 control with its full layout trained from scratch "
                           "(scratch_all_l0_0_conv_s<seed>)")
    # each model once (seeds share a control), in first-seen order
    systems = list({m["name"]: m for group in quadruples.values() for quadruple in group
                    for m in quadruple}.values())
    missing = [r["name"] for r in systems if r["name"] not in translations]
    if missing:
        raise MissingInput("no fairseq-generate output (results/<model>/generate.txt) of " + ", ".join(missing))
    # one bootstrap for every system, so that rows pooling several seeds are paired too
    full, resampled = bootstrap_bleu([sentence_statistics(*translations[r["name"]]) for r in systems], samples)
    index = {r["name"]: i for i, r in enumerate(systems)}

    def costs(group: List[List[dict]]) -> List[float]:
        """The three contrasts averaged over the quadruples of `group` (one seed each); over two
        quadruples or more, the interval holds their spread as well as the test set's."""
        cells = []
        for signs in ((1, -1, 0, 0), (0, 0, 1, -1), (1, -1, -1, 1)):
            weights = np.zeros((len(group), len(systems)))
            for row, quadruple in enumerate(group):
                for model, sign in zip(quadruple, signs):
                    weights[row, index[model["name"]]] += sign
            cost = contrast(full, resampled, weights[0]) if len(group) == 1 else \
                seed_mean_contrast(full, resampled, weights)
            cells += [cost.delta, cost.ci_low, cost.ci_high]
        return cells

    def kept(trained: dict) -> str:
        return f"{sum(trained['heads_kept'].values())}/{sum(trained['heads_total'].values())}"

    def shared_bleu(models: List[dict]):  # the BLEU of the one model all rows share, else none
        return models[0]["bleu"] if len({m["name"] for m in models}) == 1 else None

    rows = []
    for l0_lambda, group in sorted(quadruples.items()):
        for quadruple in group:
            trained, control, _, full_scratch = quadruple
            rows.append([f"λ={format_lambda(l0_lambda)}", seed_label(trained), kept(trained),
                         control["bleu"], full_scratch["bleu"], *costs([quadruple])])
        if len(group) > 1:
            rows.append([f"λ={format_lambda(l0_lambda)}",
                         "mean of " + " ".join(seed_label(q[0]) for q in group),
                         " ".join(kept(q[0]) for q in group), shared_bleu([q[1] for q in group]),
                         shared_bleu([q[3] for q in group]), *costs(group)])
    every = [quadruple for group in quadruples.values() for quadruple in group]
    if len(quadruples) > 1:
        rows.append(["all layouts", f"mean of {len(every)} pairs", "-", shared_bleu([q[1] for q in every]),
                     shared_bleu([q[3] for q in every]), *costs(every)])
    return Table(["layout", "seed", "heads kept", "BLEU full layout, trained (λ=0 control)",
                  "BLEU full layout, scratch", "cost from trained", "95% CI low", "95% CI high",
                  "cost from scratch", "95% CI low", "95% CI high", "trained's advantage",
                  "95% CI low", "95% CI high"], rows,
                 "cost = BLEU of the pruned layout - BLEU of the full layout trained the same way; "
                 "trained's advantage = cost from trained - cost from scratch (> 0: pruning the "
                 f"trained model loses less); paired bootstrap over the test sentences, {samples} "
                 "resamples shared by all models; a 'mean of' row averages its seeds' (or pairs') "
                 "contrasts, and its interval holds their spread as well as the test set's sampling "
                 "(the mean ± √((t·s/√n)² + (1.96·bootstrap se)²), docs/pruning.md, 'Means over "
                 "seeds')")


def seed_summary_table(results: Sequence[dict]) -> Table:
    """Per layout of the fair comparison: mean BLEU of either side over the seeds, the seed
    spread (max - min) of either side, and the mean training updates of either side."""
    pairs = _converged_pairs(results)
    if not pairs:
        raise MissingInput("no converged all-types model with its layout trained from scratch")
    baseline_updates = baseline_result(results).get("updates") or 0
    grouped: Dict[float, List[Tuple[dict, dict]]] = {}
    for trained, from_scratch in pairs:
        grouped.setdefault(trained["l0_lambda"], []).append((trained, from_scratch))

    def mean(values):
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    def mean_count(values):  # updates: whole numbers in the table
        value = mean(values)
        return None if value is None else round(value)

    def spread(values):
        return max(values) - min(values) if len(values) > 1 else None

    rows = []
    for l0_lambda, group in sorted(grouped.items()):
        trained = [t["bleu"] for t, _ in group]
        scratch = [s["bleu"] for _, s in group]
        rows.append([f"λ={format_lambda(l0_lambda)}", " ".join(seed_label(t) for t, _ in group),
                     mean(trained), spread(trained), mean(scratch), spread(scratch),
                     mean(scratch) - mean(trained),
                     mean_count([None if _training_updates(t) is None else baseline_updates + _training_updates(t)
                                 for t, _ in group]),
                     mean_count([_training_updates(s) for _, s in group])])
    return Table(["layout", "seeds", "BLEU trained (mean)", "seed spread trained", "BLEU scratch (mean)",
                  "seed spread scratch", "Δ scratch − trained (means)", "updates trained (mean)",
                  "updates scratch (mean)"], rows,
                 "seed spread: max - min BLEU over the seeds ('-': one seed, no spread)")


def control_model(result: dict, results: Sequence[dict]) -> Optional[dict]:
    """The λ=0 model trained like `result` (same kind, protocol and gate learning rate; its seeds
    (layout.seeds_of) if those were run, else its baseline's lowest, else the lowest): the
    baseline given the same extra training without a penalty. What pruning costs is measured
    against it, since the extra updates of a fine-tune are worth something on their own when the
    baseline stopped before converging."""
    if result.get("kind") not in (ENCODER_L0, ALL_L0) or not result.get("l0_lambda"):
        return None
    controls = [r for r in results if r.get("kind") == result["kind"] and r.get("l0_lambda") == 0
                and protocol_of(r) == protocol_of(result)
                and r.get("gate_lr_scale") == result.get("gate_lr_scale")]
    if not controls:
        return None
    return min(controls, key=lambda r: (seeds_of(r) != seeds_of(result), baseline_seed(r) != baseline_seed(result),
                                        seeds_of(r)))


def bleu_difference_table(results: Sequence[dict],
                          translations: Dict[str, Tuple[List[str], List[str]]],
                          kinds: Sequence[str], samples: int = 1000) -> Table:
    """Paired-bootstrap BLEU differences (significance.py): each L0 model of `kinds` against the
    baseline and, when one was trained, against its λ=0 control (`control_model`); each
    from-scratch model against the model its layout came from. `translations`: model name ->
    (hypotheses, references) of its fairseq-generate output."""
    from .significance import paired_bootstrap, sentence_statistics

    baseline = baseline_result(results)
    by_name = {r["name"]: r for r in results}
    pairs = []
    for kind in kinds:
        for result in by_kind(results, kind):
            if kind == FROM_SCRATCH:
                against = [by_name.get(result.get("from_model"))]
            else:
                against = [baseline, control_model(result, results)]
            pairs += [(result, other) for other in against if other is not None]
    if not pairs:
        raise MissingInput(f"no results of kind {', '.join(kinds)}")
    missing = sorted({r["name"] for pair in pairs for r in pair if r["name"] not in translations})
    if missing:
        raise MissingInput("no fairseq-generate output (results/<model>/generate.txt) of "
                           + ", ".join(missing))
    statistics = {}

    def statistics_of(name):
        if translations[name][1] != translations[baseline["name"]][1]:
            raise MissingInput(f"{name} was scored on other references than the baseline")
        if name not in statistics:
            statistics[name] = sentence_statistics(*translations[name])
        return statistics[name]

    rows = []
    for result, against in pairs:
        difference = paired_bootstrap(statistics_of(result["name"]), statistics_of(against["name"]),
                                      samples=samples)
        excludes_zero = difference.ci_low > 0 or difference.ci_high < 0
        rows.append([result["name"], against["name"], difference.delta, difference.ci_low,
                     difference.ci_high, "yes" if excludes_zero else "no"])
    return Table(["model", "against", "ΔBLEU", "95% CI low", "95% CI high", "CI excludes 0"], rows,
                 f"paired bootstrap over the test sentences, {samples} resamples (Koehn 2004); "
                 "a CI that includes 0 means this test set cannot tell the two apart; a λ=0 model "
                 "is the baseline trained on under the same protocol without a penalty")
