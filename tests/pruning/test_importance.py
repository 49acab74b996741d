"""Reading `fairseq-heads stats` score tables and choosing the top-K heads."""
import pytest

from fairseq_heads.pruning.importance import check_scores_match_model, keep_top_k, read_head_scores
from fairseq_heads.pruning.physical import HeadPruningError

HEADER = "type,layer,head,gate_p_open,confidence,confidence_ci_low,grad,labels\n"


def write(tmp_path, rows):
    path = tmp_path / "heads.csv"
    path.write_text(HEADER + "".join(rows))
    return str(path)


def test_reads_the_stats_table_and_keeps_the_top_k_with_stable_ties(tmp_path):
    path = write(tmp_path, ["enc-self,0,0,0.9,0.5,0.4,1,positional\n", "enc-self,0,1,0.9,0.7,0.6,2,\n",
                            "enc-self,1,1,0.9,0.5,0.4,3,\n", "enc-self,1,0,0.9,0.1,0.0,4,\n",
                            "enc-dec,0,0,0.9,0.9,0.8,5,\n", "enc-dec,0,1,0.9,0.2,0.1,6,\n"])
    scores = read_head_scores(path, "confidence")
    assert scores == {"enc-self": [[0.5, 0.7], [0.1, 0.5]], "enc-dec": [[0.9, 0.2]]}
    mask = keep_top_k(scores, 3)  # 0.9, 0.7, then the tie at 0.5 goes to enc-self 0:0
    assert [row.tolist() for row in mask["enc-self"]] == [[True, True], [False, False]]
    assert [row.tolist() for row in mask["enc-dec"]] == [[True, False]]
    per_type = keep_top_k(scores, 1, per_type=True)
    assert [row.tolist() for row in per_type["enc-self"]] == [[False, True], [False, False]]
    check_scores_match_model(scores, {"enc-self": [2, 2], "enc-dec": [2], "dec-self": [2]}, path)
    with pytest.raises(HeadPruningError, match="different model"):
        check_scores_match_model(scores, {"enc-self": [2, 2], "enc-dec": [2, 2], "dec-self": [2, 2]}, path)


@pytest.mark.parametrize("rows, message", [
    (["enc-self,0,0,0.9,,0.4,1,\n"], "no confidence value (empty or NaN) for enc-self layer 0 head 0"),
    (["enc-self,0,0,0.9,0.5,0.4,1,\n", "enc-self,0,0,0.9,0.5,0.4,1,\n"], "duplicate row"),
    (["enc-self,0,0,0.9,0.5,0.4,1,\n", "enc-self,0,2,0.9,0.5,0.4,1,\n"], "heads 0..H-1"),
    (["encoder,0,0,0.9,0.5,0.4,1,\n"], "unknown attention type 'encoder'"),
])
def test_bad_tables_are_errors_naming_the_line(tmp_path, rows, message):
    with pytest.raises(HeadPruningError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        read_head_scores(write(tmp_path, rows), "confidence")
