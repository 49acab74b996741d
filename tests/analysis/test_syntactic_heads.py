import pytest
import torch

from fairseq_heads.stats.labels import syntactic_labels
from fairseq_heads.stats.metrics.syntactic import (
    DEP_TO_HEAD,
    HEAD_TO_DEP,
    SyntacticAccumulator,
    SyntacticQuery,
    preceding_queries,
    syntactic_queries,
)
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


# ---------------------------------------------------------------- decoder-only LMs (causal)


def _pointing(num_words, targets_per_head):
    """(heads, W, W) word attention: head h puts 1.0 on targets_per_head[h](w) from each word w
    (0.0 elsewhere); a word whose target is None attends to itself."""
    attn = torch.zeros(len(targets_per_head), num_words, num_words, dtype=torch.float64)
    for h, target in enumerate(targets_per_head):
        for w in range(num_words):
            key = target(w)
            attn[h, w, w if key is None else key] = 1.0
    return attn


def _causal(attn):
    """What a causal LM can produce: nothing on later words (rows renormalised onto the rest)."""
    causal = torch.tril(attn)
    return causal / causal.sum(-1, keepdim=True).clamp(min=1e-12)


def test_preceding_queries_keep_the_earlier_correct_words_only():
    arcs = [Arc("obj", 3, 1), Arc("nsubj", 0, 1), Arc("amod", 2, 4), Arc("amod", 6, 4)]
    kept = preceding_queries(syntactic_queries(arcs))
    assert sorted(kept) == sorted([
        SyntacticQuery("obj", DEP_TO_HEAD, 3, (1,)),      # head 1 precedes dependent 3
        SyntacticQuery("nsubj", HEAD_TO_DEP, 1, (0,)),    # dependent 0 precedes head 1
        SyntacticQuery("amod", DEP_TO_HEAD, 6, (4,)),
        SyntacticQuery("amod", HEAD_TO_DEP, 4, (2,)),     # of dependents 2 and 6, only 2 precedes 4
    ])


# (number of words, arcs): obj heads precede their dependents at offsets -1, -2, -1, -3, -1; the
# nsubj heads follow their dependents except in the last sentence (an inverted "said he").
LM_SENTENCES = [
    (4, [Arc("nsubj", 0, 1), Arc("obj", 2, 1)]),
    (5, [Arc("nsubj", 0, 2), Arc("obj", 4, 2)]),
    (3, [Arc("obj", 2, 1)]),
    (6, [Arc("nsubj", 1, 2), Arc("obj", 5, 2)]),
    (5, [Arc("obj", 1, 0), Arc("nsubj", 4, 3)]),
    (1, []),
]


def _gold_heads(arcs):
    heads = {arc.dependent: arc.head for arc in arcs}
    return heads.get


def test_lm_head_pointing_to_the_earlier_gold_head_scores_1_and_the_baseline_is_the_best_negative_offset():
    attn = []
    for n, arcs in LM_SENTENCES:
        head_of = _gold_heads(arcs)
        gold_if_earlier = lambda w, head_of=head_of: (head_of(w) if head_of(w) is not None and head_of(w) < w
                                                       else None)
        previous_word = lambda w: w - 1 if w > 0 else None
        attn.append(_causal(_pointing(n, [gold_if_earlier, previous_word])))
    acc = SyntacticAccumulator((2,), replicates=20, causal=True)
    acc.update(attn, [arcs for _, arcs in LM_SENTENCES])
    result = acc.finalize()
    obj = result[("obj", DEP_TO_HEAD)]
    # closed form: 5 obj arcs, offsets -1, -2, -1, -3, -1 -> offset -1 is right for 3 of 5
    assert obj.num_queries == 5 and obj.baseline_offset == -1 and obj.baseline == pytest.approx(3 / 5)
    assert obj.accuracy.estimate.tolist() == [1.0, pytest.approx(3 / 5)]
    # nsubj dep->head: only the inverted arc (head 3 before dependent 4) can be scored
    nsubj = result[("nsubj", DEP_TO_HEAD)]
    assert nsubj.num_queries == 1 and nsubj.baseline_offset == -1 and nsubj.baseline == 1.0
    assert nsubj.accuracy.estimate.tolist() == [1.0, 1.0]
    # every offset the baseline can choose among is negative
    assert all(k < 0 for hits in acc.offset_hits for k in hits)
    assert result[("advmod", DEP_TO_HEAD)].num_queries == 0
    assert torch.isnan(result[("advmod", DEP_TO_HEAD)].accuracy.estimate).all()
    labels = syntactic_labels({k: (v.accuracy.estimate, v.baseline) for k, v in result.items()})
    assert ("obj", DEP_TO_HEAD) in labels[(0,)] and ("obj", DEP_TO_HEAD) not in labels.get((1,), [])


def test_lm_arcs_whose_other_end_follows_the_query_get_no_credit_and_are_not_counted():
    # Hand-built, not causal: head 0 points each dependent to its gold head wherever it is; head
    # 1 only where the head FOLLOWS (else to itself); head 2 only where it precedes.
    attn = []
    for n, arcs in LM_SENTENCES:
        head_of = _gold_heads(arcs)
        anywhere = head_of
        later = lambda w, head_of=head_of: head_of(w) if head_of(w) is not None and head_of(w) > w else None
        earlier = lambda w, head_of=head_of: head_of(w) if head_of(w) is not None and head_of(w) < w else None
        attn.append(_pointing(n, [anywhere, later, earlier]))
    arcs = [arcs for _, arcs in LM_SENTENCES]
    full, causal = SyntacticAccumulator((3,), replicates=5), SyntacticAccumulator((3,), replicates=5, causal=True)
    full.update(attn, arcs)
    causal.update(attn, arcs)
    full_nsubj, causal_nsubj = full.finalize()[("nsubj", DEP_TO_HEAD)], causal.finalize()[("nsubj", DEP_TO_HEAD)]
    # translation (all arcs): 4 queries, the following-head pattern hits the 3 forward arcs
    assert full_nsubj.num_queries == 4
    assert full_nsubj.accuracy.estimate.tolist() == [1.0, 0.75, 0.25]
    assert full_nsubj.baseline_offset == 1
    # LM: the 3 arcs whose head follows are out of the denominator, so no credit for head 1
    assert causal_nsubj.num_queries == 1 and causal_nsubj.accuracy.count.tolist() == [1.0, 1.0, 1.0]
    assert causal_nsubj.accuracy.estimate.tolist() == [1.0, 0.0, 1.0]
    assert causal_nsubj.baseline_offset == -1
    # head->dep: a verb's query keeps its earlier subjects; objects follow their verbs here
    causal_result = causal.finalize()
    assert causal_result[("nsubj", HEAD_TO_DEP)].num_queries == 3  # the inverted subject follows
    assert causal_result[("nsubj", HEAD_TO_DEP)].baseline == pytest.approx(2 / 3)  # offsets -1, -2, -1
    assert causal_result[("obj", HEAD_TO_DEP)].num_queries == 0
    assert full.finalize()[("obj", HEAD_TO_DEP)].num_queries == 5
