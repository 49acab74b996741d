"""The `fairseq-heads` commands, one module each (`lm-result` is lm_result.py): `add_arguments(parser)`
and `run(args) -> exit status`, argument parsing and wiring only. cli.COMMANDS is their table; the
recipes' steps run the same modules by import (pipeline/fairseq_steps.run_fairseq_heads). The
modules without `run` hold options several commands share (device_options, lm_blocks). recipe and
publish drive the pipeline and sit above it; the others sit below it (tests/core/test_layers.py)."""
