"""Collocation: the launcher that runs a spec's phases, the worker process of one pipeline,
CPU/GPU placement, child-process lifetime and the environment probe recorded in the manifest."""
