"""The memory settings of CPU recipes (fairseq_heads/cpu_memory.py): glibc's cache and mimalloc keep
freed memory, so a block allocated, touched and freed again and again is faulted in once; the
recipes' child processes get the settings, a user's own tunables and preloads kept."""
import os
import platform
import subprocess
import sys

import pytest

from fairseq_heads.commands.recipe import step_environment
from fairseq_heads.cpu_memory import allocator_env, cpu_recipe_allocator, merged_tunables, mimalloc_library
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
    base = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
    done = subprocess.run([sys.executable, "-c", ALLOCATE_AND_FREE], env=dict(base, **allocator_env(allocator, base)),
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="GLIBC_TUNABLES is glibc's")
def test_cached_allocator_faults_a_freed_block_in_once_where_glibc_maps_it_each_time():
    glibc, cached = faults_under("glibc"), faults_under("cached")
    # glibc maps each 64 MiB block afresh: ten blocks' pages faulted (4 KiB or 2 MiB pages alike);
    # the cached heap reuses the first block's pages
    assert cached * 5 < glibc, (cached, glibc)


@pytest.mark.skipif(mimalloc_library() is None, reason="the cmeel-mimalloc wheel is not installed")
def test_mimalloc_is_preloaded_and_faults_a_freed_block_in_once():
    glibc, mimalloc = faults_under("glibc"), faults_under("mimalloc_thp")
    assert mimalloc * 5 < glibc, (mimalloc, glibc)
    env = allocator_env("mimalloc_thp", {"LD_PRELOAD": "/opt/a.so /opt/b.so", "MIMALLOC_PURGE_DELAY": "10"})
    assert env["LD_PRELOAD"] == f"{mimalloc_library()}:/opt/a.so:/opt/b.so"
    assert env["MIMALLOC_PURGE_DELAY"] == "10" and env["MIMALLOC_ALLOW_LARGE_OS_PAGES"] == "1"


def test_users_tunables_are_kept_and_ours_replace_theirs_of_the_same_name():
    merged = merged_tunables("glibc.malloc.arena_max=2:glibc.malloc.mmap_max=7")
    assert merged.split(":") == ["glibc.malloc.arena_max=2", "glibc.malloc.mmap_max=0",
                                 "glibc.malloc.trim_threshold=1099511627776"]
    assert merged_tunables("") == "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776"


def test_cpu_recipes_children_keep_freed_memory_and_gpu_ones_only_take_huge_pages():
    environ = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "PATH": "/bin"}
    cpu = step_environment(EUROPARL_CPU, "/repo/fairseq_heads", environ)
    if cpu_recipe_allocator() == "mimalloc_thp":  # where the wheel is installed (make's .venv)
        assert cpu["LD_PRELOAD"] == mimalloc_library() and cpu["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2"
    else:
        assert cpu["GLIBC_TUNABLES"].startswith("glibc.malloc.arena_max=2:glibc.malloc.mmap_max=0:")
    assert cpu["THP_MEM_ALLOC_ENABLE"] == "1" and cpu["PYTHONPATH"] == "/repo"
    gpu = step_environment(EUROPARL_BASE_GPU, "/repo/fairseq_heads", environ)
    assert gpu["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2" and gpu["THP_MEM_ALLOC_ENABLE"] == "1"
    assert "LD_PRELOAD" not in gpu
    assert step_environment(EUROPARL_CPU, "/r/fairseq_heads", dict(environ, THP_MEM_ALLOC_ENABLE="0"))[
        "THP_MEM_ALLOC_ENABLE"] == "0"  # a user's own choice stands
    with pytest.raises(ValueError, match="one of glibc"):
        allocator_env("jemalloc", {})


def test_cpu_env_prints_export_lines_a_shell_takes_back(tmp_path):
    """`eval "$(fairseq-heads cpu-env)"` leaves the shell with the recipes' settings."""
    script = tmp_path / "env.sh"
    script.write_text(f'eval "$({sys.executable} -m fairseq_heads.cli cpu-env --allocator cached_thp)"\n'
                      'echo "$GLIBC_TUNABLES|$THP_MEM_ALLOC_ENABLE"\n')
    base = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE")}
    done = subprocess.run(["bash", str(script)], env=base, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "|".join(allocator_env("cached_thp", base)[k] for k in ("GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE"))


def test_cpu_recipe_jobs_share_the_cores_unless_the_user_set_the_threads():
    one = step_environment(EUROPARL_CPU, "/r/fairseq_heads", {}, jobs=1, cores=8)
    assert "OMP_NUM_THREADS" not in one  # a training alone takes torch's default, every core
    assert step_environment(EUROPARL_CPU, "/r/fairseq_heads", {}, jobs=2, cores=8)["OMP_NUM_THREADS"] == "4"
    assert step_environment(EUROPARL_CPU, "/r/fairseq_heads", {}, jobs=3, cores=2)["OMP_NUM_THREADS"] == "1"
    assert step_environment(EUROPARL_CPU, "/r/fairseq_heads", {"OMP_NUM_THREADS": "2"}, jobs=2,
                            cores=2)["OMP_NUM_THREADS"] == "2"
    assert "OMP_NUM_THREADS" not in step_environment(EUROPARL_BASE_GPU, "/r/fairseq_heads", {}, jobs=3, cores=16)
