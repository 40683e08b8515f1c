"""The in-process stage runtime: stage base and registry, graph, channels, loadgen, recorder."""
