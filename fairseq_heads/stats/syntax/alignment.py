"""Source sentences as syntactic words: CoNLL-U words and arcs, subword -> word alignment by
characters, token -> word attention, and `<unk>` pieces filled from the CoNLL-U text.

The rules (which words, which relations, how subwords align, how attention is pooled to words)
are steps 1-3 of "Syntactic heads" in docs/metrics.md.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import conllu
import torch

RELATIONS = ("nsubj", "obj", "amod", "advmod")
SENTENCEPIECE_MARKER = "\u2581"  # ▁
# Relation names of older UD / Stanford-style data mapped to UD v2 base relations.
_RELATION_ALIASES = {"dobj": "obj", "nsubjpass": "nsubj"}


class Arc(NamedTuple):
    """A dependency arc between syntactic words (0-based word indices)."""

    relation: str
    dependent: int
    head: int


# ---------------------------------------------------------------- CoNLL-U reading


def parse_conllu(text: str) -> List[conllu.TokenList]:
    """Parse CoNLL-U text into sentences (``conllu.TokenList``)."""
    return conllu.parse(text)


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


def fill_unknown_pieces(pieces: Sequence[str], tokenlist, unk_word: str) -> List[str]:
    """Replace ``<unk>`` pieces by the characters of the CoNLL-U text they stand for.

    The known pieces fix the rest of the text, so each run of consecutive unknown pieces
    covers the characters between its neighbours (the first piece of a run gets them all, the
    others none: they then belong to the next word).  Raises ``ValueError`` naming the sentence
    when the known pieces do not fit the text.
    """
    text, _ = word_characters(tokenlist)
    runs: List[Tuple[bool, List[str]]] = []  # (is an unknown run, pieces)
    for piece in pieces:
        unknown = piece == unk_word
        if runs and runs[-1][0] == unknown and unknown:
            runs[-1][1].append(piece)
        else:
            runs.append((unknown, [piece]))
    pattern = "".join("(.+?)" if unknown else re.escape(normalize_chars(run[0]))
                      for unknown, run in runs)
    match = re.fullmatch(pattern, text, flags=re.DOTALL)
    if match is None:
        sent_id = (tokenlist.metadata or {}).get("sent_id")
        raise ValueError(f"sent_id={sent_id}: the known subwords {pieces} do not fit the "
                         f"CoNLL-U text {text!r}")
    filled: List[str] = []
    groups = iter(match.groups())
    for unknown, run in runs:
        filled += [next(groups)] + [""] * (len(run) - 1) if unknown else run
    return filled
