"""What the Dagster assets of every family share, below them all (it imports nothing else of
bench_defs): the resources (resources), the device pools (pools), the spec partitions and run
tags (specs, with k8s' run tags), the Pipes child's relay (pipes_runner), the sensors' interval
(sensor_interval) and a plot as Markdown metadata (image_metadata)."""
