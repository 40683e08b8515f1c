"""Analysis of run directories, one subpackage per role: `warehouse` (the DuckDB warehouse: SQL
files, connections, loader, migrations, stored summaries), `reports` (one run's tables, report.md,
plots, trace, headline figures), `history` (verdicts across runs, run against run) and `capacity`
(the capacity searches' files, tables and reports). Depends on nothing of ours but the leaf
contracts (stages.rundir, stages.contracts; tests/test_layering.py).
"""
