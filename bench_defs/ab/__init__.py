"""The `ab_report` asset and `ab_comparison` job (assets.py), and their Pipes child around
`collobench ab` (runner.py)."""
