"""A seeded synthetic parallel corpus with known syntax, for the demo and the tests.

The analysis code asks "does head X attend to the syntactic parent / the rare word / the
agreement controller?". On real data the answer is uncertain; here the structure is built in:

source (gold CoNLL-U written alongside):
    [det] adj* NOUN(+s) [adv] VERB [det] adj* NOUN(+s) [adv] .
target (a fixed, learnable transformation of the source):
    [det'] NOUN'(+r) adj'+agr* [det'] NOUN'(+r) adj'+agr* [adv'] [adv'] VERB'+agr .

* every lemma has one fixed pseudo-word translation (bijective lexicon, separate per class);
* the target is verb-final (S O adv V) and puts adjectives after their noun;
* the target verb suffix agrees with the subject's number, which the source verb does not
  show, so a translator has to look back at the subject;
* the target adjective suffix agrees with its noun's number and (target-only) gender class;
* open-class words are drawn from a Zipf law, so the tail of each class is genuinely rare.

Pure Python (no torch); the same seed gives byte-identical files.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import random
from dataclasses import dataclass
from pathlib import Path

from ..files import write_text_atomic
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

SPLITS = ("train", "valid", "test")
OPEN_CLASSES = ("noun", "verb", "adj", "adv")

# Syllable inventories. Source words never contain "s" (the plural suffix); target stems never
# contain l/n/r/m, the letters of the target suffixes, so an inflected form can never collide
# with a bare stem of another lemma.
SOURCE_CONSONANTS = "bdfgklmnprtvz"
SOURCE_VOWELS = "aeiou"
TARGET_CONSONANTS = "bdfgkpstvxz"
TARGET_VOWELS = "aeiouy"

SOURCE_PLURAL_SUFFIX = "s"
TARGET_PLURAL_SUFFIX = "r"
# target verb agrees with the subject's number
TARGET_VERB_SUFFIX = {"Sing": "m", "Plur": "mo"}
# target adjective agrees with its noun's (number, gender class)
TARGET_ADJ_SUFFIX = {
    ("Sing", 0): "l",
    ("Sing", 1): "n",
    ("Plur", 0): "li",
    ("Plur", 1): "ni",
}
# Which noun numbers each determiner combines with (like "the", "this", "a", "some").
DETERMINER_NUMBERS: Tuple[Tuple[str, ...], ...] = (
    ("Sing", "Plur"),
    ("Sing", "Plur"),
    ("Sing",),
    ("Plur",),
)
PUNCT = "."


@dataclass(frozen=True)
class GrammarConfig:
    """Sizes and probabilities of the toy grammar (defaults sized for the CPU demo)."""

    n_nouns: int = 300
    n_verbs: int = 100
    n_adjectives: int = 60
    n_adverbs: int = 30
    zipf_exponent: float = 1.1
    p_determiner: float = 0.75
    p_plural: float = 0.4
    # P(0, 1, 2, ... adjectives) in a noun phrase
    adjective_count_probs: Tuple[float, ...] = (0.45, 0.35, 0.15, 0.05)
    p_subject_adverb: float = 0.25
    p_object_adverb: float = 0.25


@dataclass(frozen=True)
class Lemma:
    word_class: str  # noun, verb, adj, adv, det
    source: str
    target: str
    gender: int = 0  # nouns only: target gender class (0/1)
    numbers: Tuple[str, ...] = ("Sing", "Plur")  # determiners only: compatible numbers


@dataclass(frozen=True)
class Lexicon:
    """The fixed bilingual lexicon; open classes are listed in Zipf rank order (0 = most frequent)."""

    nouns: Tuple[Lemma, ...]
    verbs: Tuple[Lemma, ...]
    adjectives: Tuple[Lemma, ...]
    adverbs: Tuple[Lemma, ...]
    determiners: Tuple[Lemma, ...]

    def by_class(self, word_class: str) -> Tuple[Lemma, ...]:
        return {
            "noun": self.nouns,
            "verb": self.verbs,
            "adj": self.adjectives,
            "adv": self.adverbs,
            "det": self.determiners,
        }[word_class]

    def all_lemmas(self) -> Iterable[Lemma]:
        return itertools.chain(self.determiners, self.nouns, self.verbs, self.adjectives, self.adverbs)


@dataclass(frozen=True)
class Token:
    """One source token with its gold UD annotation (head is 1-based, 0 = root)."""

    form: str
    lemma: str
    upos: str
    feats: str
    head: int
    deprel: str


@dataclass(frozen=True)
class SentencePair:
    source: Tuple[Token, ...]
    target: Tuple[str, ...]
    # (source index, target index), 0-based word positions: which source word each target word translates
    alignment: Tuple[Tuple[int, int], ...]

    @property
    def source_text(self) -> str:
        return " ".join(token.form for token in self.source)

    @property
    def target_text(self) -> str:
        return " ".join(self.target)


class SplitFiles(NamedTuple):
    src: Path
    tgt: Path
    conllu: Path
    align: Path


# --------------------------------------------------------------------------- lexicon


def _pseudo_word(rng: random.Random, consonants: str, vowels: str, n_syllables: int) -> str:
    return "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(n_syllables))


def _unique_words(
    rng: random.Random, count: int, consonants: str, vowels: str, syllables: Sequence[int], taken: set
) -> List[str]:
    """`count` new pronounceable CV-syllable words, none already in `taken` (which is updated)."""
    words: List[str] = []
    while len(words) < count:
        word = _pseudo_word(rng, consonants, vowels, rng.choice(syllables))
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def build_lexicon(seed: int = 1, config: Optional[GrammarConfig] = None) -> Lexicon:
    """The bilingual lexicon of a seed: a deterministic function of (seed, config sizes)."""
    config = config or GrammarConfig()
    # own stream, so the lexicon does not shift when sentence sampling changes
    rng = random.Random(f"fairseq-heads-lexicon-{seed}")
    source_taken: set = set()
    target_taken: set = set()

    def make(word_class: str, count: int, syllables: Sequence[int]) -> List[Tuple[str, str]]:
        sources = _unique_words(rng, count, SOURCE_CONSONANTS, SOURCE_VOWELS, syllables, source_taken)
        targets = _unique_words(rng, count, TARGET_CONSONANTS, TARGET_VOWELS, syllables, target_taken)
        return list(zip(sources, targets))

    determiners = tuple(
        Lemma("det", src, tgt, numbers=numbers)
        for (src, tgt), numbers in zip(make("det", len(DETERMINER_NUMBERS), (1,)), DETERMINER_NUMBERS)
    )
    nouns = tuple(Lemma("noun", s, t, gender=rng.randrange(2)) for s, t in make("noun", config.n_nouns, (2, 3)))
    verbs = tuple(Lemma("verb", s, t) for s, t in make("verb", config.n_verbs, (2, 3)))
    adjectives = tuple(Lemma("adj", s, t) for s, t in make("adj", config.n_adjectives, (2, 3)))
    adverbs = tuple(Lemma("adv", s, t) for s, t in make("adv", config.n_adverbs, (3,)))
    return Lexicon(nouns=nouns, verbs=verbs, adjectives=adjectives, adverbs=adverbs, determiners=determiners)


@functools.lru_cache(maxsize=None)
def zipf_cumulative_weights(n: int, exponent: float) -> Tuple[float, ...]:
    """Cumulative weights of P(rank r) ∝ r^-exponent, r = 1..n (for random.choices / bisect)."""
    return tuple(itertools.accumulate((rank ** -exponent for rank in range(1, n + 1))))


# --------------------------------------------------------------------------- sentences


@dataclass
class _NounPhrase:
    determiner: Optional[Lemma]
    adjectives: List[Lemma]
    noun: Lemma
    number: str


@dataclass
class _Sampler:
    rng: random.Random
    lexicon: Lexicon
    config: GrammarConfig

    def open_word(self, word_class: str) -> Lemma:
        lemmas = self.lexicon.by_class(word_class)
        cum = zipf_cumulative_weights(len(lemmas), self.config.zipf_exponent)
        # bisect on one uniform draw: the same as random.choices(cum_weights=...), spelled out
        index = bisect.bisect(cum, self.rng.random() * cum[-1])
        return lemmas[min(index, len(lemmas) - 1)]

    def noun_phrase(self) -> _NounPhrase:
        number = "Plur" if self.rng.random() < self.config.p_plural else "Sing"
        determiner = None
        if self.rng.random() < self.config.p_determiner:
            compatible = [d for d in self.lexicon.determiners if number in d.numbers]
            determiner = self.rng.choice(compatible)
        probs = self.config.adjective_count_probs
        n_adjectives = self.rng.choices(range(len(probs)), weights=probs)[0]
        adjectives = [self.open_word("adj") for _ in range(n_adjectives)]
        return _NounPhrase(determiner, adjectives, self.open_word("noun"), number)


def _source_noun_phrase(np: _NounPhrase, noun_position: int, head: int, deprel: str) -> List[Token]:
    """Source tokens of a noun phrase whose noun sits at 1-based `noun_position`."""
    tokens: List[Token] = []
    if np.determiner is not None:
        d = np.determiner
        tokens.append(Token(d.source, d.source, "DET", "_", noun_position, "det"))
    for adj in np.adjectives:
        tokens.append(Token(adj.source, adj.source, "ADJ", "_", noun_position, "amod"))
    form = np.noun.source + (SOURCE_PLURAL_SUFFIX if np.number == "Plur" else "")
    tokens.append(Token(form, np.noun.source, "NOUN", f"Number={np.number}", head, deprel))
    return tokens


def _target_noun_phrase(np: _NounPhrase) -> List[str]:
    words = [np.determiner.target] if np.determiner is not None else []
    words.append(np.noun.target + (TARGET_PLURAL_SUFFIX if np.number == "Plur" else ""))
    suffix = TARGET_ADJ_SUFFIX[(np.number, np.noun.gender)]
    words.extend(adj.target + suffix for adj in np.adjectives)
    return words


def _noun_phrase_length(np: _NounPhrase) -> int:
    return (np.determiner is not None) + len(np.adjectives) + 1


def sample_sentence(rng: random.Random, lexicon: Lexicon, config: GrammarConfig) -> SentencePair:
    """One sentence pair drawn from the grammar with `rng`."""
    sampler = _Sampler(rng, lexicon, config)
    subject = sampler.noun_phrase()
    subject_adverb = sampler.open_word("adv") if rng.random() < config.p_subject_adverb else None
    verb = sampler.open_word("verb")
    obj = sampler.noun_phrase()
    object_adverb = sampler.open_word("adv") if rng.random() < config.p_object_adverb else None

    # 1-based source positions, needed for the heads
    subject_noun = _noun_phrase_length(subject)
    verb_position = subject_noun + (subject_adverb is not None) + 1
    object_noun = verb_position + _noun_phrase_length(obj)

    source: List[Token] = []
    source.extend(_source_noun_phrase(subject, subject_noun, verb_position, "nsubj"))
    if subject_adverb is not None:
        source.append(Token(subject_adverb.source, subject_adverb.source, "ADV", "_", verb_position, "advmod"))
    source.append(Token(verb.source, verb.source, "VERB", "_", 0, "root"))
    source.extend(_source_noun_phrase(obj, object_noun, verb_position, "obj"))
    if object_adverb is not None:
        source.append(Token(object_adverb.source, object_adverb.source, "ADV", "_", verb_position, "advmod"))
    source.append(Token(PUNCT, PUNCT, "PUNCT", "_", verb_position, "punct"))

    # target and alignment, built from the same pieces (S O adv* V .)
    target: List[str] = []
    alignment: List[Tuple[int, int]] = []

    def emit(words: Sequence[str], source_indices: Sequence[int]) -> None:
        for word, source_index in zip(words, source_indices):
            alignment.append((source_index, len(target)))
            target.append(word)

    def np_source_order(np: _NounPhrase, first: int) -> List[int]:
        # target order is det, noun, adjectives; source order is det, adjectives, noun (0-based)
        det = [first] if np.determiner is not None else []
        adj_start = first + len(det)
        noun = adj_start + len(np.adjectives)
        return det + [noun] + list(range(adj_start, noun))

    emit(_target_noun_phrase(subject), np_source_order(subject, 0))
    emit(_target_noun_phrase(obj), np_source_order(obj, verb_position))  # object starts after the verb
    if subject_adverb is not None:
        emit([subject_adverb.target], [verb_position - 2])
    if object_adverb is not None:
        emit([object_adverb.target], [object_noun])
    emit([verb.target + TARGET_VERB_SUFFIX[subject.number]], [verb_position - 1])
    emit([PUNCT], [len(source) - 1])
    return SentencePair(tuple(source), tuple(target), tuple(alignment))


def generate_splits(
    sizes: Dict[str, int], seed: int = 1, config: Optional[GrammarConfig] = None
) -> Tuple[Lexicon, Dict[str, List[SentencePair]]]:
    """Sentence pairs per split, no source sentence repeated within or across splits.

    Uniqueness keeps the cleaning step's de-duplication a no-op (so the side files stay
    aligned) and keeps valid/test out of train.
    """
    config = config or GrammarConfig()
    lexicon = build_lexicon(seed, config)
    rng = random.Random(seed)
    seen: set = set()
    splits: Dict[str, List[SentencePair]] = {}
    for split, size in sizes.items():
        pairs: List[SentencePair] = []
        attempts = 0
        while len(pairs) < size:
            attempts += 1
            if attempts > 50 * size + 1000:
                raise ValueError(f"grammar too small to draw {size} unique sentences for split {split!r}")
            pair = sample_sentence(rng, lexicon, config)
            if pair.source_text not in seen:
                seen.add(pair.source_text)
                pairs.append(pair)
        splits[split] = pairs
    return lexicon, splits


# --------------------------------------------------------------------------- output


def to_conllu(pair: SentencePair, sent_id: str) -> str:
    """The gold parse of the source sentence as one CoNLL-U block (ends with a blank line)."""
    lines = [f"# sent_id = {sent_id}", f"# text = {pair.source_text}"]
    for index, token in enumerate(pair.source, start=1):
        columns = [str(index), token.form, token.lemma, token.upos, "_", token.feats, str(token.head), token.deprel, "_", "_"]
        lines.append("\t".join(columns))
    return "\n".join(lines) + "\n\n"


def to_pharaoh(alignment: Iterable[Tuple[int, int]]) -> str:
    return " ".join(f"{s}-{t}" for s, t in alignment)


def lexicon_tsv(lexicon: Lexicon) -> str:
    rows = ["class\trank\tsource\ttarget\tgender"]
    for word_class in ("det",) + OPEN_CLASSES:
        for rank, lemma in enumerate(lexicon.by_class(word_class)):
            gender = str(lemma.gender) if word_class == "noun" else "_"
            rows.append(f"{word_class}\t{rank}\t{lemma.source}\t{lemma.target}\t{gender}")
    return "\n".join(rows) + "\n"


def generate_corpus(
    out_dir,
    n_train: int = 10000,
    n_valid: int = 500,
    n_test: int = 500,
    seed: int = 1,
    config: Optional[GrammarConfig] = None,
    src_lang: str = "src",
    tgt_lang: str = "tgt",
) -> Dict[str, SplitFiles]:
    """Write the corpus to `out_dir` and return the files per split.

    Per split: `{split}.{src_lang}`, `{split}.{tgt_lang}` (one sentence per line),
    `{split}.conllu` (gold source parses, one block per line) and `{split}.align`
    (Pharaoh `i-j` source-target word alignment per line); plus `lexicon.tsv`.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lexicon, splits = generate_splits({"train": n_train, "valid": n_valid, "test": n_test}, seed, config)
    files: Dict[str, SplitFiles] = {}
    for split, pairs in splits.items():
        paths = SplitFiles(
            src=out_dir / f"{split}.{src_lang}",
            tgt=out_dir / f"{split}.{tgt_lang}",
            conllu=out_dir / f"{split}.conllu",
            align=out_dir / f"{split}.align",
        )
        write_text_atomic(paths.src, "".join(p.source_text + "\n" for p in pairs))
        write_text_atomic(paths.tgt, "".join(p.target_text + "\n" for p in pairs))
        write_text_atomic(paths.conllu, "".join(to_conllu(p, f"{split}-{i + 1}") for i, p in enumerate(pairs)))
        write_text_atomic(paths.align, "".join(to_pharaoh(p.alignment) + "\n" for p in pairs))
        files[split] = paths
    write_text_atomic(out_dir / "lexicon.tsv", lexicon_tsv(lexicon))
    return files
