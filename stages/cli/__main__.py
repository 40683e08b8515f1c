"""`python -m stages.cli` runs the `collobench` command."""

from stages.cli.app import app

app()
