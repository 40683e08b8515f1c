"""The run-directory contract: table schemas, chunked Parquet writing and merging of parts."""
