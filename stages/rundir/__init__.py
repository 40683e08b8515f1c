"""The run-directory contract, stated once: file names and the table list (`layout`), the
tables' Arrow columns (`schemas`), chunked writing, merging and reading (`tables`), and the
manifest as a typed model with its committed JSON Schema (`manifest`). The analysis layer may
import this package (and nothing else of `stages`)."""
