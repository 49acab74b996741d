"""One file per head statistic: its definition (also in docs/metrics.md), the per-batch sums
and a streaming accumulator. Pure torch; the run binds them in ../builtin.py."""
