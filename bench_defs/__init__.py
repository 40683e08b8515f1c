"""The Dagster code location. Imports dagster, never torch at module level."""
