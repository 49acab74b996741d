"""`fairseq-heads export-hf`: an imported model, kv-group pruned with equal groups per layer (or
with a gate half closed), exported, loads in transformers and gives our log-probs; layouts HF
cannot express exit 2 with one line and write nothing."""
import pytest
import torch

from fairseq_heads.checkpoints import load_model_and_task
from fairseq_heads.cli import main
from fairseq_heads.hf.import_hf import import_hf
from llama.helpers import full_lprobs
from llama.hf_models import VOCAB, hf_model, parity_tolerance, save_hf_model

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

pytest.importorskip("transformers")
SCORES = ["type,layer,head,lrp", "dec-self,0,0,0.1", "dec-self,0,1,0.2", "dec-self,0,2,0.9",
          "dec-self,0,3,0.8", "dec-self,1,0,0.5", "dec-self,1,1,0.5", "dec-self,1,2,0.05",
          "dec-self,1,3,0.05"]  # keep 2 groups: layer 0's second, layer 1's first


def ours_and_hf(checkpoint, data_dir, hf_dir, index):
    from transformers import AutoModelForCausalLM

    model, _ = load_model_and_task(str(checkpoint), {"data": str(data_dir)})
    exported = AutoModelForCausalLM.from_pretrained(str(hf_dir)).eval()
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(3))
    ours = full_lprobs(model.eval(), index[ids])[..., index]
    with torch.no_grad():
        theirs = torch.log_softmax(exported(ids).logits.float(), -1)
    return model, exported, ours, theirs


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_kv_group_pruned_model_exports_and_hf_computes_the_same(kind, tmp_path, capsys):
    source = save_hf_model(hf_model(kind, kv_heads=2), kind, tmp_path / "hf")
    imported = import_hf(source, str(tmp_path / "imported"))
    index = torch.tensor(imported.vocab.hf_to_fairseq)
    (tmp_path / "heads.csv").write_text("\n".join(SCORES) + "\n")
    pruned = tmp_path / "pruned.pt"
    assert main(["prune", "--path", str(tmp_path / "imported" / "checkpoint.pt"), "--out", str(pruned),
                 "--from-importance", str(tmp_path / "heads.csv"), "--metric", "lrp", "--keep", "2",
                 "--prune-unit", "kv-group"]) == 0
    assert main(["export-hf", "--path", str(pruned), "--source", source, "--out", str(tmp_path / "out")]) == 0
    assert "2 query heads / 1 KV heads per layer" in capsys.readouterr().out
    model, exported, ours, theirs = ours_and_hf(pruned, tmp_path / "imported", tmp_path / "out", index)
    assert exported.config.num_key_value_heads == 1 and exported.config.num_attention_heads == 2
    assert (ours - theirs).abs().max() <= parity_tolerance(theirs)


def test_gates_are_folded_into_o_proj(tmp_path):
    source = save_hf_model(hf_model("llama", kv_heads=2), "llama", tmp_path / "hf")
    imported = import_hf(source, str(tmp_path / "imported"))
    checkpoint = tmp_path / "imported" / "checkpoint.pt"
    state = torch.load(checkpoint, weights_only=False)
    # deterministic gates 0.5 and 0 (sigmoid(0) * 1.2 - 0.1; log-alpha -5 closes)
    state["model"]["decoder.layers.0.self_attn.gate.log_alpha"] = torch.tensor([0.0, 3.0, -5.0, 3.0])
    torch.save(state, checkpoint)
    assert main(["export-hf", "--path", str(checkpoint), "--source", source, "--out", str(tmp_path / "out")]) == 0
    index = torch.tensor(imported.vocab.hf_to_fairseq)
    _, _, ours, theirs = ours_and_hf(checkpoint, tmp_path / "imported", tmp_path / "out", index)
    assert (ours - theirs).abs().max() <= parity_tolerance(theirs)


def test_per_query_pruning_is_refused(tmp_path, capsys):
    source = save_hf_model(hf_model("llama", kv_heads=2), "llama", tmp_path / "hf")
    import_hf(source, str(tmp_path / "imported"))
    # 6 of 8 heads: each layer keeps a group whole and one head of the other (3 heads, 2 KV)
    values = [0.01, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.02]
    (tmp_path / "heads.csv").write_text("type,layer,head,lrp\n" + "".join(
        f"dec-self,{i // 4},{i % 4},{v}\n" for i, v in enumerate(values)))
    pruned = tmp_path / "pruned.pt"
    assert main(["prune", "--path", str(tmp_path / "imported" / "checkpoint.pt"), "--out", str(pruned),
                 "--from-importance", str(tmp_path / "heads.csv"), "--metric", "lrp", "--keep", "6"]) == 0
    capsys.readouterr()
    assert main(["export-hf", "--path", str(pruned), "--source", source, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--prune-unit kv-group" in error[0]
    assert not (tmp_path / "out").exists()
