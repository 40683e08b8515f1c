"""Analysis of run directories: DuckDB schema and views (SQL files), loader, reports.

Depends on nothing of ours but the run-directory file contract.
"""
