"""The named recipes and their scales: one frozen config each (`--set` overrides any field).

europarl_en_it  Transformer-base on Europarl EN->IT (317k pairs): the GPU queue's experiment (a)
                (recipes/gpu/README.md); `toy` runs the same steps on the toy corpus on a CPU.
"""
from typing import Dict

from .nmt import L0, Curve, Data, Generate, Model, NmtRecipe, Stats, Syntax, Train

# The toy scale: the synthetic corpus, a 2+2-layer d=32 model, a few dozen updates per
# training; every step in a few minutes on 2 CPU cores (CI). The numbers mean nothing.
TOY = NmtRecipe(name="toy")

# Transformer-base (6+6 layers, d=512, 8 heads of 64, ffn 2048) on one H200 in fp16. The
# baseline trains for 5 minutes (the minimum) with 16k-token batches; lr 1e-3 with
# 1,000 warm-up updates (a tenth of what 5 minutes give at the measured ~6 updates/s of the
# Multi30k run, stop 26). The L0 fine-tunes (gate lr x1000, the Multi30k GPU run's) run side
# by side on the GPU while the baseline is scored and analysed.
EUROPARL_BASE_GPU = NmtRecipe(
    name="europarl_en_it",
    data=Data(corpus="europarl_en_it", src="en", tgt="it", vocab_size=16000, max_len=100),
    syntax=Syntax(source="ud_pud/pud.en.txt.gz", target="ud_pud/pud.en.txt.gz",
                  conllu="ud_pud/en_pud-ud-test.conllu.gz"),
    model=Model(layers=6, dim=512, heads=8, ffn=2048),
    train=Train(max_tokens=16384, lr=1e-3, warmup=1000, max_update=1_000_000, minutes=5.0,
                dropout=0.1, label_smoothing=0.1, fp16=True, seed=1),
    l0=L0(encoder_lambdas=(0.005, 0.02), all_lambdas=(), control=True, updates=200, lr=1e-4,
          gate_lr_scale=1000.0, trace_interval=10),
    generate=Generate(subset="test", beam=5, batch_size=256),
    stats=Stats(subset="valid", bootstrap_replicates=200, max_tokens=8192, rare_outside_top=500),
    curve=Curve(metrics=("grad", "lrp"), steps=(0, 16, 32, 40, 44)),
    cpu=False,
)

RECIPES: Dict[str, Dict[str, NmtRecipe]] = {
    "europarl_en_it": {"toy": TOY, "gpu": EUROPARL_BASE_GPU},
}
