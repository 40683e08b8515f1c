"""The `collobench` commands, one module per command group; stages.cli.app registers them."""
