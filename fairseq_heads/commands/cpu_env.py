"""`fairseq-heads cpu-env`: the memory settings the CPU recipes start their processes with
(fairseq_heads/cpu_memory.py), as shell `export` lines for a user's own fairseq-train:

    eval "$(fairseq-heads cpu-env)" && fairseq-train ... --cpu
"""
import argparse
import os
import shlex

from ..cpu_memory import ALLOCATORS, allocator_env, cpu_recipe_allocator


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allocator", choices=ALLOCATORS,
                        help="one variant of benchmarks/cpu_allocator.py (default: the CPU recipes' own: "
                             "mimalloc_thp where the cmeel-mimalloc wheel is installed, else cached_thp)")


def run(args) -> int:
    for name, value in allocator_env(args.allocator or cpu_recipe_allocator(), os.environ).items():
        print(f"export {name}={shlex.quote(value)}")
    return 0
