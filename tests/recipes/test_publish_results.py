"""`fairseq-heads publish` (pipeline/publish.py) on hand-made results folders: what is copied, what
stays behind, and --merge, which adds a session's results to a published folder instead of
replacing it."""
import contextlib
import gzip
import io
import json
import os

from fairseq_heads.cli import main


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class Published:
    def __init__(self, returncode, stderr):
        self.returncode, self.stderr = returncode, stderr


def publish(*args):
    """`fairseq-heads publish ARGS` in this process (no fairseq import per call)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        returncode = main(["publish", *map(str, args)])
    return Published(returncode, stderr.getvalue())


def a_session(root):
    """A results folder of one session: model b finished, c still running, checkpoints, logs."""
    write(f"{root}/results/b/result.json", json.dumps({"name": "b", "bleu": 30.0}))
    write(f"{root}/results/b/generate.txt", "S-0\tsrc\nT-0\tref\nH-0\t-0.1\thyp\nD-0\t-0.1\thyp\n")
    write(f"{root}/models/b/gate_trace.jsonl", '{"update": 0, "heads": []}\n')
    write(f"{root}/models/b/checkpoint.pt", "weights")
    write(f"{root}/models/c.partial/gate_trace.jsonl", '{"update": 0, "heads": []}\n')
    write(f"{root}/models/d_l0.partial/gate_trace.jsonl", '{"update": 0, "heads": []}\n')  # running
    write(f"{root}/logs/b.log", f"log of {root}/models/b")
    return root


def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_merge_adds_a_sessions_results_to_the_published_ones(tmp_path):
    docs = tmp_path / "docs"
    write(f"{docs}/README.md", "what was run")
    write(f"{docs}/results/a/result.json", json.dumps({"name": "a", "bleu": 31.0}))  # an earlier session's
    write(f"{docs}/results/b/result.json", json.dumps({"name": "b", "bleu": 1.0}))   # replaced
    process = publish("--merge", a_session(tmp_path / "results"), docs)
    assert process.returncode == 0, process.stderr
    assert files(docs) == ["README.md", "logs/b.log.gz", "models/b/gate_trace.jsonl.gz",
                           "models/d_l0.partial/gate_trace.jsonl.gz",
                           "results/a/result.json", "results/b/generate.txt.gz", "results/b/result.json"]
    assert json.loads((docs / "results/b/result.json").read_text())["bleu"] == 30.0
    with gzip.open(docs / "results/b/generate.txt.gz", "rt") as f:
        assert f.read() == "T-0\tref\nD-0\t-0.1\thyp\n"  # what the report's bootstrap reads
    with gzip.open(docs / "logs/b.log.gz", "rt") as f:
        assert f.read() == "log of models/b"  # paths relative to the results folder
    assert not os.path.exists(str(docs) + ".partial")
    # the L0 phase d finished in a later session: its traces replace the running ones
    later = tmp_path / "later"
    write(f"{later}/models/d_l0/gate_trace.jsonl", '{"update": 0, "heads": []}\n')
    assert publish("--merge", later, docs).returncode == 0
    assert "models/d_l0/gate_trace.jsonl.gz" in files(docs)
    assert not any(f.startswith("models/d_l0.partial/") for f in files(docs))
    # a later session trains d's L0 phase again (its results folder was lost): the published
    # finished phase stays the only one
    again = a_session(tmp_path / "again")
    assert publish("--merge", again, docs).returncode == 0
    assert "models/d_l0/gate_trace.jsonl.gz" in files(docs)
    assert not any(f.startswith("models/d_l0.partial/") for f in files(docs))


def test_merge_into_a_new_folder_and_without_merge_the_folder_is_replaced(tmp_path):
    session = a_session(tmp_path / "results")
    assert publish("--merge", session, tmp_path / "new").returncode == 0
    assert "results/b/result.json" in files(tmp_path / "new")
    write(f"{session}/tables.md", "tables")
    write(f"{tmp_path}/docs/README.md", "what was run")
    assert publish(session, tmp_path / "docs").returncode == 0
    assert files(tmp_path / "docs") == ["logs/b.log.gz", "models/b/gate_trace.jsonl.gz",
                                        "models/d_l0.partial/gate_trace.jsonl.gz",
                                        "results/b/generate.txt.gz", "results/b/result.json", "tables.md"]


def test_bad_arguments_exit_2_with_one_line_and_write_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    for args in (["--merge", tmp_path / "missing", tmp_path / "docs"], [tmp_path / "empty", tmp_path / "docs"]):
        process = publish(*args)
        assert process.returncode == 2 and process.stderr.count("\n") == 1, (args, process.stderr)
    assert os.listdir(tmp_path) == ["empty"]


def test_the_formation_points_of_every_baseline_seed_are_committed(tmp_path):
    """`formation_points` (seed 1) and `formation_points_s2`, `formation_s2` (seed 2's step): each
    point's files, a heads.json's absolute paths made relative; a watcher's folder is not."""
    from fairseq_heads.pipeline.pack import committed_files

    results = tmp_path / "results"
    for folder in ("formation_points", "formation_points_s2"):
        (results / folder / "500" / "stats").mkdir(parents=True)
        (results / folder / "500" / "point.json").write_text('{"update": 500}\n')
        (results / folder / "500" / "stats" / "heads.json").write_text(
            json.dumps({"checkpoint": str(results / "models" / "x.pt")}))
    for folder in ("formation_s2", "formation_watch_s2"):
        (results / folder).mkdir()
        (results / folder / "formation.csv").write_text("update\n500\n")
    files = dict(committed_files(str(results)))
    assert sorted(files) == ["formation_points/500/point.json", "formation_points/500/stats/heads.json",
                             "formation_points_s2/500/point.json", "formation_points_s2/500/stats/heads.json",
                             "formation_s2/formation.csv"]
    assert json.loads(files["formation_points_s2/500/stats/heads.json"]) == {"checkpoint": "models/x.pt"}


def test_a_runs_own_files_are_named_by_its_settings_not_its_scale_alone(tmp_path):
    """A results folder of `--set train.seed=2` publishes its recipe.json, steps and logs under
    runs/<recipe>_<scale>_s2/, beside (not over) the seed-1 run's."""
    from fairseq_heads.pipeline.publish import run_name

    results = tmp_path / "results"
    results.mkdir()
    assert run_name(str(results)) == ""
    (results / "recipe.json").write_text(json.dumps(
        {"recipe": "europarl_en_it", "scale": "cpu", "overrides": ["train.seed=2", "autocast=none"]}))
    assert run_name(str(results)) == "europarl_en_it_cpu_s2"
    (results / "recipe.json").write_text(json.dumps({"recipe": "europarl_en_it", "scale": "cpu", "overrides": []}))
    assert run_name(str(results)) == "europarl_en_it_cpu_s1"
