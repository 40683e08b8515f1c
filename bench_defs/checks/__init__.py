"""Asset checks of the `warehouse` asset: of one loaded run, and across the benchmark's runs."""
