"""How often the code location's sensors (spec files, model files, capacity regions) evaluate."""

import os

SENSOR_INTERVAL_ENV = "COLLOBENCH_SENSOR_INTERVAL_S"


def sensor_interval_s() -> int:
    """Seconds between a sensor's evaluations (`$COLLOBENCH_SENSOR_INTERVAL_S`, default 30; read
    when the code location loads): the spec-files and region sensors' `minimum_interval_seconds`.
    The cluster tests set 5, so a region's solo searches and rays follow each other quickly."""
    return max(1, int(os.environ.get(SENSOR_INTERVAL_ENV, "30")))
