"""Telemetry samplers: one NVML sampler per GPU, one host sampler (psutil, RAPL), a fake NVML.

Samplers run in their own processes (see `sampler_process`) and write `gpu_samples`,
`gpu_process_samples` and `host_samples` rows through `stages.rundir.ChunkWriter`. The GPU
backend comes from `gpu_backend_factory`, the only production module that loads the fake NVML
(a test double, when `COLLOBENCH_FAKE_NVML` is set).
"""
