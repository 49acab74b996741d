"""One file per head statistic: its definition (also in docs/metrics.md), the per-batch sums
and a streaming accumulator as pure torch, then, at the end of the file, its binding to a stats
run (a registry.Metric subclass: columns, cells, labels, how it is fed), registered there.
stats/__init__.py imports them in heads.csv column order."""
