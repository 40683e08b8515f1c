"""Capacity in Dagster: the partitioned `capacity` asset and its job (assets), its two checks
(checks), the partition keys (keys), the region's requests, sensor and job (region_requests),
the region's summary after each ray (region_summary) and the Pipes child around
`collobench capacity` (runner)."""
