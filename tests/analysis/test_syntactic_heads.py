import pytest
import torch

from fairseq_heads.stats.labels import syntactic_labels
from fairseq_heads.stats.metrics.syntactic import DEP_TO_HEAD, HEAD_TO_DEP, SyntacticAccumulator
from fairseq_heads.stats.syntax.alignment import (
    Arc,
    align_subwords_to_words,
    extract_arcs,
    parse_conllu,
    prepare_sentence,
    sentence_text,
    sentence_words,
    word_level_attention,
)

CONLLU = """# sent_id = s1
# text = The old cat quickly ate fish.
1\tThe\tthe\tDET\t_\t_\t3\tdet\t_\t_
2\told\told\tADJ\t_\t_\t3\tamod\t_\t_
3\tcat\tcat\tNOUN\t_\t_\t5\tnsubj\t_\t_
4\tquickly\tquickly\tADV\t_\t_\t5\tadvmod\t_\t_
5\tate\teat\tVERB\t_\t_\t0\troot\t_\t_
6\tfish\tfish\tNOUN\t_\t_\t5\tdobj\t_\tSpaceAfter=No
7\t.\t.\tPUNCT\t_\t_\t5\tpunct\t_\t_

# sent_id = s2
1-2\tdu\t_\t_\t_\t_\t_\t_\t_\t_
1\tde\tde\tADP\t_\t_\t3\tcase\t_\t_
2\tle\tle\tDET\t_\t_\t3\tdet\t_\t_
3\tvin\tvin\tNOUN\t_\t_\t0\troot\t_\t_
3.1\tdrunk\t_\t_\t_\t_\t_\t_\t_\t_
4\tbu\tboire\tVERB\t_\t_\t3\tacl\t_\t_
5\thier\thier\tADV\t_\t_\t4\tadvmod:tmod\t_\t_
6\tit\til\tPRON\t_\t_\t4\tnsubj:pass\t_\t_

"""


def test_conllu_parsing_words_arcs_and_text():
    s1, s2 = parse_conllu(CONLLU)
    assert sentence_words(s1) == ["The", "old", "cat", "quickly", "ate", "fish", "."]
    assert set(extract_arcs(s1)) == {Arc("amod", 1, 2), Arc("nsubj", 2, 4), Arc("advmod", 3, 4), Arc("obj", 5, 4)}
    assert sentence_words(s2) == ["de", "le", "vin", "bu", "hier", "it"]  # no range, no empty node
    assert set(extract_arcs(s2)) == {Arc("advmod", 4, 3), Arc("nsubj", 5, 3)}
    assert set(extract_arcs(s2, keep_subtypes=True)) == set()
    s2.metadata.pop("text", None)
    assert sentence_text(s2) == "du vin bu hier it"


def test_subword_alignment_by_characters():
    s1, s2 = parse_conllu(CONLLU)
    pieces = ["▁The", "▁o", "ld", "▁cat", "▁quick", "ly", "▁", "ate", "▁fish", "."]
    assert align_subwords_to_words(pieces, s1) == [0, 1, 1, 2, 3, 3, 4, 4, 5, 6]
    # multiword token: all of "du" belongs to its first word ("de")
    assert align_subwords_to_words(["▁d", "u", "▁vin", "▁bu", "▁hier", "▁it"], s2) == [0, 0, 2, 3, 4, 5]


def test_subword_mismatch_raises_naming_the_sentence():
    s1, _ = parse_conllu(CONLLU)
    with pytest.raises(ValueError, match=r"sentence 7 \(sent_id=s1\).*The.*ate"):
        align_subwords_to_words(["▁The", "▁old", "▁dog", "▁quickly", "▁ate", "▁fish", "."], s1, sentence_index=7)


def test_word_level_attention_sums_keys_and_averages_queries():
    # positions: w0 = {0}, w1 = {1, 2}, EOS = 3
    attn = torch.tensor(
        [[0.1, 0.2, 0.3, 0.4], [0.5, 0.1, 0.1, 0.3], [0.3, 0.3, 0.2, 0.2], [0.25, 0.25, 0.25, 0.25]]
    )[None]
    word = word_level_attention(attn, [0, 1, 1, -1], num_words=2)
    expected = torch.tensor([[0.1, 0.5], [(0.5 + 0.3) / 2, (0.2 + 0.5) / 2]], dtype=torch.float64)
    assert torch.allclose(word[0], expected)


def _gold_following(num_words, arcs, heads=2):
    """Head 0: every dependent looks at its gold head; head 1: every word looks at the next word."""
    attn = torch.zeros(heads, num_words, num_words, dtype=torch.float64)
    for w in range(num_words):
        attn[1, w, min(w + 1, num_words - 1)] = 1.0
        attn[0, w, w] = 0.5
    for arc in arcs:
        attn[0, arc.dependent, arc.head] = 1.0
    return attn


def test_gold_following_head_scores_100_and_beats_baseline():
    # nsubj offsets vary (+1, +2, -1, +1, +1), so the best fixed offset (+1) gets 3 of 5.
    sentences = [
        (4, [Arc("nsubj", 0, 1), Arc("obj", 3, 1)]),
        (5, [Arc("nsubj", 1, 3), Arc("amod", 0, 1)]),
        (3, [Arc("nsubj", 2, 1)]),
        (6, [Arc("nsubj", 2, 3), Arc("nsubj", 4, 5)]),
        (2, []),
        (4, [Arc("amod", 0, 2), Arc("amod", 1, 2)]),
    ]
    acc = SyntacticAccumulator((2,), replicates=30)
    acc.update([_gold_following(n, arcs) for n, arcs in sentences], [arcs for _, arcs in sentences])
    result = acc.finalize()
    nsubj = result[("nsubj", DEP_TO_HEAD)]
    assert torch.allclose(nsubj.accuracy.estimate, torch.tensor([1.0, 0.6], dtype=torch.float64))
    assert nsubj.num_queries == 5 and nsubj.baseline == pytest.approx(0.6) and nsubj.baseline_offset == 1
    assert result[("amod", DEP_TO_HEAD)].num_queries == 3
    assert result[("amod", HEAD_TO_DEP)].num_queries == 2  # both amod dependents of word 2 form one query
    # offset -1 is correct for both head->dep amod queries (in the last sentence via its second dependent)
    assert result[("amod", HEAD_TO_DEP)].baseline == 1.0 and result[("amod", HEAD_TO_DEP)].baseline_offset == -1
    assert result[("advmod", DEP_TO_HEAD)].num_queries == 0
    labels = syntactic_labels({k: (v.accuracy.estimate, v.baseline) for k, v in result.items()})
    assert ("nsubj", DEP_TO_HEAD) in labels[(0,)]
    assert ("nsubj", DEP_TO_HEAD) not in labels.get((1,), [])
    assert acc.replicate_estimates().shape == (30, len(acc.slots), 2)


def test_prepare_sentence_end_to_end_from_subword_attention():
    s1, _ = parse_conllu(CONLLU)
    pieces = ["▁The", "▁o", "ld", "▁cat", "▁quick", "ly", "▁ate", "▁fish", "."]
    alignment = align_subwords_to_words(pieces, s1)
    arcs = extract_arcs(s1)
    token_attn = torch.full((1, len(pieces), len(pieces)), 0.01)
    for q, w in enumerate(alignment):
        for arc in arcs:
            if arc.dependent == w:
                token_attn[0, q, alignment.index(arc.head)] = 1.0
    word_attn, usable = prepare_sentence(s1, pieces, token_attn)
    acc = SyntacticAccumulator((1,), replicates=10)
    acc.update([word_attn], [usable])
    result = acc.finalize()
    for relation in ("nsubj", "obj", "amod", "advmod"):
        assert result[(relation, DEP_TO_HEAD)].accuracy.estimate.item() == 1.0
