"""Atomic file output: write to a temporary file beside the target, then rename, so a reader (or
a re-run) never sees half a file and a failure leaves nothing behind."""
import os
import tempfile
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def atomic_path(path) -> Iterator[str]:
    """Yield a temporary path in the target's folder; rename it to `path` if the block succeeds,
    delete it if the block raises."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # Keep the extension last: writers such as matplotlib pick the format from it.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.",
                               suffix=".tmp" + os.path.splitext(path)[1])
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_bytes_atomic(path, data: bytes) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_text_atomic(path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))
