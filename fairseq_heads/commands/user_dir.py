"""`fairseq-heads user-dir`: the path to pass to fairseq's `--user-dir` (the package's folder)."""
import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass  # no options


def run(args) -> int:
    print(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return 0
