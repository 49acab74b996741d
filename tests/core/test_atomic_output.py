"""fairseq_heads.files: what a killed writer leaves is removed by the next write of the same
target, a live writer's temporaries are kept, and outputs get the modes a plain open() gives."""
import os
import signal
import stat
import subprocess
import sys
import textwrap

import pytest

from fairseq_heads import files as atomic


def killed_mid_write(target, kind):
    """Run a writer of `target` in a subprocess that is SIGKILLed inside the atomic block."""
    code = textwrap.dedent(f"""
        import os, signal
        from fairseq_heads import files as atomic
        with atomic.{"atomic_path" if kind == "file" else "staged_dir"}({str(target)!r}) as tmp:
            open(os.path.join(tmp, "part") if os.path.isdir(tmp) else tmp, "w").write("half")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    process = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert process.returncode == -signal.SIGKILL, process.stderr


def hidden(directory):
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


def test_a_killed_file_write_is_cleaned_by_the_next_write(tmp_path):
    target = tmp_path / "pruned.pt"
    killed_mid_write(target, "file")
    assert len(hidden(tmp_path)) == 1 and not target.exists()
    (tmp_path / ".other.pt.tmp-x").write_text("another target's")
    atomic.write_text_atomic(target, "whole")
    assert target.read_text() == "whole"
    assert hidden(tmp_path) == [".other.pt.tmp-x"]


def test_a_killed_folder_write_is_cleaned_by_the_next_one(tmp_path):
    target = tmp_path / "stats"
    killed_mid_write(target, "folder")
    assert len(hidden(tmp_path)) == 1
    with atomic.staged_dir(target) as staging:
        (open(os.path.join(staging, "heads.csv"), "w")).write("x")
    assert os.listdir(target) == ["heads.csv"] and hidden(tmp_path) == []


def test_temporaries_of_a_live_writer_and_recent_legacy_ones_are_kept(tmp_path):
    target = tmp_path / "mask.json"
    live = f".mask.json.tmp-{atomic._HOST}-{os.getppid()}-0123abcd.json"
    legacy = ".mask.json.k2j3h4.tmp.json"  # tempfile name of an earlier version, no process id
    for name in (live, legacy):
        (tmp_path / name).write_text("")
    old_legacy = tmp_path / ".mask.json.abcdef.tmp.json"
    old_legacy.write_text("")
    day_ago = os.path.getmtime(old_legacy) - atomic.STALE_AFTER_S - 60
    os.utime(old_legacy, (day_ago, day_ago))
    atomic.write_text_atomic(target, "{}")
    assert hidden(tmp_path) == sorted([live, legacy])


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_and_folders_get_the_umask_modes(tmp_path, umask_022):
    atomic.write_text_atomic(tmp_path / "a.txt", "x")
    with atomic.atomic_path(tmp_path / "b.png") as tmp:
        assert tmp.endswith(".png")  # writers pick the format from the extension
    with atomic.staged_dir(tmp_path / "bin") as staging:
        open(os.path.join(staging, "dict.txt"), "w").close()
    assert mode(tmp_path / "a.txt") == 0o644 and mode(tmp_path / "b.png") == 0o644
    assert mode(tmp_path / "bin") == 0o755 and mode(tmp_path / "bin" / "dict.txt") == 0o644
