"""`export-hf` of an imported translation model: back to HF unchanged, and after physical
pruning with unequal heads per layer (HF keeps its head counts; removed heads are zeros), HF's
forward pass on the exported directory equals the pruned fairseq model; a checkpoint that is
not the source's model is refused in one line."""
import os

import pytest
import torch

from fairseq_heads.checkpoints import load_model_and_task
from fairseq_heads.cli import main
from fairseq_heads.hf.export_translation import export_translation
from fairseq_heads.pruning.checkpoint import prune_checkpoint
from fairseq_heads.pruning.mask_policy import GivenMask
from hf_translation.helpers import convert, full_lprobs, hf_lprobs, make_batch
from hf_translation.hf_models import KINDS, parity_tolerance

pytest.importorskip("transformers")
pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

# keeps 2, 3 of 4 heads in the two layers of each type: counts HF's config cannot give per layer
MASK = {"enc-self": [[1, 0, 1, 0], [0, 1, 1, 1]], "dec-self": [[0, 0, 1, 1], [1, 1, 1, 1]],
        "enc-dec": [[1, 1, 0, 1], [0, 1, 0, 0]]}


def load_hf(kind, directory):
    from transformers import AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM.from_pretrained(directory, attn_implementation="eager").eval()


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_unpruned_and_pruned(tmp_path, kind):
    converted = convert(kind, tmp_path)
    batch = make_batch(converted)
    reference = hf_lprobs(converted.hf, batch)

    result = export_translation(os.path.join(converted.out_dir, "checkpoint.pt"), converted.hf_dir,
                                str(tmp_path / "back"))
    assert result.heads == {t: [4, 4] for t in MASK}
    assert (hf_lprobs(load_hf(kind, str(tmp_path / "back")), batch) - reference).abs().max() < parity_tolerance(reference)

    pruned = str(tmp_path / "pruned.pt")
    prune_checkpoint(os.path.join(converted.out_dir, "checkpoint.pt"), pruned,
                     GivenMask({t: torch.tensor(rows) for t, rows in MASK.items()}))
    model, _ = load_model_and_task(pruned, {"data": converted.out_dir})
    assert [layer.self_attn.num_heads for layer in model.encoder.layers] == [2, 3]
    ours = full_lprobs(model.eval(), batch)[..., converted.target_index()]
    assert (ours - reference).abs().max() > 1e-2  # pruning changed the function
    result = export_translation(pruned, converted.hf_dir, str(tmp_path / "pruned_hf"))
    assert result.heads == {t: [sum(r) for r in rows] for t, rows in MASK.items()}
    exported = load_hf(kind, str(tmp_path / "pruned_hf"))
    assert exported.config.encoder_attention_heads == 4
    assert (hf_lprobs(exported, batch) - ours).abs().max() < parity_tolerance(ours)


def test_a_checkpoint_of_another_model_is_refused(tmp_path, capsys):
    marian = convert("marian", tmp_path / "marian")
    fsmt = convert("fsmt", tmp_path / "fsmt")
    out = tmp_path / "out"
    status = main(["export-hf", "--path", os.path.join(marian.out_dir, "checkpoint.pt"),
                   "--source", fsmt.hf_dir, "--out", str(out)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "not a model imported from it" in lines[0], lines
    assert not out.exists()
