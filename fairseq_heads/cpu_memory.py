"""Memory for CPU trainings: keep freed memory in the process (glibc's tunables) and back torch's
large blocks with transparent huge pages (torch's THP_MEM_ALLOC_ENABLE).

A CPU training step allocates and frees tensors of hundreds of MB every update (a 4,096-token
batch's logits over 16,000 pieces are 262 MB in fp32, and so are their gradients). glibc serves
each request above its mmap threshold (at most 32 MiB) with a fresh mapping and unmaps it at
free, so every update the kernel faults those pages in and zeroes them again:
- 4 KiB pages at a time, the faults were 15% of the Europarl CPU training's time (system time);
  torch's huge pages (THP_MEM_ALLOC_ENABLE=1, on since 2026-12-06) made them 8% there;
- on the AMX Xeon of 2026-12-07, with huge pages, 26% of the bf16 training's `perf` samples were
  the kernel clearing huge pages under those faults (`clear_page_erms`), and 23% of its CPU time
  system time.
With mmap disabled and no trimming, glibc serves large requests from its heap and keeps what is
freed for the next update, which then faults nothing: the process holds its peak memory (the
training's few GB) instead of giving it back between updates. benchmarks/cpu_allocator.py
measures each combination side by side (benchmarks/results/cpu_allocator_*.json).

Both settings are read when a process starts (GLIBC_TUNABLES by the dynamic loader), so they go
in the environment of the processes the recipes start (`fairseq-heads recipe`: its trainings and
analyses), not in the running one. A user's own fairseq-train gets the same from
`export GLIBC_TUNABLES=... THP_MEM_ALLOC_ENABLE=1` (README, under "bf16 on a CPU"). Only glibc reads
GLIBC_TUNABLES; elsewhere (musl, macOS) it is inert, as THP_MEM_ALLOC_ENABLE is off Linux.
"""
from typing import Dict, Mapping

# mmap_max=0: no request is served by a mapping of its own; trim_threshold: the heap's free top
# is never given back to the kernel (2^40 bytes: more than any machine this runs on has)
CACHED_TUNABLES = ("glibc.malloc.mmap_max=0", "glibc.malloc.trim_threshold=1099511627776")
# the variants benchmarks/cpu_allocator.py compares; the CPU recipes run under the last, the GPU
# ones (whose large blocks are on the GPU) under huge pages alone, as they ran before
ALLOCATORS = ("glibc", "glibc_thp", "cached", "cached_thp")
RECIPE_ALLOCATOR = "cached_thp"
GPU_RECIPE_ALLOCATOR = "glibc_thp"


def merged_tunables(existing: str, tunables=CACHED_TUNABLES) -> str:
    """GLIBC_TUNABLES with `tunables` set: the user's own settings kept, ours replacing theirs of the
    same name (a colon-separated list of name=value)."""
    ours = {t.split("=", 1)[0] for t in tunables}
    kept = [t for t in existing.split(":") if t and t.split("=", 1)[0] not in ours]
    return ":".join(kept + list(tunables))


def allocator_env(allocator: str, environ: Mapping[str, str]) -> Dict[str, str]:
    """The variables to set over `environ` for a child process under `allocator`: 'glibc' as it
    comes, '*_thp' with torch's huge pages (a user's own THP_MEM_ALLOC_ENABLE is kept), 'cached*'
    with glibc keeping freed memory (module docstring)."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"allocator {allocator!r}: one of {', '.join(ALLOCATORS)}")
    env = {}
    if allocator.endswith("_thp"):
        env["THP_MEM_ALLOC_ENABLE"] = environ.get("THP_MEM_ALLOC_ENABLE", "1")
    if allocator.startswith("cached"):
        env["GLIBC_TUNABLES"] = merged_tunables(environ.get("GLIBC_TUNABLES", ""))
    return env
