"""The spec contract: pydantic models of the YAML (`models`), the checks a model cannot express
(`checks`), safe loading with `--set` overrides (`loading`) and the JSON Schema (`schema`)."""
