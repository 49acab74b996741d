"""Collects the a1 log's diagnosis and the rehearsal's numbers into one JSON (stdout)."""
import csv, glob, gzip, json, re, sys

A1 = "docs/results/europarl_en_it_base_gpu_a1/runs/europarl_en_it_gpu_s1/logs/baseline.log.gz"


def fairseq_records(lines):
    inner, valid, scale_events = [], [], []
    for line in lines:
        if "| train_inner |" in line:
            r = json.loads(line.split("| train_inner |", 1)[1])
            inner.append({k: float(r[k]) for k in ("num_updates", "loss", "nll_loss", "gnorm", "lr") if k in r}
                         | ({"loss_scale": float(r["loss_scale"])} if "loss_scale" in r else {}))
        elif "| valid |" in line:
            r = json.loads(line.split("| valid |", 1)[1])
            valid.append({"num_updates": int(r["valid_num_updates"]), "loss": float(r["valid_loss"]),
                          "nll_loss": float(r["valid_nll_loss"])})
        elif "gradient overflow detected" in line:
            scale_events.append({"time": line[11:19], "new_scale": float(line.rsplit(":", 1)[1])})
    return inner, valid, scale_events


def a1():
    with gzip.open(A1, "rt") as f:
        inner, valid, events = fairseq_records(f)
    return {"log": A1, "train_inner": inner, "valid": valid, "overflows": events,
            "skipped_updates": len(events), "updates": 1220}


def enc_dec_confidence(path):
    rows = [r for r in csv.DictReader(open(path)) if r["type"] == "enc-dec"]
    values = [float(r["confidence"]) for r in rows]
    return {"max": max(values), "mean": sum(values) / len(values),
            "per_layer_max": [max(float(r["confidence"]) for r in rows if int(r["layer"]) == l) for l in range(6)]}


def rehearsal(run):
    base = f"work/rehearsal/runs/{run}"
    inner, _, _ = fairseq_records(open(f"{base}.log"))
    out = {"train_inner": inner[::5] + ([inner[-1]] if (len(inner) - 1) % 5 else []), "confidence_enc_dec": {}}
    for u in (100, 200, 300):
        try:
            out["confidence_enc_dec"][u] = enc_dec_confidence(f"work/rehearsal/eval/{run}/stats_{u}/heads.csv")
        except FileNotFoundError:
            pass
    m = re.search(r'\| valid on .*? loss ([\d.]+) \| nll_loss ([\d.]+)', open(f"work/rehearsal/eval/{run}.validate.log").read())
    if m:
        out["valid_300"] = {"loss": float(m.group(1)), "nll_loss": float(m.group(2))}
    gen = open(f"work/rehearsal/eval/{run}.generate.txt").read()
    m = re.search(r"BLEU = ([\d.]+)", gen)
    hyps = [l.split("\t")[2] for l in gen.splitlines() if l.startswith("D-")]
    out["bleu_valid_shard"] = {"bleu": float(m.group(1)) if m else None, "sentences": len(hyps),
                               "distinct_hypotheses": len(set(hyps)),
                               "signature_line": next((l for l in gen.splitlines() if "BLEU" in l), "")}
    return out


if __name__ == "__main__":
    print(json.dumps({"a1": a1(), **({r: rehearsal(r) for r in sys.argv[1:]})}, indent=1))
