"""The spec contract: pydantic models of the YAML (`models`, `loadgen`, `services`,
`model_entry`) and the shape of a problem (`problems`). Loading and validating a spec, which
needs the stage registry, is `stages.validation`."""
