"""Memory for CPU trainings: an allocator that keeps freed memory in the process (mimalloc, else
glibc's tunables), and torch's large blocks on transparent huge pages (THP_MEM_ALLOC_ENABLE).

A CPU training step allocates and frees tensors of hundreds of MB every update (a 4,096-token
batch's logits over 16,000 pieces are 262 MB in fp32, and so are their gradients). glibc serves
each request above its mmap threshold (at most 32 MiB) with a fresh mapping and unmaps it at
free, so every update the kernel faults those pages in and zeroes them again:
- 4 KiB pages at a time, the faults were 15% of the Europarl CPU training's time (system time);
  torch's huge pages (THP_MEM_ALLOC_ENABLE=1, on since 2026-12-06) made them 8% there;
- on the AMX Xeon of 2026-12-07, with huge pages, 26% of the bf16 training's `perf` samples were
  the kernel clearing huge pages under those faults (`clear_page_erms`), and 23% of its CPU time
  system time.
With mmap disabled and no trimming ('cached'), glibc serves large requests from its heap and keeps
what is freed for the next update, which then faults nothing; glibc's own search of its free
lists (`_int_malloc`) was then still 11% of the samples. mimalloc (the `cmeel-mimalloc` wheel,
loaded by LD_PRELOAD, told never to return memory) does both jobs faster. Either way the process
holds its peak memory (the training's few GB) instead of giving it back between updates.
benchmarks/cpu_allocator.py measures the variants side by side (benchmarks/results/cpu_allocator_*.json).

The settings are read when a process starts (GLIBC_TUNABLES and LD_PRELOAD by the dynamic loader),
so they go in the environment of the processes the recipes start (`fairseq-heads recipe`: its
trainings and analyses), not in the running one. A user's own fairseq-train gets the same after
`eval "$(fairseq-heads cpu-env)"` (commands/cpu_env.py). The mimalloc wheel is Linux x86-64's;
without it the recipes set glibc's tunables, which other C libraries (musl, macOS) ignore. A
path in LD_PRELOAD that a machine lacks (a SLURM node without this .venv) is skipped by its
loader with a warning.
"""
import importlib.metadata
import os
from typing import Dict, Mapping, Optional

# mmap_max=0: no request is served by a mapping of its own; trim_threshold: the heap's free top
# is never given back to the kernel (2^40 bytes: more than any machine this runs on has)
CACHED_TUNABLES = ("glibc.malloc.mmap_max=0", "glibc.malloc.trim_threshold=1099511627776")
# mimalloc: never give freed memory back (purge), and take 2 MiB pages for its arenas
MIMALLOC_OPTIONS = {"MIMALLOC_PURGE_DELAY": "-1", "MIMALLOC_ALLOW_LARGE_OS_PAGES": "1"}
MIMALLOC_WHEEL = "cmeel-mimalloc"
# the variants benchmarks/cpu_allocator.py compares
ALLOCATORS = ("glibc", "glibc_thp", "cached", "cached_thp", "mimalloc_thp")
# the GPU recipes (whose large blocks are on the GPU) run under huge pages alone, as they ran before
GPU_RECIPE_ALLOCATOR = "glibc_thp"


def mimalloc_library() -> Optional[str]:
    """The path of the mimalloc shared library the `cmeel-mimalloc` wheel installed, or None."""
    try:
        files = importlib.metadata.files(MIMALLOC_WHEEL) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "libmimalloc.so":
            path = str(file.locate())
            return path if os.path.isfile(path) else None
    return None


def cpu_recipe_allocator() -> str:
    """What a CPU recipe's processes run under: mimalloc where it is installed, else glibc's cache."""
    return "mimalloc_thp" if mimalloc_library() else "cached_thp"


def merged_tunables(existing: str, tunables=CACHED_TUNABLES) -> str:
    """GLIBC_TUNABLES with `tunables` set: the user's own settings kept, ours replacing theirs of the
    same name (a colon-separated list of name=value)."""
    ours = {t.split("=", 1)[0] for t in tunables}
    kept = [t for t in existing.split(":") if t and t.split("=", 1)[0] not in ours]
    return ":".join(kept + list(tunables))


def allocator_env(allocator: str, environ: Mapping[str, str]) -> Dict[str, str]:
    """The variables to set over `environ` for a child process under `allocator`: 'glibc' as it
    comes, '*_thp' with torch's huge pages (a user's own THP_MEM_ALLOC_ENABLE is kept), 'cached*'
    with glibc keeping freed memory, 'mimalloc*' with mimalloc preloaded (a user's own LD_PRELOAD
    after it, their MIMALLOC_* options kept)."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"allocator {allocator!r}: one of {', '.join(ALLOCATORS)}")
    env = {}
    if allocator.endswith("_thp"):
        env["THP_MEM_ALLOC_ENABLE"] = environ.get("THP_MEM_ALLOC_ENABLE", "1")
    if allocator.startswith("cached"):
        env["GLIBC_TUNABLES"] = merged_tunables(environ.get("GLIBC_TUNABLES", ""))
    if allocator.startswith("mimalloc"):
        library = mimalloc_library()
        if library is None:
            raise ValueError(f"allocator {allocator}: the {MIMALLOC_WHEEL} wheel is not installed")
        preloaded = [p for p in environ.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p and p != library]
        env["LD_PRELOAD"] = ":".join([library] + preloaded)
        env.update({name: environ.get(name, value) for name, value in MIMALLOC_OPTIONS.items()})
    return env
