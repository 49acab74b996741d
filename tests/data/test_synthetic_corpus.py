"""The synthetic corpus really has the structure the analysis code will look for."""

from collections import Counter, defaultdict
from pathlib import Path

import conllu
import pytest

from fairseq_heads.data import synthetic_corpus as sc

SIZES = dict(n_train=3000, n_valid=200, n_test=200)
# the (dependent UPOS, head UPOS) every relation must have; root hangs off the virtual node
EXPECTED_UPOS = {
    "det": ("DET", "NOUN"),
    "amod": ("ADJ", "NOUN"),
    "nsubj": ("NOUN", "VERB"),
    "obj": ("NOUN", "VERB"),
    "advmod": ("ADV", "VERB"),
    "punct": ("PUNCT", "VERB"),
    "root": ("VERB", None),
}


def read_lines(path: Path):
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    files = sc.generate_corpus(out, seed=7, **SIZES)
    return out, files


def load_split(files, split):
    paths = files[split]
    sentences = conllu.parse(paths.conllu.read_text(encoding="utf-8"))
    alignments = [[tuple(map(int, a.split("-"))) for a in line.split()] for line in read_lines(paths.align)]
    return read_lines(paths.src), read_lines(paths.tgt), sentences, alignments


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    small = dict(n_train=200, n_valid=20, n_test=20)
    a = sc.generate_corpus(tmp_path / "a", seed=3, **small)
    b = sc.generate_corpus(tmp_path / "b", seed=3, **small)
    c = sc.generate_corpus(tmp_path / "c", seed=4, **small)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert not [n for n in names if ".tmp" in n]  # atomic writes left no temp files
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert a["train"].src.read_bytes() != c["train"].src.read_bytes()
    assert a["train"].tgt.read_bytes() != c["train"].tgt.read_bytes()


def test_line_counts_and_lengths(corpus):
    _, files = corpus
    for split, expected in (("train", SIZES["n_train"]), ("valid", SIZES["n_valid"]), ("test", SIZES["n_test"])):
        src, tgt, sentences, alignments = load_split(files, split)
        assert len(src) == len(tgt) == len(sentences) == len(alignments) == expected
    src = read_lines(files["train"].src)
    lengths = [len(line.split()) for line in src]
    assert 4 <= min(lengths) and max(lengths) <= 14
    assert all(line == line.lower() and line.endswith(" .") for line in src)


def test_splits_do_not_overlap(corpus):
    _, files = corpus
    train = set(read_lines(files["train"].src))
    assert len(train) == SIZES["n_train"]
    for split in ("valid", "test"):
        assert not train & set(read_lines(files[split].src))


def test_conllu_is_a_well_formed_gold_parse(corpus):
    _, files = corpus
    src, _, sentences, _ = load_split(files, "train")
    seen_relations = set()
    for index, (line, sentence) in enumerate(zip(src, sentences)):
        assert sentence.metadata["text"] == line
        assert sentence.metadata["sent_id"] == f"train-{index + 1}"
        assert [t["form"] for t in sentence] == line.split()
        heads = [t["head"] for t in sentence]
        assert heads.count(0) == 1
        assert all(0 <= h <= len(sentence) and h != t["id"] for h, t in zip(heads, sentence))
        for token in sentence:  # acyclic: every token reaches the root
            node, steps = token["id"], 0
            while node != 0:
                node, steps = sentence[node - 1]["head"], steps + 1
                assert steps <= len(sentence)
        for token in sentence:
            relation = token["deprel"]
            seen_relations.add(relation)
            head_upos = sentence[token["head"] - 1]["upos"] if token["head"] else None
            assert (token["upos"], head_upos) == EXPECTED_UPOS[relation], (line, token)
            if token["upos"] == "NOUN":
                number = token["feats"]["Number"]
                assert number in ("Sing", "Plur")
                assert (token["form"] != token["lemma"]) == (number == "Plur")
            else:
                assert token["feats"] is None
    assert seen_relations == set(EXPECTED_UPOS)


def test_conllu_has_ten_columns(corpus):
    _, files = corpus
    token_lines = [l for l in read_lines(files["valid"].conllu) if l and not l.startswith("#")]
    assert token_lines and all(len(l.split("\t")) == 10 for l in token_lines)


def aligned_target(sentence, target, alignment):
    """source 0-based index -> target index, for one sentence (every source word is translated once)."""
    mapping = dict(alignment)
    assert sorted(mapping) == list(range(len(sentence)))
    assert sorted(mapping.values()) == list(range(len(target)))
    return mapping


def test_target_is_verb_final_with_adjectives_after_nouns(corpus):
    _, files = corpus
    _, tgt, sentences, alignments = load_split(files, "train")
    for line, sentence, alignment in zip(tgt, sentences, alignments):
        target = line.split()
        to_target = aligned_target(sentence, target, alignment)
        position = {t["deprel"]: to_target[t["id"] - 1] for t in sentence if t["deprel"] in ("root", "nsubj", "obj")}
        assert target[-1] == "."
        assert position["root"] == len(target) - 2  # verb right before the full stop
        assert position["nsubj"] < position["obj"] < position["root"]  # S O V
        for token in sentence:
            if token["deprel"] in ("amod", "det"):
                noun_position = to_target[token["head"] - 1]
                if token["deprel"] == "amod":
                    assert to_target[token["id"] - 1] > noun_position
                else:
                    assert to_target[token["id"] - 1] < noun_position


def test_target_agreement(corpus):
    """Verb form depends on the subject's number; adjective form on its noun's number and gender."""
    _, files = corpus
    _, tgt, sentences, alignments = load_split(files, "train")
    lexicon = sc.build_lexicon(7)
    gender = {lemma.source: lemma.gender for lemma in lexicon.nouns}
    verb_forms = defaultdict(set)  # (verb lemma, subject number) -> target forms
    adj_forms = defaultdict(set)  # (adj lemma, noun number, noun gender) -> target forms
    for line, sentence, alignment in zip(tgt, sentences, alignments):
        target = line.split()
        to_target = aligned_target(sentence, target, alignment)
        subject = next(t for t in sentence if t["deprel"] == "nsubj")
        verb = next(t for t in sentence if t["deprel"] == "root")
        verb_forms[(verb["lemma"], subject["feats"]["Number"])].add(target[to_target[verb["id"] - 1]])
        for token in sentence:
            if token["deprel"] == "amod":
                noun = sentence[token["head"] - 1]
                key = (token["lemma"], noun["feats"]["Number"], gender[noun["lemma"]])
                adj_forms[key].add(target[to_target[token["id"] - 1]])
    # a function of the controller's features...
    assert all(len(forms) == 1 for forms in verb_forms.values())
    assert all(len(forms) == 1 for forms in adj_forms.values())
    # ...that actually varies with them
    both_numbers = [v for v, n in verb_forms if n == "Sing" and (v, "Plur") in verb_forms]
    assert len(both_numbers) > 10
    assert all(verb_forms[(v, "Sing")] != verb_forms[(v, "Plur")] for v in both_numbers)
    adj_variants = defaultdict(set)
    for (adj, _, _), forms in adj_forms.items():
        adj_variants[adj] |= forms
    assert max(len(v) for v in adj_variants.values()) == 4  # 2 numbers x 2 genders


def test_target_words_translate_one_source_word(corpus):
    """Each target word type always comes from the same source word type (a fixed lexicon)."""
    _, files = corpus
    src, tgt, _, alignments = load_split(files, "train")
    source_of = defaultdict(set)
    for s_line, t_line, alignment in zip(src, tgt, alignments):
        s_words, t_words = s_line.split(), t_line.split()
        for i, j in alignment:
            source_of[t_words[j]].add(s_words[i])
    assert all(len(sources) == 1 for sources in source_of.values())


def test_lexicon_is_bijective_and_deterministic():
    lexicon = sc.build_lexicon(5)
    lemmas = list(lexicon.all_lemmas())
    assert len({l.source for l in lemmas}) == len(lemmas)
    assert len({l.target for l in lemmas}) == len(lemmas)
    assert lexicon == sc.build_lexicon(5)
    assert lexicon != sc.build_lexicon(6)
    config = sc.GrammarConfig(n_nouns=40, n_verbs=10, n_adjectives=5, n_adverbs=3)
    small = sc.build_lexicon(5, config)
    assert (len(small.nouns), len(small.verbs), len(small.adjectives), len(small.adverbs)) == (40, 10, 5, 3)


def test_open_classes_are_zipfian_with_rare_words(corpus):
    _, files = corpus
    _, _, sentences, _ = load_split(files, "train")
    noun_counts = Counter(t["lemma"] for s in sentences for t in s if t["upos"] == "NOUN")
    ranked = [count for _, count in noun_counts.most_common()]
    assert ranked[0] > 20 * ranked[min(99, len(ranked) - 1)]  # heavy head
    rare = [lemma for lemma, count in noun_counts.items() if count <= 3]
    assert len(rare) >= 0.1 * len(noun_counts)  # and a real tail of rare words
    # the lexicon's rank order is the frequency order (up to sampling noise)
    lexicon_rank = {l.source: r for r, l in enumerate(sc.build_lexicon(7).nouns)}
    top = [lemma for lemma, _ in noun_counts.most_common(5)]
    assert all(lexicon_rank[lemma] < 15 for lemma in top)


def test_config_changes_vocabulary_size(tmp_path):
    config = sc.GrammarConfig(n_nouns=20, n_verbs=5, n_adjectives=4, n_adverbs=2)
    files = sc.generate_corpus(tmp_path, n_train=300, n_valid=10, n_test=10, seed=1, config=config)
    sentences = conllu.parse(files["train"].conllu.read_text(encoding="utf-8"))
    nouns = {t["lemma"] for s in sentences for t in s if t["upos"] == "NOUN"}
    verbs = {t["lemma"] for s in sentences for t in s if t["upos"] == "VERB"}
    assert len(nouns) <= 20 and len(verbs) <= 5


def test_language_codes_name_the_files(tmp_path):
    files = sc.generate_corpus(tmp_path, n_train=5, n_valid=1, n_test=1, src_lang="en", tgt_lang="xx")
    assert files["train"].src.name == "train.en" and files["train"].tgt.name == "train.xx"
    assert (tmp_path / "lexicon.tsv").exists()
