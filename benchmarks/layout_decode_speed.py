"""CPU decoding speed-up of the head layouts that committed pruned models kept, next to the
speed-up their FLOPs predict (issue 37, item 7: "how much faster?").

    python benchmarks/layout_decode_speed.py --path BASELINE.pt --data DATA_BIN \
        --results docs/results/multi30k_en_de/results \
        --models enc_l0_0.005_conv_s1,enc_l0_0.0075_conv_s1,all_l0_0.005_conv_s1,all_l0_0.005_conv_s2 \
        --out benchmarks/results/multi30k_layouts_decode_cpu.json

Each model's result file records which heads it kept (`kept`, per type, layer and head). Those
layouts are applied to one checkpoint of the same size: pruned physically against the same
checkpoint with the heads masked (`pruning/decode_speed.compare_pruned`: the two translate
alike, checked; interleaved rounds; beam search). Decoding speed depends on the layout and on the
lengths decoded, not on which weights fill the heads, so the fine-tuned weights are not needed;
the lengths are the checkpoint's own translations, which this file records.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import torch  # noqa: E402

from fairseq_heads.files import write_text_atomic  # noqa: E402
from fairseq_heads.pruning.decode_speed import compare_pruned  # noqa: E402


def kept_layout(result_file: str) -> dict:
    """{type: 0/1 tensor [layers, heads]} of a result file's `kept`, every type it records."""
    with open(result_file, encoding="utf-8") as f:
        result = json.load(f)
    return {t: torch.tensor(rows, dtype=torch.float32) for t, rows in result["kept"].items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", required=True, help="a checkpoint of the models' size (transformer)")
    parser.add_argument("--data", required=True, help="data-bin with the --subset split")
    parser.add_argument("--results", required=True, help="folder of <model>/result.json files")
    parser.add_argument("--models", required=True, help="comma list of model names under --results")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--subset", default="test")
    parser.add_argument("--sentences", type=int, default=1_000_000, help="at most this many (default: all)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    files = {m: os.path.join(args.results, m, "result.json") for m in models}
    for option, path in [("--path", args.path), ("--data", args.data)] + [("--models", f) for f in files.values()]:
        if not os.path.exists(path):
            print(f"layout_decode_speed: error: {option}: {path} not found", file=sys.stderr)
            return 2
    masks = {m: kept_layout(f) for m, f in files.items()}
    torch.set_num_threads(1)  # one thread: the measurement the other load disturbs least
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as work:
        report = compare_pruned(args.path, args.data, args.src, args.tgt, masks, args.subset, args.sentences,
                                args.beam, args.batch_size, args.rounds, True, work)
    # other processes' load (1-minute averages), which interleaved rounds spread over every variant
    report.update(checkpoint=os.path.basename(args.path), layouts_from=args.results, machine=machine_info(),
                  load_average_before_after=[round(load_before[0], 2), round(os.getloadavg()[0], 2)],
                  command=" ".join(sys.argv))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_text_atomic(args.out, json.dumps(report, indent=1) + "\n")
    for r in report["results"]:
        print(f"{r['mask']}: heads kept {r['heads_kept']}; speed-up {r['speedup']} (FLOPs predict "
              f"{r['predicted_speedup_flops']}); same translations: {r['same_translations']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
