"""Decoding speed of physically pruned translation models against the unpruned one, beside the
speed-up their FLOPs predict (flops.py): what a user who prunes gains at inference.

Each fraction keeps that share of every attention type's heads (the top ones by gradient
importance, per type), pruned with `prune_checkpoint`, and is compared with the unpruned model
with the same heads masked: both translate alike, so the speed-up is the pruning's alone and
the FLOP prediction is at one workload (the masked run's mean source and hypothesis lengths).
The variants decode the same sentences (beam search, fairseq's generator) in interleaved
rounds, so that other load hits each alike; tokens/s counts generated tokens over wall time
(CUDA synchronised).
"""
import os
import statistics
import time
from argparse import Namespace
from typing import Dict, Sequence

import torch
from fairseq import checkpoint_utils

from ..checkpoints import place_model
from ..gating.head_masks import apply_head_mask
from .checkpoint import prune_checkpoint
from .curve import batches
from .flops import attention_widths, generation_flops
from .importance import keep_top_k, read_head_scores
from .mask_policy import GivenMask


def decode_once(model, task, subset: str, sentences: int, beam: int, batch_size: int) -> Dict[str, object]:
    generator = task.build_generator([model], Namespace(beam=beam))
    tokens = source = 0
    hypotheses = {}
    on_cuda = next(model.parameters()).is_cuda
    start = time.time()
    with torch.no_grad():
        for sample in batches(task, subset, model, batch_size, sentences):
            for i, hypos in zip(sample["id"].tolist(), task.inference_step(generator, [model], sample)):
                tokens += hypos[0]["tokens"].numel()
                hypotheses[i] = hypos[0]["tokens"].tolist()
            source += int(sample["net_input"]["src_lengths"].sum())
    if on_cuda:
        torch.cuda.synchronize()
    return {"tokens": tokens, "seconds": time.time() - start, "sentences": len(hypotheses),
            "source_tokens": source, "hypotheses": hypotheses}


def decode_speeds(checkpoint: str, data_bin: str, src: str, tgt: str, scores_csv: str,
                  fractions: Sequence[float], subset: str, sentences: int, beam: int, batch_size: int,
                  rounds: int, cpu: bool, work: str) -> Dict[str, object]:
    """`compare_pruned` with, per fraction, that share of each attention type's heads kept, the
    top ones by gradient importance in `scores_csv`."""
    scores = read_head_scores(scores_csv, "grad")
    masks = {}
    for fraction in fractions:
        keep = round(fraction * sum(len(row) for row in next(iter(scores.values()))))
        masks[f"{fraction:g}"] = {t: torch.stack(rows) for t, rows in keep_top_k(scores, keep, per_type=True).items()}
    report = compare_pruned(checkpoint, data_bin, src, tgt, masks, subset, sentences, beam, batch_size,
                            rounds, cpu, work)
    for result, fraction in zip(report["results"], fractions):
        result["fraction_kept"] = fraction
    return report


def compare_pruned(checkpoint: str, data_bin: str, src: str, tgt: str, masks: Dict[str, Dict],
                   subset: str, sentences: int, beam: int, batch_size: int, rounds: int, cpu: bool,
                   work: str) -> Dict[str, object]:
    """Per head mask (label -> mask): the checkpoint pruned by it against the checkpoint with it as
    a head mask (it computes every head; the two translate alike, checked), tokens/s and the
    FLOP-predicted speed-up at that workload; the checkpoint without a mask for reference.
    Pruned checkpoints are written to `work`."""

    def load(path, mask=None):
        [model], _, task = checkpoint_utils.load_model_ensemble_and_task(
            [path], arg_overrides={"data": data_bin, "source_lang": src, "target_lang": tgt})
        if mask is not None:
            apply_head_mask(model, mask)
        place_model(model.eval(), cpu)
        return model, task

    loaded = {"unpruned": load(checkpoint)}
    for label, mask in masks.items():
        pruned = os.path.join(work, f"pruned_{label}.pt")
        prune_checkpoint(checkpoint, pruned, GivenMask(mask))
        loaded[f"masked_{label}"] = load(checkpoint, mask)
        loaded[f"pruned_{label}"] = load(pruned)
    runs = {name: [] for name in loaded}
    for index in range(rounds):
        for name in (list(loaded) if index % 2 == 0 else list(reversed(loaded))):
            runs[name].append(decode_once(*loaded[name], subset, sentences, beam, batch_size))
    model, _ = loaded["unpruned"]
    d = model.encoder.embed_tokens.embedding_dim
    f = model.encoder.layers[0].fc1.out_features
    vocab = model.decoder.embed_tokens.num_embeddings
    layers = (len(model.encoder.layers), len(model.decoder.layers))

    def speed(name):
        return statistics.median(r["tokens"] / r["seconds"] for r in runs[name])

    results = []
    for label in masks:
        masked, pruned = f"masked_{label}", f"pruned_{label}"
        run = runs[masked][0]
        workload = (d, f, vocab, beam, run["source_tokens"] / run["sentences"], run["tokens"] / run["sentences"], *layers)
        predicted = (generation_flops(attention_widths(loaded[masked][0]), *workload)
                     / generation_flops(attention_widths(loaded[pruned][0]), *workload))
        results.append({"mask": label, "heads_kept": {t: int(m.sum()) for t, m in masks[label].items()},
                        "tokens_per_s": {n: round(speed(n), 1) for n in (masked, pruned)},
                        "speedup": round(speed(pruned) / speed(masked), 3),
                        "predicted_speedup_flops": round(predicted, 3),
                        "same_translations": runs[masked][0]["hypotheses"] == runs[pruned][0]["hypotheses"]})
    return {"subset": subset, "sentences": runs["unpruned"][0]["sentences"], "sentence_limit": sentences,
            "beam": beam, "batch_size": batch_size, "rounds": rounds,
            "device": "cpu" if cpu or not torch.cuda.is_available() else torch.cuda.get_device_name(0),
            "unpruned_tokens_per_s": round(speed("unpruned"), 1), "results": results,
            "runs": {name: [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items() if k != "hypotheses"}
                            for r in rs] for name, rs in runs.items()}}
