"""What head gates cost: gated models against fairseq's plain ones, side by side in one process.

    python benchmarks/gate_overhead.py [--out benchmarks/results/gate_overhead_cpu.json]
                                       [--device cpu|cuda] [--dtype float32|bfloat16] [--quick]

Four measurements, each for `plain` (fairseq's MultiheadAttention), `gated-open` (every head
gated, gates as initialised: open) and `gated-half` (half the heads of every block closed, as
after L0 training: log_alpha -10, gate 0):

  block     one causal self-attention block, forward + backward, train mode (gates sampled),
            T = 32 / 128 / 512 / 1024 with batch 64 / 16 / 4 / 2, d = 128 / 256 / 256 / 512,
            8 heads;
  nmt       training tokens/s (forward, backward, Adam step) of a 6+6 transformer (d 128, 8
            heads), all three attention types gated, a ~1k-token batch of 10-40-token sentences
            with padding;
  lm        the same for a 6-layer decoder-only transformer_lm (d 256) at T = 512, batch 2;
  generate  beam search (beam 5) with fairseq's SequenceGenerator, what fairseq-generate runs,
            generated tokens/s, eval mode;
  stats     one `fairseq-heads stats` forward (per-head weights captured: the explicit path) and
            one LRP backward (conservative rules), forward + backward time.

Variants run in interleaved rounds whose order rotates, so background load hits each alike.
The ratio is gated throughput / plain throughput over all rounds (beside it: the median of the
per-round ratios, and the ratio of the fastest rounds, the least disturbed by other load).
Goal: >= 0.95 everywhere. Untrained random weights: speed does not depend on them, except
that generation runs every hypothesis to the length limit.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict

import torch
from fairseq import options, tasks
from fairseq.modules import MultiheadAttention
from fairseq.sequence_generator import SequenceGenerator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import fairseq_heads  # noqa: E402,F401
from fairseq_heads.stats.capture import capture_heads  # noqa: E402
from fairseq_heads.stats.metrics.lrp import conservative_lrp_rules, lrp_head_relevance  # noqa: E402
from fairseq_heads.files import write_text_atomic  # noqa: E402
from fairseq_heads.gating.gated_attention import GatedMultiheadAttention  # noqa: E402
from fairseq_heads.heads import iter_attention

VARIANTS = ("plain", "gated-open", "gated-half")
BLOCK_SIZES = [  # (T, batch, d, fwd+bwd per timed unit), 8 heads
    (32, 64, 128, 16), (128, 16, 256, 4), (512, 4, 256, 3), (1024, 2, 512, 1)]
NMT_SIZES = ["--encoder-layers", "6", "--decoder-layers", "6", "--encoder-embed-dim", "128",
             "--decoder-embed-dim", "128", "--encoder-ffn-embed-dim", "512",
             "--decoder-ffn-embed-dim", "512", "--encoder-attention-heads", "8",
             "--decoder-attention-heads", "8"]
LM_SIZES = ["--decoder-layers", "6", "--decoder-embed-dim", "256", "--decoder-ffn-embed-dim",
            "1024", "--decoder-attention-heads", "8"]
VOCAB = 4000
CLOSED_LOG_ALPHA = -10.0  # sampled and deterministic gate are 0


def close_half(model: torch.nn.Module) -> None:
    """Every other head of every gated block closed (a layout L0 training ends in)."""
    for _, _, attention in iter_attention(model):
        if isinstance(attention, GatedMultiheadAttention):
            with torch.no_grad():
                attention.gate.log_alpha[1::2] = CLOSED_LOG_ALPHA


def interleaved(work: Dict[str, Callable[[], float]], rounds: int) -> Dict[str, dict]:
    """Run each variant's `work` (returns units done) once per round, rotating the order;
    returns per variant total units, seconds, per-round rates."""
    names = list(work)
    stats = {n: {"units": 0.0, "seconds": 0.0, "rates": []} for n in names}
    for name in names:  # warm-up, not timed
        work[name]()
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            start = time.perf_counter()
            units = work[name]()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            stats[name]["units"] += units
            stats[name]["seconds"] += elapsed
            stats[name]["rates"].append(units / elapsed)
    return stats


def summarise(stats: Dict[str, dict], unit: str) -> dict:
    plain = stats["plain"]
    out = {"unit": unit, "per_second": {n: s["units"] / s["seconds"] for n, s in stats.items()}}
    out["ratio_gated_over_plain"] = {
        n: (s["units"] / s["seconds"]) / (plain["units"] / plain["seconds"]) for n, s in stats.items() if n != "plain"}
    out["per_round_ratio_median"] = {
        n: statistics.median(g / p for g, p in zip(s["rates"], plain["rates"])) for n, s in stats.items() if n != "plain"}
    out["best_round_ratio"] = {  # fastest round of each: the least disturbed by other load
        n: max(s["rates"]) / max(plain["rates"]) for n, s in stats.items() if n != "plain"}
    return out


# ---------------------------------------------------------------- (a) one attention block


def bench_block(t, bsz, dim, rounds, device, dtype, repeats):
    torch.manual_seed(0)
    plain = MultiheadAttention(dim, 8, self_attention=True).to(device, dtype).train()
    modules = {"plain": plain}
    for name in VARIANTS[1:]:
        gated = GatedMultiheadAttention(dim, 8, self_attention=True).to(device, dtype).train()
        gated.load_state_dict(plain.state_dict(), strict=False)
        with torch.no_grad():
            if name == "gated-half":
                gated.gate.log_alpha[1::2] = CLOSED_LOG_ALPHA
        modules[name] = gated
    x = torch.randn(t, bsz, dim, device=device, dtype=dtype, requires_grad=True)
    # fairseq's decoder mask: float -inf above the diagonal
    causal = torch.triu(torch.full((t, t), float("-inf"), device=device, dtype=dtype), 1)

    def work(module):
        def run():
            for _ in range(repeats):
                out, _ = module(x, x, x, attn_mask=causal, need_weights=False)
                out.float().sum().backward()
            return float(repeats)
        return run

    return summarise(interleaved({n: work(m) for n, m in modules.items()}, rounds), "fwd+bwd")


# ---------------------------------------------------------------- (b) whole-model training


def write_dicts(directory: str) -> None:
    for name in ("dict.src.txt", "dict.tgt.txt", "dict.txt"):
        with open(os.path.join(directory, name), "w") as f:
            f.writelines(f"w{i} {VOCAB * 10 - i}\n" for i in range(VOCAB - 4))


def build_nmt(data_dir, arch, device, dtype):
    gated = arch != "transformer"
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        data_dir, "--task", "translation_heads", "-s", "src", "-t", "tgt", "--arch", arch,
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--dropout", "0.1", *NMT_SIZES,
        *(["--gated-attention", "enc-self,dec-self,enc-dec"] if gated else [])])
    task = tasks.setup_task(args)
    return task, task.build_model(args).to(device, dtype), task.build_criterion(args), args


def build_lm(data_dir, arch, device, dtype):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        data_dir, "--task", "language_modeling", "--arch", arch, "--tokens-per-sample", "512",
        "--criterion", "cross_entropy", "--dropout", "0.1", *LM_SIZES])
    task = tasks.setup_task(args)
    return task, task.build_model(args).to(device, dtype), task.build_criterion(args), args


def nmt_batches(task, count, max_tokens, device, seed=1):
    """Batches of sentences of 10-40 tokens (source left-padded, target right-padded, as
    fairseq pads them), about max_tokens source tokens each."""
    g = torch.Generator().manual_seed(seed)
    pad, eos = task.source_dictionary.pad(), task.source_dictionary.eos()
    batches = []
    for _ in range(count):
        bsz = max_tokens // 25
        src_lengths = torch.randint(10, 41, (bsz,), generator=g)
        tgt_lengths = (src_lengths.float() * (0.8 + 0.4 * torch.rand(bsz, generator=g))).long().clamp(2, 45)
        src = torch.full((bsz, int(src_lengths.max())), pad)
        tgt = torch.full((bsz, int(tgt_lengths.max())), pad)
        for i in range(bsz):
            n, m = int(src_lengths[i]), int(tgt_lengths[i])
            src[i, -n:] = torch.randint(4, VOCAB, (n,), generator=g)
            src[i, -1] = eos
            tgt[i, :m] = torch.randint(4, VOCAB, (m,), generator=g)
            tgt[i, m - 1] = eos
        prev = torch.full_like(tgt, pad)
        prev[:, 0] = eos
        prev[:, 1:] = tgt[:, :-1].masked_fill(tgt[:, :-1] == eos, pad)
        batches.append({"id": torch.arange(bsz), "nsentences": bsz, "ntokens": int(tgt_lengths.sum()),
                        "net_input": {"src_tokens": src.to(device), "src_lengths": src_lengths.to(device),
                                      "prev_output_tokens": prev.to(device)},
                        "target": tgt.to(device)})
    return batches


def lm_batches(count, bsz, length, device, seed=2):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        tokens = torch.randint(4, VOCAB, (bsz, length + 1), generator=g)
        batches.append({"id": torch.arange(bsz), "nsentences": bsz, "ntokens": bsz * length,
                        "net_input": {"src_tokens": tokens[:, :-1].to(device),
                                      "src_lengths": torch.full((bsz,), length).to(device)},
                        "target": tokens[:, 1:].contiguous().to(device)})
    return batches


def build_variants(build, plain_arch, gated_arch, device, dtype, data_dir):
    """The plain model and its gated twins (VARIANTS), all with the plain model's weights."""
    torch.manual_seed(1)
    task, plain, criterion, _ = build(data_dir, plain_arch, device, dtype)
    models = {"plain": plain}
    for name in VARIANTS[1:]:
        _, gated, _, _ = build(data_dir, gated_arch, device, dtype)
        gated.load_state_dict(plain.state_dict(), strict=False)
        if name == "gated-half":
            close_half(gated)
        models[name] = gated
    return task, criterion, models


def bench_training(build, plain_arch, gated_arch, batches, rounds, device, dtype, data_dir):
    _, criterion, models = build_variants(build, plain_arch, gated_arch, device, dtype, data_dir)
    for model in models.values():
        model.train()
    optimizers = {n: torch.optim.Adam(m.parameters(), lr=1e-4) for n, m in models.items()}

    def work(name):
        def run():
            tokens = 0
            for batch in batches:  # the same batches for every variant
                optimizers[name].zero_grad()
                loss, _, _ = criterion(models[name], batch)
                loss.backward()
                optimizers[name].step()
                tokens += batch["ntokens"]
            return float(tokens)
        return run

    return summarise(interleaved({n: work(n) for n in models}, rounds), "target tokens")


# ---------------------------------------------------------------- (c) generation


def bench_generate(data_dir, rounds, device, dtype, sentences):
    task, _, models = build_variants(build_nmt, "transformer", "gated_transformer", device, dtype, data_dir)
    for model in models.values():
        model.eval()
    batch = nmt_batches(task, 1, sentences * 25, device, seed=3)[0]
    sample = {"net_input": {k: batch["net_input"][k] for k in ("src_tokens", "src_lengths")}}
    generators = {}
    for name, model in models.items():
        model.make_generation_fast_(beamable_mm_beam_size=5, need_attn=False)  # as fairseq-generate
        generators[name] = SequenceGenerator([model], task.target_dictionary, beam_size=5,
                                             max_len_a=1.0, max_len_b=10)

    def work(name):
        def run():
            with torch.no_grad():
                hypos = generators[name].generate([models[name]], sample)
            return float(sum(h[0]["tokens"].numel() for h in hypos))
        return run

    return summarise(interleaved({n: work(n) for n in models}, rounds), "generated tokens")


# ---------------------------------------------------------------- (d) stats: capture and LRP


def bench_stats(data_dir, rounds, device, dtype):
    task, _, models = build_variants(build_nmt, "transformer", "gated_transformer", device, dtype, data_dir)
    for model in models.values():
        model.eval()
    batch = nmt_batches(task, 1, 512, device, seed=4)[0]
    net_input, target = batch["net_input"], batch["target"]
    mask = target.ne(task.target_dictionary.pad())

    def work(name):
        model = models[name]

        def run():
            with torch.no_grad(), capture_heads(model, weights=True, head_outputs=False):
                model(**net_input)
            with conservative_lrp_rules(model), capture_heads(model, weights=False) as captured:
                logits, _ = model(**net_input)
                keys = list(captured.head_outputs)
                lrp_head_relevance(logits, mask, captured, keys, mode="sentence")
            return float(batch["ntokens"])
        return run

    return summarise(interleaved({n: work(n) for n in models}, rounds), "target tokens (capture + LRP)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/gate_overhead_cpu.json")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="2 rounds (smoke test)")
    parser.add_argument("--only", default="block,nmt,lm,generate,stats")
    opts = parser.parse_args(argv)
    device, dtype = torch.device(opts.device), getattr(torch, opts.dtype)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    rounds = 2 if opts.quick else opts.rounds
    parts = set(opts.only.split(","))
    result = {"benchmark": "gate_overhead", "device": opts.device, "dtype": opts.dtype,
              "rounds": rounds, "variants": list(VARIANTS), "goal": "gated/plain >= 0.95",
              "machine": machine_info()}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as data_dir:
        write_dicts(data_dir)
        if "block" in parts:
            result["block"] = {}
            for t, bsz, dim, repeats in BLOCK_SIZES:
                key = f"T={t} batch={bsz} d={dim}"
                result["block"][key] = bench_block(t, bsz, dim, rounds, device, dtype, repeats)
                print(key, json.dumps(result["block"][key]["ratio_gated_over_plain"]), flush=True)
        if "nmt" in parts:
            task = build_nmt(data_dir, "transformer", device, dtype)[0]
            batches = nmt_batches(task, 1, 1024, device)
            result["nmt"] = bench_training(build_nmt, "transformer", "gated_transformer", batches, rounds,
                                           device, dtype, data_dir)
            result["nmt"]["model"] = " ".join(NMT_SIZES)
            print("nmt", json.dumps(result["nmt"]["ratio_gated_over_plain"]), flush=True)
        if "lm" in parts:
            batches = lm_batches(1, 2, 512, device)
            result["lm"] = bench_training(build_lm, "transformer_lm", "gated_transformer_lm", batches, rounds,
                                          device, dtype, data_dir)
            result["lm"]["model"] = " ".join(LM_SIZES) + " --tokens-per-sample 512, batch 2"
            print("lm", json.dumps(result["lm"]["ratio_gated_over_plain"]), flush=True)
        if "generate" in parts:
            result["generate"] = bench_generate(data_dir, rounds, device, dtype, 8)
            result["generate"]["setup"] = "the 6+6 NMT model, 8 sentences, beam 5, max_len_a 1, max_len_b 10"
            print("generate", json.dumps(result["generate"]["ratio_gated_over_plain"]), flush=True)
        if "stats" in parts:
            result["stats"] = bench_stats(data_dir, rounds, device, dtype)
            print("stats", json.dumps(result["stats"]["ratio_gated_over_plain"]), flush=True)
    result["wall_seconds"] = time.perf_counter() - started
    os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
    write_text_atomic(opts.out, json.dumps(result, indent=1) + "\n")
    print(f"wrote {opts.out} ({result['wall_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
