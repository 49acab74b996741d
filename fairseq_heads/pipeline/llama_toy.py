"""A tiny gated_llama (RoPE, RMSNorm, SwiGLU, 4 query heads sharing 2 KV heads per layer) through
the whole head pipeline at CPU scale (docs/llama.md): lm.py's steps with whole KV groups as the
unit, and what only a LLaMA-family model has.

    l0_<λ>            L0 fine-tune with one gate per KV group and a head target (`target_heads`
                      groups open at the end); pruned_l0_<λ> removes whole groups
    curve_<m>         Michel et al.'s curve by KV group
    pruned_query      the baseline pruned by query head, its top `query_heads_kept` by LRP;
                      perplexity_pruned_query (outside results/: no row of the LM tables)
    hf_round_trip     where transformers is installed: a tiny random LlamaForCausalLM -> import-hf
                      -> binarise-hf -> perplexity -> prune by KV group -> export-hf
"""
import collections
import importlib.util
import json
import os
from dataclasses import dataclass
from typing import List

from ..commands import (binarise_hf as binarise_hf_command, curve as curve_command,
                        export_hf as export_hf_command, import_hf as import_hf_command,
                        lm_result as lm_result_command, prune as prune_command)
from .fairseq_steps import run_fairseq_heads
from .lm import LmRecipe, LmSteps
from .runner import Step, StepContext


@dataclass(frozen=True)
class LlamaToyRecipe(LmRecipe):
    prune_unit: str = "kv-group"
    target_heads: int = 2           # KV groups open at the end of the L0 fine-tune
    query_heads_kept: int = 4       # the baseline pruned by query head from its LRP scores
    hf_round_trip: bool = True      # runs only where transformers is installed (the `hf` extra)


class LlamaToySteps(LmSteps):
    def steps(self) -> List[Step]:
        c = self.c
        steps = super().steps() + [
            Step("pruned_query", "models/pruned_query", {"keep": c.query_heads_kept}, inputs=("stats",),
                 call=self.run_pruned_query),
            Step("perplexity_pruned_query", "perplexity/pruned_query", {"batch_size": c.batch_size},
                 inputs=("data", "pruned_query"), call=self.perplexity_call("models/pruned_query/checkpoint.pt")),
        ]
        # not read by the report, so it may come and go with transformers without re-running it
        if c.hf_round_trip and importlib.util.find_spec("transformers") is not None:
            steps.append(Step("hf_round_trip", "hf", {"prune_unit": c.prune_unit}, inputs=("data",),
                              call=self.run_hf_round_trip))
        return steps

    def l0_argv(self, lam: float):
        argv = super().l0_argv(lam)
        unit = ["--prune-unit", self.c.prune_unit, "--target-heads", str(self.c.target_heads)]
        return lambda context: argv(context) + unit

    def prune_call(self, name: str):
        def call(context: StepContext) -> None:  # the fine-tune's gates decide which groups go
            run_fairseq_heads(prune_command, [
                "--path", context.path(f"models/{name}/checkpoint_last.pt"),
                "--out", os.path.join(context.out, "checkpoint.pt"), "--from-gates", "--prune-unit", self.c.prune_unit])
        return call

    def curve_call(self, metric: str):
        def call(context: StepContext) -> None:
            c = self.c
            run_fairseq_heads(curve_command, [
                self.data_bin(context), "--path", self.baseline_checkpoint(context),
                "--scores", context.path("stats/baseline/heads.csv"), "--metric", metric,
                "--steps", ",".join(str(n) for n in c.curve.steps), "--prune-unit", c.prune_unit,
                "--gen-subset", "valid", "--batch-size", c.batch_size,
                "--out", os.path.join(context.out, "curve.csv"), *self.device()])
        return call

    def run_pruned_query(self, context: StepContext) -> None:
        run_fairseq_heads(prune_command, [
            "--path", self.baseline_checkpoint(context), "--out", os.path.join(context.out, "checkpoint.pt"),
            "--from-importance", context.path("stats/baseline/heads.csv"), "--metric", "lrp",
            "--keep", self.c.query_heads_kept])

    def perplexity_call(self, checkpoint: str, data_bin: str = "data/bin"):
        def call(context: StepContext) -> None:
            # kind "baseline": lm-result's file format; kept out of results/, so out of the tables
            run_fairseq_heads(lm_result_command, [
                context.path(data_bin), "--path", context.path(checkpoint), "--name", context.step.name,
                "--kind", "baseline", "--subset", "valid", "--results-dir", context.results,
                "--batch-size", self.c.batch_size, "--out", os.path.join(context.out, "result.json"),
                *self.device()])
        return call

    def run_hf_round_trip(self, context: StepContext) -> None:
        hf = context.out
        model = os.path.join(hf, "model")
        write_tiny_hf_llama(model, context.path("prepare/text/train.txt"))
        run_fairseq_heads(import_hf_command, [model, "--out", os.path.join(hf, "imported")])
        run_fairseq_heads(binarise_hf_command, [
            model, "--text", context.path("prepare/text"), "--out", os.path.join(hf, "bin")])
        imported = os.path.join(hf, "imported", "checkpoint.pt")
        run_fairseq_heads(lm_result_command, [
            os.path.join(hf, "bin"), "--path", imported, "--name", "hf_imported", "--kind", "baseline",
            "--subset", "valid", "--results-dir", context.results, "--out", os.path.join(hf, "perplexity.json"),
            *self.device()])
        # whole KV groups by made-up scores: group 0 of layer 0 and group 1 of layer 1 stay
        scores = os.path.join(hf, "scores.csv")
        with open(scores, "w", encoding="utf-8") as f:
            f.write("type,layer,head,lrp\n" + "".join(
                f"dec-self,{layer},{head},{int((head // 2) == layer)}\n" for layer in (0, 1) for head in range(4)))
        run_fairseq_heads(prune_command, [
            "--path", imported, "--out", os.path.join(hf, "pruned.pt"), "--from-importance", scores,
            "--metric", "lrp", "--keep", 2, "--prune-unit", "kv-group"])
        run_fairseq_heads(export_hf_command, [
            "--path", os.path.join(hf, "pruned.pt"), "--source", model, "--out", os.path.join(hf, "export")])


def write_tiny_hf_llama(out_dir: str, text: str) -> None:
    """A tiny random-initialised Hugging Face LlamaForCausalLM (2 layers, d=64, 4 query / 2 KV
    heads) with a word-level tokenizer of the text's words: what the round trip imports."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with open(text, encoding="utf-8") as f:
        counts = collections.Counter(word for line in f for word in line.split())
    vocab = ["<unk>", "<s>", "</s>"] + [word for word, _ in counts.most_common(1000)]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(out_dir, safe_serialization=True)
    tokenizer = {"version": "1.0", "added_tokens": [], "normalizer": None,
                 "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
                 "decoder": None, "truncation": None, "padding": None,
                 "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(vocab)}, "unk_token": "<unk>"}}
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f)
