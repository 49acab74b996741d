"""sacreBLEU scoring with its defaults (13a tokenisation), the one BLEU every table reports:
corpus BLEU with its signature, and the per-sentence sufficient statistics that paired
bootstrap resampling (report/significance.py) sums."""
from typing import List, Sequence, Tuple


def sacrebleu_metric():
    """sacreBLEU's BLEU with its defaults: the signature every result file records."""
    from sacrebleu.metrics import BLEU

    return BLEU()


def scored(hypotheses: Sequence[str], references: Sequence[str]) -> Tuple[float, str, str]:
    """(BLEU, signature, full score string) of detokenised hypotheses against one reference each."""
    metric = sacrebleu_metric()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score.score, str(metric.get_signature()), str(score)


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Tuple[float, str]:
    """(BLEU, sacreBLEU signature)."""
    return scored(hypotheses, references)[:2]


def sentence_statistics(hypotheses: Sequence[str], references: Sequence[str]) -> List[List[int]]:
    """One row of BLEU sufficient statistics (n-gram matches and totals, lengths) per sentence."""
    return sacrebleu_metric()._extract_corpus_statistics(list(hypotheses), [list(references)])


def bleu_from_statistics(totals: Sequence[int]) -> float:
    """Corpus BLEU from summed sufficient statistics (the sum over a corpus's sentences)."""
    return sacrebleu_metric()._compute_score_from_stats([int(v) for v in totals]).score
