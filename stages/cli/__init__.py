"""The `collobench` command line: the one composition root where `stages` meets `analysis`
(run summaries, loading, reports) and MLflow."""
