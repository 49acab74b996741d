"""Atomic output, the one place for it: write a file (`atomic_path`, `write_text_atomic`) or a
folder (`staged_dir`; `write_files_into` to add files to one) under a hidden temporary name
beside its target, then rename it into place, so a reader (or a re-run) never sees half of it
and a failure leaves nothing behind.

Temporary names are `.NAME.tmp-HOST-PID-RANDOM[.EXT]` (the extension last: matplotlib and
torch pick the format from it) and, for a folder being replaced, `.NAME.old-HOST-PID-RANDOM`.
A process killed mid-write cannot remove its temporary; the next write to the same target
does, once the writer is known to be gone: a dead process on this host, or (another host, whose
processes we cannot see, or a name without a process id) a temporary untouched for a day.

Modes: temporaries are created as a plain open() / mkdir() creates files, 0666 / 0777 less the
umask, not 0600 / 0700 as tempfile makes them, so what we write is as readable as any file.
"""
import os
import re
import secrets
import shutil
import socket
import time
from contextlib import contextmanager
from typing import Callable, Iterator, List

STALE_AFTER_S = 24 * 3600  # for temporaries whose writer cannot be checked
_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"
# Names of earlier versions (tempfile's random part, no process id): `.NAME.XXXX.tmp.EXT`,
# `.NAME.tmp-XXXX`, prepare's `.tmp-NAME-XXXX` and `.old-NAME-PID`.
_LEGACY = ("BASE.RAND.tmp", "BASE.tmp-RAND", "tmp-BASE-RAND", "old-BASE-RAND")


def _temporary_name(target: str, kind: str = "tmp") -> str:
    base = os.path.basename(target)
    extension = os.path.splitext(base)[1]
    return os.path.join(os.path.dirname(target),
                        f".{base}.{kind}-{_HOST}-{os.getpid()}-{secrets.token_hex(4)}{extension}")


def _stale_pattern(base: str) -> "re.Pattern":
    ours = rf"{re.escape(base)}\.(?:tmp|old)-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{{8}}(?:\.[^/]*)?"
    legacy = "|".join(re.escape(form).replace("BASE", re.escape(base)).replace("RAND", "[^/]+")
                      for form in _LEGACY)
    return re.compile(rf"\.(?:{ours}|(?:{legacy})(?:\.[^/]*)?)")


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_temporaries(target) -> None:
    """Remove what interrupted writes of `target` left beside it (see the module doc)."""
    target = os.path.abspath(os.fspath(target))
    directory, base = os.path.split(target)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    pattern = _stale_pattern(base)
    for name in names:
        match = pattern.fullmatch(name)
        if match is None:
            continue
        path = os.path.join(directory, name)
        if match.group("pid") is not None and match.group("host") == _HOST:
            stale = int(match.group("pid")) != os.getpid() and not _process_exists(int(match.group("pid")))
        else:
            try:
                stale = time.time() - os.lstat(path).st_mtime > STALE_AFTER_S
            except OSError:
                continue
        if stale:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


@contextmanager
def atomic_path(path) -> Iterator[str]:
    """Yield a temporary file path beside `path` (the file exists, empty); rename it to `path`
    if the block succeeds, delete it if the block raises."""
    path = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    remove_stale_temporaries(path)
    while True:
        tmp = _temporary_name(path)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            break
        except FileExistsError:
            continue
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def write_bytes_atomic(path, data: bytes) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_text_atomic(path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def make_staging_dir(target) -> str:
    """A new, empty temporary folder beside `target` (same file system: the final move is a
    rename), after removing what interrupted writes of `target` left there."""
    target = os.path.abspath(os.fspath(target))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    remove_stale_temporaries(target)
    while True:
        staging = _temporary_name(target)
        try:
            os.mkdir(staging, 0o777)
            return staging
        except FileExistsError:
            continue


def replace_dir(source, target) -> None:
    """Rename folder `source` to `target`, replacing a folder already there as a whole."""
    source, target = os.path.abspath(os.fspath(source)), os.path.abspath(os.fspath(target))
    old = None
    if os.path.lexists(target):
        old = _temporary_name(target, "old")
        os.replace(target, old)
    os.replace(source, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_files_into(directory, write: Callable[[str], None]) -> List[str]:
    """Let `write(staging)` fill a new staging folder beside `directory`, then move each of its
    files into `directory` (created if needed), replacing files of the same names; returns their
    paths. If `write` raises, nothing is moved and the staging folder goes."""
    staging = make_staging_dir(directory)
    try:
        write(staging)
        os.makedirs(directory, exist_ok=True)
        moved = []
        for name in sorted(os.listdir(staging)):
            target = os.path.join(directory, name)
            os.replace(os.path.join(staging, name), target)
            moved.append(target)
        return moved
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def staged_dir(target) -> Iterator[str]:
    """Yield a staging folder; on success it replaces `target` as a whole, on failure it goes."""
    staging = make_staging_dir(target)
    try:
        yield staging
        replace_dir(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_output_file(path, option: str) -> None:
    """Raise ValueError (one line, naming `option` and `path`) unless a file can be written at
    `path`: not a folder, and no file where one of its folders should be. Commands call this
    before their work, so that a bad --out fails at once rather than after it."""
    given = os.fspath(path)
    if os.path.isdir(given):
        raise ValueError(f"{option} {given}: is a folder; give a file name")
    ancestor = os.path.dirname(os.path.abspath(given))
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ValueError(f"{option} {given}: {ancestor} is a file, not a folder")
