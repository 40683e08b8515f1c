"""Servers a benchmark starts beside its pipelines: registered types and their lifecycle."""
