"""A/B sessions (`collobench ab`) in the analysis layer: one typed reader of a session folder
and the rows of the warehouse's `ab_sessions` and `ab_blocks` made of it (session_rows), and
their loading with the segments' run directories (warehouse_tables; view `ab_verdicts`)."""
