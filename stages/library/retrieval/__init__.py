"""Retrieval stages: exact vector search (vector), a read-only SQL statement (sql) and the
fusion of several retrievers' results (fuse), over a corpus (corpus)."""
