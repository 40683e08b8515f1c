"""Datasets and models built locally and deterministically (no downloads at run time).

`store` keeps built artefacts under `$COLLOBENCH_HOME/artifacts/<name>/<content-hash>/`;
`registry` registers artefact names with their builders (`vision`, `torchvision_models`, `text`).
Nothing here imports dagster, and no module imports torch at module level (Dagster wraps these
functions as assets).
"""
