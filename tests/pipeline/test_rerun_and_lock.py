"""Code is in no step's key, so `--rerun GLOB,...` (Runner(rerun=...)) runs the matched steps and
their readers again; and one writer per results folder: a second process stops at RESULTS/.lock
(folder_lock.py) before writing anything, and the lock goes when its holder dies."""
import os
import signal
import subprocess
import sys

import pytest

from fairseq_heads.pipeline import Runner, Step
from fairseq_heads.pipeline.folder_lock import ResultsFolderLocked, folder_lock

from .test_runner import chain, ran, training, writer


def with_stats_code(steps, text):
    """The same steps, the stats step's code edited to write TEXT (its settings unchanged)."""
    return [Step(s.name, s.out, s.settings, s.inputs, call=writer(text)) if s.name == "stats" else s for s in steps]


def test_edited_code_reruns_nothing_unless_asked_then_the_step_and_its_readers(tmp_path, capsys):
    Runner(chain(), tmp_path).run()
    ran(capsys)
    edited = with_stats_code(chain(), "S2")
    assert Runner(edited, tmp_path).run() == []
    assert ran(capsys) == [] and (tmp_path / "curve" / "value.txt").read_text() == "c+s+b+d"
    assert Runner(edited, tmp_path, rerun=["stats"]).run() == []
    assert ran(capsys) == ["stats", "curve"]
    assert (tmp_path / "curve" / "value.txt").read_text() == "c+S2+b+d"
    assert Runner(edited, tmp_path).run() == [] and ran(capsys) == []  # done again under the same keys


def test_rerun_takes_globs_and_refuses_a_pattern_that_matches_no_step(tmp_path, capsys):
    Runner(chain(), tmp_path).run()
    ran(capsys)
    assert Runner(chain(), tmp_path, rerun=["b*", "other"]).run() == []
    assert ran(capsys) == ["baseline", "bleu", "stats", "curve", "other"]  # data alone is upstream
    with pytest.raises(ValueError, match="'stat' matches no step"):
        Runner(chain(), tmp_path, rerun=["stat"])


def test_a_forced_resumable_step_starts_afresh(tmp_path, capsys):
    assert Runner([training(stop_at=3)], tmp_path).run() == ["train"]  # OUT.partial kept at update 3
    capsys.readouterr()
    assert Runner([training(stop_at=2)], tmp_path, rerun=["train"]).run() == ["train"]
    assert "resume train" not in capsys.readouterr().out
    assert (tmp_path / "model.partial" / "updates").read_text() == "2"  # from update 1, not from 3


HOLDER = """
import sys
from fairseq_heads.pipeline.folder_lock import folder_lock
with folder_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def hold_lock(folder):
    """A second process holding FOLDER's lock until its stdin closes (or it is killed)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_writer_stops_before_writing_and_the_lock_dies_with_its_holder(tmp_path, capsys):
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(ResultsFolderLocked, match=rf"process {holder.pid} is running steps"):
            Runner(chain(), tmp_path).run()
        assert ran(capsys) == []
        assert not os.path.exists(tmp_path / "data") and not os.path.exists(tmp_path / ".steps")
    finally:
        holder.send_signal(signal.SIGKILL)  # no clean-up: the OS releases the lock
        holder.wait()
    assert Runner(chain(), tmp_path).run() == []
    assert (tmp_path / "curve" / "value.txt").read_text() == "c+s+b+d"
    with folder_lock(tmp_path), folder_lock(tmp_path):  # re-entrant within one process
        assert Runner(chain(), tmp_path).run() == []


def test_a_second_recipe_on_the_folder_exits_2_with_one_line(tmp_path):
    holder = hold_lock(tmp_path)
    try:
        process = subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", "multi30k_en_de",
                                  "--scale", "toy", "--results", str(tmp_path)], capture_output=True, text=True)
    finally:
        holder.stdin.close()
        holder.wait()
    assert process.returncode == 2
    assert process.stderr.count("\n") == 1 and "is running steps in this results folder" in process.stderr
    assert sorted(os.listdir(tmp_path)) == [".lock"]  # no recipe.json, no step
