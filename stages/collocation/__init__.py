"""Collocation: the launcher that runs a spec's phases (lifecycle in `launcher`; phase plan,
worker supervision, barrier, pre-flight, energy notes and manifest writing beside it), the
worker process of one pipeline and its typed protocol, CPU/GPU placement, child-process
lifetime and the environment probe recorded in the manifest."""
