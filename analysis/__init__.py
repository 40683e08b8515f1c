"""Analysis of run directories: the DuckDB warehouse (SQL files, loader) and the reports on it.

Warehouse side: db, view_manifest, catalogue, warehouse_runs, loader, summaries, definitions_db,
migrations, export. Reports side: report_entries, report_catalogue, views_not_per_run, report,
report_file, plots, contention_plot, trace, compare. Depends on nothing of ours but the leaf
contracts (stages.rundir, stages.contracts; tests/test_layering.py).
"""
