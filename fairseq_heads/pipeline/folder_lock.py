"""One writer per results folder: a recipe run holds RESULTS/.lock (an exclusive `fcntl.flock`)
while it writes there, and a second run on the same folder stops at once with one line (exit
status 2) instead of sharing the steps' markers and `OUT.partial/` folders. The OS releases the
lock when the holding process ends, killed included, so a stale lock file blocks nothing. The
lock is re-entrant within a process (the recipe command holds it around the runner's own hold)."""
import contextlib
import fcntl
import os

from ..errors import CommandError

LOCK = ".lock"
_held = set()  # the folders this process holds


class ResultsFolderLocked(CommandError):
    """Another process holds the results folder's lock."""


@contextlib.contextmanager
def folder_lock(folder: str):
    """Hold FOLDER/.lock while the block runs (the file says which process holds it), or raise
    ResultsFolderLocked at once, naming the holder."""
    folder = os.path.abspath(folder)
    if folder in _held:
        yield
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, LOCK), "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise ResultsFolderLocked(f"{folder}: {holder} is running steps in this results folder "
                                      f"(lock {LOCK}); wait for it to end or use another folder") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"process {os.getpid()}\n")
        lock.flush()
        _held.add(folder)
        try:
            yield
        finally:  # then leaving the `with` closes the file, which releases the lock
            _held.discard(folder)
