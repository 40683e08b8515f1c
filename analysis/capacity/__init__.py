"""Capacity searches and regions in the analysis layer: one typed reader of their directories
(file_reader, through the records of stages.contracts.capacity_files), the capacity tables'
rows made of them (table_rows), the warehouse's capacity tables and views (warehouse_tables),
and the report.md with its plot written into each directory (report_markdown, figures)."""
