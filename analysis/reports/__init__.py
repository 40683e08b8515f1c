"""The reports of one run, read from the warehouse: the report catalogue, the tables, report.md
with its plots, the Perfetto trace, and a run directory's headline figures."""
