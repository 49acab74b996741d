"""The source side as syntactic words: gold parses (CoNLL-U, indexed) and subword alignment."""
from .conllu_index import ConlluError, ConlluIndex, check_conllu  # noqa: F401
