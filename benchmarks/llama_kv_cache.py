"""Generation speed and KV-cache size of a grouped-query `gated_llama` pruned by query head and by
KV group, against the prediction (`fairseq_heads.pruning.gqa.attention_cost`).

    python benchmarks/llama_kv_cache.py --out benchmarks/results/llama_kv_cache_cpu.json

A random-initialised gated_llama (speed and memory do not depend on trained weights): d=512,
6 layers, 8 query heads sharing 4 KV heads, SwiGLU 1376, tied vocabulary of 4000. Variants:
  full        8 query / 4 KV heads per layer
  query       4 query heads per layer, one of each KV group: every KV head stays
  kv-group    2 KV groups per layer kept whole: 4 query / 2 KV heads
Both pruned variants have the same query heads, so the attention FLOPs they save over the full
model are nearly equal; only kv-group halves the KV cache. Workload: a batch of --batch prompts
of --context random tokens fills fairseq's incremental state, then --steps greedy tokens, one at
a time (`model.decoder(tokens, incremental_state=...)`); only those steps are timed, in CPU
seconds (`time.process_time`, one thread), variants interleaved, median over --rounds. The cache
is measured as the bytes of every prev_key / prev_value tensor in the incremental state after
the last step, per cached token and sequence. Predicted FLOPs per generated token: attention
(projections + scores + values at the mean context of the timed steps, `attention_cost`) + SwiGLU
(3 d f multiply-adds per layer) + the output projection (d V), 2 FLOPs per multiply-add.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import torch  # noqa: E402
from fairseq import options, tasks  # noqa: E402

import fairseq_heads  # noqa: E402,F401  (registers gated_llama)
from fairseq_heads.files import write_text_atomic  # noqa: E402
from fairseq_heads.pruning.gqa import attention_cost  # noqa: E402
from fairseq_heads.pruning.physical import physically_prune  # noqa: E402

SHAPE = ["--decoder-embed-dim", "512", "--decoder-layers", "6", "--decoder-attention-heads", "8",
         "--decoder-kv-heads", "4", "--decoder-ffn-embed-dim", "1376",
         "--share-decoder-input-output-embed"]
VOCAB = 4000
LAYERS = 6
MASKS = {  # per layer: query heads kept (groups {0,1} {2,3} {4,5} {6,7})
    "query": [1, 0, 1, 0, 1, 0, 1, 0],
    "kv-group": [1, 1, 0, 0, 1, 1, 0, 0],
}


def build(directory):
    with open(os.path.join(directory, "dict.txt"), "w") as f:
        f.writelines(f"w{i} 1\n" for i in range(VOCAB - 4))
    args = options.parse_args_and_arch(options.get_training_parser(), [
        directory, "--task", "language_modeling", "--arch", "gated_llama", "--cpu",
        "--tokens-per-sample", "2048", "--user-dir", os.path.dirname(fairseq_heads.__file__), *SHAPE])
    torch.manual_seed(0)
    return tasks.setup_task(args).build_model(args).eval()


def cache_bytes(state) -> int:
    return sum(t.numel() * t.element_size() for buffer in state.values()
               for name, t in buffer.items() if name in ("prev_key", "prev_value") and t is not None)


def generate(model, prompt, steps):
    """(CPU seconds of the `steps` incremental steps, cache bytes at the end)."""
    state = {}
    with torch.no_grad():
        for t in range(1, prompt.size(1) + 1):  # the prompt's cache, token by token as fairseq does
            out = model.decoder(prompt[:, :t], incremental_state=state)
        tokens = torch.cat([prompt, out[0][:, -1].argmax(-1, keepdim=True)], dim=1)
        start = time.process_time()
        for _ in range(steps):
            out = model.decoder(tokens, incremental_state=state)
            tokens = torch.cat([tokens, out[0][:, -1].argmax(-1, keepdim=True)], dim=1)
        return time.process_time() - start, cache_bytes(state), tokens.size(1) - 1


def flops_per_token(model, context):
    d, f = 512, 1376
    return attention_cost(model, context=context).flops_per_token + LAYERS * 2 * 3 * d * f + 2 * d * VOCAB


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as directory:
        full = build(directory)
    variants = {"full": full}
    for name, row in MASKS.items():
        variants[name] = physically_prune(copy.deepcopy(full), {"dec-self": torch.tensor([row] * LAYERS).bool()})
    prompt = torch.randint(4, VOCAB, (args.batch, args.context), generator=torch.Generator().manual_seed(1))
    times = {name: [] for name in variants}
    measured_cache = {}
    for _ in range(args.rounds):
        for name, model in variants.items():
            seconds, cached, tokens = generate(model, prompt, args.steps)
            times[name].append(seconds)
            measured_cache[name] = cached / (args.batch * tokens)
    mean_context = args.context + args.steps / 2
    results = {}
    for name, model in variants.items():
        cost = attention_cost(model, context=int(mean_context))
        tokens_per_second = args.batch * args.steps / statistics.median(times[name])
        results[name] = {
            "query_heads": cost.query_heads, "kv_heads": cost.kv_heads,
            "attention_parameters": cost.attention_parameters,
            "parameters": sum(p.numel() for p in model.parameters()),
            "kv_cache_bytes_per_token_predicted": cost.kv_cache_bytes_per_token,
            "kv_cache_bytes_per_token_measured": measured_cache[name],
            "flops_per_token_predicted": flops_per_token(model, int(mean_context)),
            "cpu_seconds": times[name], "tokens_per_cpu_second": round(tokens_per_second, 2)}
    for name in MASKS:
        results[name]["speedup_measured"] = round(results[name]["tokens_per_cpu_second"]
                                                  / results["full"]["tokens_per_cpu_second"], 3)
        results[name]["speedup_predicted_by_flops"] = round(results["full"]["flops_per_token_predicted"]
                                                            / results[name]["flops_per_token_predicted"], 3)
    report = {"shape": " ".join(SHAPE), "vocabulary": VOCAB, "batch": args.batch,
              "context": args.context, "steps": args.steps, "rounds": args.rounds,
              "variants": {"query": "4 query heads/layer, one per KV group (KV heads all kept)",
                           "kv-group": "2 of 4 KV groups/layer kept whole"},
              "note": "KV-cache bytes are measured on fairseq's incremental state after the last "
                      "step; speeds are CPU seconds of one thread, median over rounds (cpu_seconds "
                      "lists every round: their spread is the noise of a machine shared with "
                      "other jobs, load average below)",
              "results": results, "machine": dict(machine_info(), load_average=list(os.getloadavg()))}
    write_text_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
