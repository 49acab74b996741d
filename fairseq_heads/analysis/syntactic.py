"""Syntactic heads (Voita et al. 2019, Sec. 4.3): encoder self-attention vs. UD dependency arcs.

Pipeline for one source sentence:

1. **Words and arcs** from CoNLL-U (read with ``conllu``).  Words are the *syntactic words*
   (integer ids); multiword-token range lines (``3-4``) and empty nodes (``5.1``) are not
   words.  Word indices are 0-based positions in that word list.
   Relations: ``nsubj``, ``obj``, ``amod``, ``advmod`` by default.  Labels are normalised:
   old UD ``dobj`` -> ``obj``, UD v1 ``nsubjpass`` -> ``nsubj``, and subtypes are stripped
   (``nsubj:pass`` -> ``nsubj``, ``advmod:emph`` -> ``advmod``) unless ``keep_subtypes=True``.
   Why strip: the question is whether a head tracks the syntactic subject/object/modifier
   relation; subtypes are treebank-specific refinements, and stripping makes UD v1 and v2
   data comparable.  Arcs to the root (head 0) are ignored.

2. **Subword -> word alignment by characters** (:func:`align_subwords_to_words`).  Both sides
   are NFKC-normalised and stripped of whitespace and the sentencepiece marker ``▁``; the
   concatenated character strings must be identical, otherwise a ``ValueError`` names the
   sentence (index, sent_id) and shows both strings.  Each subword maps to the word that
   owns its first character; a piece that is empty after stripping (a lone ``▁``) maps to
   the word of the next non-empty piece (the previous one at the end of the sentence).
   The word side is the surface text: a multiword token's range form (e.g. ``du``) stands
   for its words (``de le``) and all its characters belong to its *first* word; the other
   words of the range get no subword, and arcs touching them are dropped
   (:func:`drop_unaligned_arcs`).

3. **Token -> word attention** (:func:`word_level_attention`): the weight of a key word is
   the SUM of the attention over its subwords (attention is a distribution over keys, so
   mass adds up); a query word's row is the MEAN of its subwords' rows (each subword is one
   "reading" of the word).  EOS and padding are not words and are dropped (their mass too,
   no renormalisation).

4. **Accuracy** per (relation, direction) per head:
   ``dep->head``: one query per arc, query = dependent word, correct = its head word;
   ``head->dep``: one query per (head word, relation), correct = any dependent of that
   head with that relation.  A query is correct when the word with the largest weight in
   the query's row (ties -> earliest word; the query word itself is a candidate) is correct.

       accuracy(head, rel, dir) = #correct queries / #queries   (pooled over sentences)

   **Baseline** per (relation, direction): accuracy of always predicting the single best
   relative word offset k (word ``q + k``), chosen on the same data:
   ``max_k #{queries with a correct word at q + k} / #queries`` (a streamed offset histogram).
   Being fitted on the evaluation data, the baseline is slightly optimistic, which makes the
   label conservative.  A head is labelled syntactic for (rel, dir) when
   ``accuracy - baseline >= margin`` (default 0.10), see :func:`labels.syntactic_labels`.
   Bootstrap unit: the sentence (intervals on the accuracies; the baseline is a point value).
"""

from __future__ import annotations

import os
import unicodedata
from collections import Counter
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import conllu
import torch

from .streaming import DEFAULT_REPLICATES, DEFAULT_SEED, RatioAccumulator, RatioEstimate

RELATIONS = ("nsubj", "obj", "amod", "advmod")
DEP_TO_HEAD = "dep->head"
HEAD_TO_DEP = "head->dep"
DIRECTIONS = (DEP_TO_HEAD, HEAD_TO_DEP)
SENTENCEPIECE_MARKER = "\u2581"  # ▁
# Relation names of older UD / Stanford-style data mapped to UD v2 base relations.
_RELATION_ALIASES = {"dobj": "obj", "nsubjpass": "nsubj"}


class Arc(NamedTuple):
    """A dependency arc between syntactic words (0-based word indices)."""

    relation: str
    dependent: int
    head: int


class SyntacticQuery(NamedTuple):
    """One scored query: the row ``query`` must put its max on a word in ``correct``."""

    relation: str
    direction: str
    query: int
    correct: Tuple[int, ...]


# ---------------------------------------------------------------- CoNLL-U reading


def parse_conllu(text: str) -> List[conllu.TokenList]:
    """Parse CoNLL-U text into sentences (``conllu.TokenList``)."""
    return conllu.parse(text)


def read_conllu(path: Union[str, os.PathLike]) -> Iterator[conllu.TokenList]:
    """Stream sentences from a CoNLL-U file."""
    with open(path, encoding="utf-8") as handle:
        yield from conllu.parse_incr(handle)


def is_word(token: dict) -> bool:
    """Syntactic words have integer ids; ranges (``3-4``) and empty nodes (``5.1``) do not."""
    return isinstance(token["id"], int)


def sentence_words(tokenlist: conllu.TokenList) -> List[str]:
    """FORMs of the syntactic words, in order."""
    return [token["form"] for token in tokenlist if is_word(token)]


def sentence_text(tokenlist: conllu.TokenList) -> str:
    """The ``# text`` metadata, else the surface forms joined by spaces (honouring SpaceAfter=No).

    Surface forms: a multiword token contributes its range form instead of its words.
    """
    text = (tokenlist.metadata or {}).get("text")
    if text:
        return text
    parts = []
    for form, token in _surface_units(tokenlist):
        misc = token.get("misc") or {}
        parts.append(form + ("" if misc.get("SpaceAfter") == "No" else " "))
    return "".join(parts).strip()


def normalize_relation(deprel: Optional[str], keep_subtypes: bool = False) -> Optional[str]:
    """Map a DEPREL to the relation name used here (see module doc)."""
    if deprel is None:
        return None
    relation = deprel if keep_subtypes else deprel.split(":", 1)[0]
    return _RELATION_ALIASES.get(relation, relation)


def extract_arcs(
    tokenlist: conllu.TokenList, relations: Sequence[str] = RELATIONS, keep_subtypes: bool = False
) -> List[Arc]:
    """Arcs of the wanted relations between syntactic words (root arcs and other relations skipped)."""
    index_of = {token["id"]: i for i, token in enumerate(t for t in tokenlist if is_word(t))}
    wanted = set(relations)
    arcs = []
    for token in tokenlist:
        if not is_word(token):
            continue
        relation = normalize_relation(token.get("deprel"), keep_subtypes)
        head = token.get("head")
        if relation in wanted and isinstance(head, int) and head in index_of:
            arcs.append(Arc(relation, index_of[token["id"]], index_of[head]))
    return arcs


# ---------------------------------------------------------------- subword -> word alignment


def normalize_chars(text: str) -> str:
    """NFKC, then drop whitespace and the sentencepiece marker (the alignment's character space)."""
    text = unicodedata.normalize("NFKC", text.replace(SENTENCEPIECE_MARKER, " "))
    return "".join(ch for ch in text if not ch.isspace() and ch != SENTENCEPIECE_MARKER)


def _surface_units(tokenlist: conllu.TokenList) -> Iterator[Tuple[str, dict]]:
    """(surface form, token) in order: range tokens replace the words they span."""
    covered_until = 0
    for token in tokenlist:
        tid = token["id"]
        if isinstance(tid, tuple) and len(tid) == 3 and tid[1] == "-":
            covered_until = tid[2]
            yield token["form"], token
        elif isinstance(tid, int) and tid > covered_until:
            yield token["form"], token


def word_characters(tokenlist: conllu.TokenList) -> Tuple[str, List[int]]:
    """Normalised surface characters and, per character, the index of the word owning it.

    Characters of a multiword token belong to its first word.
    """
    index_of = {token["id"]: i for i, token in enumerate(t for t in tokenlist if is_word(t))}
    chars: List[str] = []
    owner: List[int] = []
    for form, token in _surface_units(tokenlist):
        tid = token["id"]
        word = index_of[tid[0] if isinstance(tid, tuple) else tid]
        normalized = normalize_chars(form)
        chars.append(normalized)
        owner.extend([word] * len(normalized))
    return "".join(chars), owner


def align_subwords_to_words(
    pieces: Sequence[str], tokenlist: conllu.TokenList, sentence_index: Optional[int] = None
) -> List[int]:
    """Word index (0-based syntactic word) for every subword piece; see module doc, step 2.

    Raises ``ValueError`` naming the sentence when the character strings differ.
    """
    word_chars, owner = word_characters(tokenlist)
    piece_chars = [normalize_chars(piece) for piece in pieces]
    joined = "".join(piece_chars)
    if joined != word_chars:
        sent_id = (tokenlist.metadata or {}).get("sent_id")
        first_diff = next(
            (i for i, (a, b) in enumerate(zip(joined, word_chars)) if a != b), min(len(joined), len(word_chars))
        )
        raise ValueError(
            f"sentence {sentence_index} (sent_id={sent_id}): subword text and CoNLL-U text differ "
            f"at character {first_diff}: subwords={joined!r} conllu={word_chars!r}"
        )
    alignment: List[Optional[int]] = []
    cursor = 0
    for chars in piece_chars:
        alignment.append(owner[cursor] if chars else None)
        cursor += len(chars)
    # Empty pieces (a lone "▁") belong to the word that follows them, else to the previous one.
    following: Optional[int] = None
    for i in range(len(alignment) - 1, -1, -1):
        if alignment[i] is None:
            alignment[i] = following
        else:
            following = alignment[i]
    previous: Optional[int] = None
    for i, word in enumerate(alignment):
        if word is None:
            alignment[i] = previous
        previous = alignment[i]
    if any(word is None for word in alignment):  # only possible for a sentence without characters
        raise ValueError(f"sentence {sentence_index}: no characters to align")
    return alignment  # type: ignore[return-value]


def drop_unaligned_arcs(arcs: Iterable[Arc], subword_to_word: Sequence[int]) -> List[Arc]:
    """Keep arcs whose both words own at least one subword (matters for multiword tokens)."""
    aligned = set(int(w) for w in subword_to_word if w >= 0)
    return [arc for arc in arcs if arc.dependent in aligned and arc.head in aligned]


def position_word_index(mask: torch.Tensor, subword_to_word: Sequence[int]) -> torch.Tensor:
    """Spread a sentence's subword->word alignment over its padded positions.

    ``mask`` (T,) bool selects the sentence's real non-EOS positions (in order); returns (T,)
    long with the word index there and -1 at EOS/padding.
    """
    mask = mask.bool()
    if int(mask.sum()) != len(subword_to_word):
        raise ValueError(f"mask selects {int(mask.sum())} positions but the alignment has {len(subword_to_word)} subwords")
    out = torch.full(mask.shape, -1, dtype=torch.long)
    out[mask] = torch.as_tensor(list(subword_to_word), dtype=torch.long)
    return out


# ---------------------------------------------------------------- token -> word attention


def word_level_attention(
    token_attn: torch.Tensor, subword_to_word: Union[Sequence[int], torch.Tensor], num_words: Optional[int] = None
) -> torch.Tensor:
    """(*heads, T, T) token self-attention -> (*heads, W, W) word attention (module doc, step 3).

    ``subword_to_word`` has one entry per position (query and key positions coincide), the
    word index or -1 for positions that are not words (EOS, padding).  Words without any
    position get an all-zero row and column.
    """
    index = torch.as_tensor(subword_to_word, dtype=torch.long)
    if token_attn.shape[-1] != index.numel() or token_attn.shape[-2] != index.numel():
        raise ValueError(f"attention is {tuple(token_attn.shape[-2:])} but the alignment has {index.numel()} positions")
    if num_words is None:
        num_words = int(index.max()) + 1 if index.numel() else 0
    valid = index >= 0
    membership = torch.zeros(index.numel(), num_words, dtype=torch.float64)  # (T, W)
    membership[valid.nonzero().squeeze(-1), index[valid]] = 1.0
    key_sum = token_attn.to(torch.float64) @ membership  # (*heads, T, W): sum over key subwords
    query_mean = membership.T / membership.sum(0).clamp(min=1.0)[:, None]  # (W, T): mean over query subwords
    return query_mean @ key_sum


def batch_word_attention(
    attn: torch.Tensor, mask: torch.Tensor, alignments: Sequence[Sequence[int]], num_words: Sequence[int]
) -> List[torch.Tensor]:
    """Word attention for every sentence of an encoder self-attention batch.

    ``attn`` (B, *heads, T, T); ``mask`` (B, T) real non-EOS source positions (any padding side);
    ``alignments[b]`` the subword->word list of sentence b; returns B tensors (*heads, W_b, W_b).
    """
    return [
        word_level_attention(attn[b], position_word_index(mask[b], alignments[b]), num_words[b])
        for b in range(attn.shape[0])
    ]


def prepare_sentence(
    tokenlist: conllu.TokenList,
    pieces: Sequence[str],
    token_attn: torch.Tensor,
    sentence_index: Optional[int] = None,
    relations: Sequence[str] = RELATIONS,
    keep_subtypes: bool = False,
) -> Tuple[torch.Tensor, List[Arc]]:
    """One-stop: (word attention (*heads, W, W), usable arcs) from a parsed sentence, its
    subword pieces and its unpadded, EOS-free token attention (*heads, T, T), T = len(pieces)."""
    alignment = align_subwords_to_words(pieces, tokenlist, sentence_index)
    words = sentence_words(tokenlist)
    word_attn = word_level_attention(token_attn, alignment, len(words))
    arcs = drop_unaligned_arcs(extract_arcs(tokenlist, relations, keep_subtypes), alignment)
    return word_attn, arcs


# ---------------------------------------------------------------- scoring


def syntactic_queries(arcs: Iterable[Arc], relations: Sequence[str] = RELATIONS) -> List[SyntacticQuery]:
    """The queries of one sentence for both directions (module doc, step 4)."""
    wanted = set(relations)
    queries = []
    dependents: Dict[Tuple[int, str], List[int]] = {}
    for arc in arcs:
        if arc.relation not in wanted:
            continue
        queries.append(SyntacticQuery(arc.relation, DEP_TO_HEAD, arc.dependent, (arc.head,)))
        dependents.setdefault((arc.head, arc.relation), []).append(arc.dependent)
    for (head, relation), deps in dependents.items():
        queries.append(SyntacticQuery(relation, HEAD_TO_DEP, head, tuple(sorted(set(deps)))))
    return queries


def query_hits(word_attn: torch.Tensor, queries: Sequence[SyntacticQuery]) -> torch.Tensor:
    """(*heads, Q) bool: does each head's max-weight word (ties -> earliest) hit a correct word."""
    num_words = word_attn.shape[-1]
    query_index = torch.tensor([q.query for q in queries], dtype=torch.long)
    correct = torch.zeros(len(queries), num_words, dtype=torch.bool)
    for i, q in enumerate(queries):
        correct[i, list(q.correct)] = True
    best = word_attn[..., query_index, :].argmax(-1)  # (*heads, Q)
    return correct[torch.arange(len(queries)), best]


class SyntacticScore(NamedTuple):
    """Result for one (relation, direction): accuracy per head and the offset baseline."""

    accuracy: RatioEstimate  # per head; count = number of queries
    baseline: float  # accuracy of the best fixed offset; NaN without queries
    baseline_offset: Optional[int]
    num_queries: int


class SyntacticAccumulator:
    """Streams syntactic accuracies per (relation, direction) and head, plus offset histograms.

    Args:
        head_shape: shape of the head dims of the word attention, ``(H,)`` or ``(L, H)``.
        relations: relations to score (normalised names).
    ``update(word_attn_list, arcs_list)``: one (*head_shape, W, W) tensor and one arc list per
    sentence; every sentence is one bootstrap unit (also sentences without arcs).
    """

    def __init__(
        self,
        head_shape: Sequence[int],
        relations: Sequence[str] = RELATIONS,
        replicates: int = DEFAULT_REPLICATES,
        seed: int = DEFAULT_SEED,
    ):
        self.head_shape = tuple(head_shape)
        self.relations = tuple(relations)
        self.slots: Tuple[Tuple[str, str], ...] = tuple((r, d) for r in self.relations for d in DIRECTIONS)
        self._slot_index = {slot: i for i, slot in enumerate(self.slots)}
        self.ratio = RatioAccumulator((len(self.slots),) + self.head_shape, replicates=replicates, seed=seed)
        # offset_hits[slot][k] = number of queries with a correct word at relative word offset k
        self.offset_hits: List[Counter] = [Counter() for _ in self.slots]

    def _sentence_counts(self, word_attn: torch.Tensor, arcs: Sequence[Arc]) -> Tuple[torch.Tensor, torch.Tensor]:
        if tuple(word_attn.shape[:-2]) != self.head_shape:
            raise ValueError(f"word attention heads shape {tuple(word_attn.shape[:-2])} != {self.head_shape}")
        numerator = torch.zeros((len(self.slots),) + self.head_shape, dtype=torch.float64)
        denominator = torch.zeros(len(self.slots), dtype=torch.float64)
        queries = syntactic_queries(arcs, self.relations)
        if not queries:
            return numerator, denominator.reshape((-1,) + (1,) * len(self.head_shape)).expand_as(numerator)
        slot = torch.tensor([self._slot_index[(q.relation, q.direction)] for q in queries], dtype=torch.long)
        hits = query_hits(word_attn, queries).to(torch.float64)  # (*heads, Q)
        numerator = hits.new_zeros(self.head_shape + (len(self.slots),)).index_add_(-1, slot, hits)
        numerator = numerator.movedim(-1, 0)
        denominator = torch.bincount(slot, minlength=len(self.slots)).to(torch.float64)
        for q, s in zip(queries, slot.tolist()):
            for offset in {c - q.query for c in q.correct}:
                self.offset_hits[s][offset] += 1
        return numerator, denominator.reshape((-1,) + (1,) * len(self.head_shape)).expand_as(numerator)

    def update(self, word_attn_list: Sequence[torch.Tensor], arcs_list: Sequence[Sequence[Arc]]) -> None:
        if len(word_attn_list) != len(arcs_list):
            raise ValueError("need one arc list per word attention tensor")
        if not word_attn_list:
            return
        counts = [self._sentence_counts(w, a) for w, a in zip(word_attn_list, arcs_list)]
        self.ratio.update(torch.stack([c[0] for c in counts]), torch.stack([c[1] for c in counts]))

    def baselines(self) -> Dict[Tuple[str, str], Tuple[float, Optional[int], int]]:
        """(baseline accuracy, best offset, number of queries) per (relation, direction)."""
        totals = self.ratio.den_sum.reshape(len(self.slots), -1)[:, 0] if self.head_shape else self.ratio.den_sum
        result = {}
        for i, slot in enumerate(self.slots):
            n = int(totals[i])
            if n == 0 or not self.offset_hits[i]:
                result[slot] = (float("nan") if n == 0 else 0.0, None, n)
                continue
            # Ties between offsets -> the smaller |offset|, then the negative one (deterministic).
            offset, hits = max(self.offset_hits[i].items(), key=lambda kv: (kv[1], -abs(kv[0]), -kv[0]))
            result[slot] = (hits / n, offset, n)
        return result

    def finalize(self) -> Dict[Tuple[str, str], SyntacticScore]:
        """{(relation, direction): SyntacticScore} with accuracies of shape ``head_shape``."""
        estimate = self.ratio.finalize()
        baselines = self.baselines()
        return {
            slot: SyntacticScore(RatioEstimate(*(t[i] for t in estimate)), *baselines[slot])
            for i, slot in enumerate(self.slots)
        }

    def replicate_estimates(self) -> torch.Tensor:
        """Bootstrap replicates of the accuracies, (R, num_slots, *head_shape); slot order = ``self.slots``."""
        return self.ratio.replicate_estimates()
