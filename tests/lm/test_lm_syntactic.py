"""Syntactic heads of a decoder-only LM end to end: the toy grammar's gold parses binarised as a
subset of the toy LM's data (its own sentencepiece model and dictionary, one sentence a line),
`fairseq-heads stats --conllu` on the tiny LM, checked against the attention of each sentence
computed alone; and the subsets whose blocks are not the CoNLL-U sentences exit 2 in one line."""
import csv
import json
from collections import Counter

import pytest
import torch

from fairseq_heads import cli
from fairseq_heads.data.lm_conllu_subset import binarize_conllu_subsets, main as lm_conllu_subset_main
from fairseq_heads.data.synthetic_corpus import generate_splits, to_conllu

SENTENCES = 40


def write_toy_conllu(path, pairs):
    path.write_text("".join(to_conllu(pair, f"toy-{i}") for i, pair in enumerate(pairs)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def toy_pairs():
    """Toy-grammar sentences of the LM corpus's own lexicon (seed 1), not its train text."""
    _, splits = generate_splits({"train": 1500, "parsed": SENTENCES}, seed=1)
    return splits["parsed"]


@pytest.fixture(scope="module")
def parsed_bin(lm_data_bin, toy_pairs, tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_parsed")
    conllu = write_toy_conllu(root / "toy.conllu", toy_pairs)
    return binarize_conllu_subsets(str(lm_data_bin), str(lm_data_bin.parent / "spm.model"),
                                   {"parsed": str(conllu)}, str(root / "bin"))


@pytest.fixture(scope="module")
def lm_stats(parsed_bin, plain_lm, tmp_path_factory):
    from pathlib import Path

    out = tmp_path_factory.mktemp("lm_syntactic") / "stats"
    conllu = Path(parsed_bin) / "parsed.conllu"
    assert cli.main(["stats", parsed_bin, "--path", str(plain_lm), "--gen-subset", "parsed", "--cpu",
                     "--conllu", str(conllu), "--metrics", "confidence,syntactic", "--batch-size", "7",
                     "--bootstrap-replicates", "20", "--log-format", "none", "--out-dir", str(out)]) == 0
    with open(out / "heads.csv", newline="", encoding="utf-8") as f:
        rows = {(int(r["layer"]), int(r["head"])): r for r in csv.DictReader(f)}
    return rows, json.loads((out / "heads.json").read_text(encoding="utf-8"))["meta"]


def test_the_subset_is_the_conllu_text_one_sentence_a_line(parsed_bin, toy_pairs):
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(f"{parsed_bin}/dict.txt")
    dataset = data_utils.load_indexed_dataset(f"{parsed_bin}/parsed", dictionary)
    assert len(dataset) == SENTENCES
    for i in (0, SENTENCES - 1):
        text = dictionary.string(dataset[i], bpe_symbol="sentencepiece")
        assert text == toy_pairs[i].source_text and dictionary.unk() not in dataset[i].tolist()


def test_a_sentence_without_text_exits_2_naming_it(lm_data_bin, toy_pairs, tmp_path, capsys):
    conllu = write_toy_conllu(tmp_path / "toy.conllu", toy_pairs[:3])
    blocks = conllu.read_text(encoding="utf-8").split("\n\n")
    blocks[1] = "\n".join(line for line in blocks[1].split("\n") if not line.startswith("# text"))
    conllu.write_text("\n\n".join(blocks), encoding="utf-8")
    assert lm_conllu_subset_main(["--data-bin", str(lm_data_bin), "--spm-model", str(lm_data_bin.parent / "spm.model"),
                                  "--subset", f"x={conllu}", "--out-dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"lm_conllu_subset: error: {conllu}: sentence 2 has no '# text = ...' line (or an empty one)"]
    assert not (tmp_path / "out").exists()


def causal_queries_by_hand(parses):
    """Per (relation, direction): the queries an LM can answer and the best negative offset's
    hits, from the gold arcs alone (docs/metrics.md)."""
    from fairseq_heads.stats.metrics.syntactic import preceding_queries, syntactic_queries
    from fairseq_heads.stats.syntax.alignment import extract_arcs

    counts, offsets = Counter(), {}
    for tokenlist in parses:
        for q in preceding_queries(syntactic_queries(extract_arcs(tokenlist))):
            slot = (q.relation, q.direction)
            counts[slot] += 1
            offsets.setdefault(slot, Counter()).update({c - q.query for c in q.correct})
    return counts, offsets


def test_lm_syntactic_columns_match_the_gold_arcs_and_the_attention_by_hand(lm_stats, parsed_bin, plain_lm):
    from pathlib import Path

    from fairseq import checkpoint_utils
    from fairseq.data import data_utils

    from fairseq_heads.stats.capture import capture_heads
    from fairseq_heads.stats.metrics.syntactic import preceding_queries, query_hits, syntactic_queries
    from fairseq_heads.stats.syntax.alignment import prepare_sentence
    from fairseq_heads.stats.syntax.conllu_index import ConlluIndex

    rows, meta = lm_stats
    assert meta["model_kind"] == "language_model" and meta["sample_break_mode"] == "eos"
    assert meta["syntactic_scored_arcs"] == "other end precedes the query"
    assert meta["sentences"] == SENTENCES
    with ConlluIndex(str(Path(parsed_bin) / "parsed.conllu")) as index:
        parses = [index[i] for i in range(len(index))]
    counts, offsets = causal_queries_by_hand(parses)
    # the toy grammar is SVO with adjectives before nouns: subjects and adjectives precede their heads
    assert counts[("nsubj", "head->dep")] > 0 and counts[("obj", "dep->head")] > 0
    assert counts[("nsubj", "dep->head")] == 0 and counts[("amod", "dep->head")] == 0
    baselines = meta["syntactic_baselines"]["dec-self"]
    for (relation, direction), n in counts.items():
        best, hits = max(offsets[(relation, direction)].items(), key=lambda kv: (kv[1], -abs(kv[0]), -kv[0]))
        assert baselines[f"{relation},{direction}"] == {"baseline": pytest.approx(hits / n), "offset": best,
                                                        "queries": n}
        assert best < 0
    row = rows[(0, 0)]
    assert row["syntactic_nsubj_dep2head"] == "" and float(row["syntactic_nsubj_dep2head_count"]) == 0

    # the model's attention, one unpadded sentence at a time ([EOS] + its tokens, as the LM reads it)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(plain_lm)], arg_overrides={"data": parsed_bin})
    model, dictionary = models[0].eval(), task.source_dictionary
    dataset = data_utils.load_indexed_dataset(f"{parsed_bin}/parsed", dictionary)
    hits = {}
    with torch.no_grad():
        for i, tokenlist in enumerate(parses):
            line = dataset[i][:-1]  # without its EOS
            source = torch.cat([torch.tensor([dictionary.eos()]), line])[None]
            with capture_heads(model, weights=True, head_outputs=False, attention_types=("dec-self",)) as captured:
                model(source)
                weights = torch.stack([w[0] for w in captured.type_weights("dec-self")])  # (L, H, T, T)
            token_attn = weights[..., 1:, 1:]  # the real tokens: EOS is not a word
            pieces = [dictionary[int(t)] for t in line]
            word_attn, arcs = prepare_sentence(tokenlist, pieces, token_attn)
            queries = preceding_queries(syntactic_queries(arcs))
            for q, hit in zip(queries, query_hits(word_attn, queries).unbind(-1)):
                slot = (q.relation, q.direction)
                hits[slot] = hits.get(slot, 0) + hit.to(torch.float64)
    for (relation, direction), n in counts.items():
        column = f"syntactic_{relation}_{direction.replace('->', '2')}"
        for (layer, head), row in rows.items():
            assert float(row[f"{column}_count"]) == n
            assert float(row[column]) == pytest.approx(float(hits[(relation, direction)][layer, head]) / n,
                                                       abs=1.5 / n), (column, layer, head)
            assert float(row[f"{column}_baseline"]) == pytest.approx(baselines[f"{relation},{direction}"]["baseline"])
            assert 0.0 <= float(row[f"{column}_ci_low"]) <= float(row[f"{column}_ci_high"]) <= 1.0


def assert_exits_2_in_one_line(args, capsys, message):
    assert cli.main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("fairseq-heads stats: error:") and message in error, error


def test_parses_that_are_not_the_subsets_lines_exit_2(parsed_bin, lm_data_bin, plain_lm, toy_pairs, tmp_path,
                                                      capsys):
    base = ["stats", "--path", str(plain_lm), "--cpu", "--log-format", "none", "--metrics", "syntactic",
            "--bootstrap-replicates", "5", "--out-dir", str(tmp_path / "out")]
    fewer = write_toy_conllu(tmp_path / "fewer.conllu", toy_pairs[:-1])
    assert_exits_2_in_one_line([base[0], parsed_bin, *base[1:], "--gen-subset", "parsed", "--conllu", str(fewer)],
                               capsys, f"--conllu {fewer} has {SENTENCES - 1} sentences but subset 'parsed' has "
                                       f"{SENTENCES} lines (0 empty)")
    # the LM's own valid text: ten sentences a line and a blank line between documents
    valid = write_toy_conllu(tmp_path / "valid.conllu", toy_pairs)
    assert_exits_2_in_one_line([base[0], str(lm_data_bin), *base[1:], "--gen-subset", "valid",
                                "--conllu", str(valid)], capsys, "--sample-break-mode eos")
    # as many sentences, other words: the alignment names the first sentence that differs
    other = write_toy_conllu(tmp_path / "other.conllu", list(reversed(toy_pairs)))
    assert_exits_2_in_one_line([base[0], parsed_bin, *base[1:], "--gen-subset", "parsed", "--conllu", str(other)],
                               capsys, f"--conllu {other} does not match the lines of the subset")
    assert not (tmp_path / "out").exists()


def test_lm_blocks_must_be_the_sentences_and_fit_the_model():
    from fairseq_heads.stats.registry import StatsError
    from fairseq_heads.stats.run import check_lm_sentence_blocks

    check_lm_sentence_blocks([5, 9, 2], 3, "pud", "pud.conllu", limit=9)  # sizes count the EOS
    with pytest.raises(StatsError, match=r"has 3 sentences but subset 'pud' has 3 lines \(1 empty\).*"
                                         r"--sample-break-mode eos"):
        check_lm_sentence_blocks([5, 1, 2], 3, "pud", "pud.conllu", limit=9)  # a document break
    with pytest.raises(StatsError, match=r"line 1 \(0-based\) has 10 tokens with its EOS, more than the "
                                         r"model's 9 positions \(--tokens-per-sample\); 2 lines"):
        check_lm_sentence_blocks([5, 10, 12], 3, "pud", "pud.conllu", limit=9)
