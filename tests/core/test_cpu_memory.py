"""The memory settings of CPU recipes (fairseq_heads/cpu_memory.py): glibc keeps freed memory, so a
block allocated, touched and freed again and again is faulted in once; the recipes' child
processes get the settings, a user's own tunables kept."""
import os
import platform
import subprocess
import sys

import pytest

from fairseq_heads.commands.recipe import step_environment
from fairseq_heads.cpu_memory import allocator_env, merged_tunables
from fairseq_heads.pipeline.recipes import EUROPARL_BASE_GPU, EUROPARL_CPU

# a child process: 10 times malloc 64 MiB, write every page, free; prints its page faults over the loop
ALLOCATE_AND_FREE = """
import ctypes, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
size = 64 << 20
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(ctypes.c_void_p(block))
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_under(allocator):
    base = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    done = subprocess.run([sys.executable, "-c", ALLOCATE_AND_FREE], env=dict(base, **allocator_env(allocator, base)),
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="GLIBC_TUNABLES is glibc's")
def test_cached_allocator_faults_a_freed_block_in_once_where_glibc_maps_it_each_time():
    glibc, cached = faults_under("glibc"), faults_under("cached")
    # glibc maps each 64 MiB block afresh: ten blocks' pages faulted (4 KiB or 2 MiB pages alike);
    # the cached heap reuses the first block's pages
    assert cached * 5 < glibc, (cached, glibc)


def test_users_tunables_are_kept_and_ours_replace_theirs_of_the_same_name():
    merged = merged_tunables("glibc.malloc.arena_max=2:glibc.malloc.mmap_max=7")
    assert merged.split(":") == ["glibc.malloc.arena_max=2", "glibc.malloc.mmap_max=0",
                                 "glibc.malloc.trim_threshold=1099511627776"]
    assert merged_tunables("") == "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776"


def test_cpu_recipes_children_keep_freed_memory_and_gpu_ones_only_take_huge_pages():
    environ = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "PATH": "/bin"}
    cpu = step_environment(EUROPARL_CPU, "/repo/fairseq_heads", environ)
    assert cpu["GLIBC_TUNABLES"].startswith("glibc.malloc.arena_max=2:glibc.malloc.mmap_max=0:")
    assert cpu["THP_MEM_ALLOC_ENABLE"] == "1" and cpu["PYTHONPATH"] == "/repo"
    gpu = step_environment(EUROPARL_BASE_GPU, "/repo/fairseq_heads", environ)
    assert gpu["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2" and gpu["THP_MEM_ALLOC_ENABLE"] == "1"
    assert step_environment(EUROPARL_CPU, "/r/fairseq_heads", dict(environ, THP_MEM_ALLOC_ENABLE="0"))[
        "THP_MEM_ALLOC_ENABLE"] == "0"  # a user's own choice stands
    with pytest.raises(ValueError, match="one of glibc"):
        allocator_env("jemalloc", {})
