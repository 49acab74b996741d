"""The paper-tables report (`fairseq-heads report RESULTS_DIR`) and the per-model result files
the recipes write (`fairseq-heads result`, `fairseq-heads mask`).

`layout` names the files of a results folder and a model's settings in them (read back by
`settings_migration` into folders from before they were recorded), `model_result` builds a model's result file,
`tables` turns result files into table rows (pure functions; one module per family of tables:
table_basics, pruning_tables, scratch_tables, function_tables, trace_tables), `figures` draws them and
`build` writes tables.md, the PNG figures and report.html.
"""
