"""Where the decoder's attention to the source goes, per layer (averaged over heads): the share on
the source's final </s>, and the share on the source position aligned by relative position
(i/T of the way through the target -> the same fraction through the source, +-2 tokens)."""
import json, os, sys
import torch
from fairseq import checkpoint_utils, utils
from fairseq.data import data_utils

utils.import_user_module(type("A", (), {"user_dir": os.path.abspath("fairseq_heads")})())
out = {}
for run in sys.argv[1:]:
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([f"work/rehearsal/runs/{run}/ckpt/checkpoint_1_300.pt"])
    model = models[0].eval()
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(200)])
    n = batch["net_input"]
    eos_share, diag_share = [], []
    with torch.no_grad():
        enc = model.encoder(n["src_tokens"], src_lengths=n["src_lengths"])
        for layer in range(6):
            _, extra = model.decoder.extract_features(n["prev_output_tokens"], encoder_out=enc, alignment_layer=layer)
            attn = extra["attn"][0]  # batch x tgt x src, mean over heads; source left-padded: </s> last
            tmask = batch["target"].ne(task.target_dictionary.pad())
            e = attn[:, :, -1][tmask].mean().item()
            S = attn.size(2)
            src_len = n["src_lengths"].float()[:, None]
            tgt_len = tmask.sum(1).float()[:, None]
            pos = torch.arange(attn.size(1)).float()[None, :]
            centre = (S - src_len) + (pos / tgt_len) * (src_len - 1)  # left padding offset
            idx = torch.arange(S).float()[None, None, :]
            near = (idx - centre[:, :, None]).abs() <= 2
            diag = (attn * near).sum(-1)[tmask].mean().item()
            eos_share.append(round(e, 3)); diag_share.append(round(diag, 3))
    out[run] = {"eos_share_per_layer": eos_share, "near_diagonal_share_per_layer": diag_share, "sentences": 200}
print(json.dumps(out))
