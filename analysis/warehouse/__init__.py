"""The DuckDB warehouse: its SQL files and connections, the registered Parquet files, the schema
migrations, the loader and the stored summaries. Layered readers -> migrations ->
registered_files -> db -> sql_files, with no import back up."""
