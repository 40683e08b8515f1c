"""Validating a spec: safe loading with `--set` overrides and the normal form and hash
(`loading`), the checks a model cannot express (`checks`: the stage graph against the stage
registry, collocation modes, services in `service_checks`, image fit, prompt counting, model
file paths) and the JSON Schema (`schema`).

It sits above the runtime and the services, whose registries it asks; `stages.spec` below them
holds only the models, so the runtime can import the spec without importing its validation."""
