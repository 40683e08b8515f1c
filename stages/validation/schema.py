"""JSON Schema of the spec, with each registered stage type's config, for editors."""

from __future__ import annotations

from typing import Any

from stages.runtime.registry import StageRegistry, default_registry
from stages.spec.models import BenchmarkSpec


def spec_json_schema(registry: StageRegistry | None = None) -> dict[str, Any]:
    """The spec's schema; `type` lists the registered stages and `config` follows the type."""
    registry = registry or default_registry()
    schema = BenchmarkSpec.model_json_schema()
    definitions = schema.setdefault("$defs", {})
    stage_schema = definitions["StageSpec"]
    stage_schema["properties"]["type"]["enum"] = registry.names()
    rules = []
    for name in registry.names():
        config_model = registry.get(name).config_model
        config_schema = config_model.model_json_schema()
        for key, value in config_schema.pop("$defs", {}).items():
            definitions.setdefault(key, value)
        definition_name = f"{name}.config"
        definitions[definition_name] = config_schema
        rules.append(
            {
                "if": {"properties": {"type": {"const": name}}, "required": ["type"]},
                "then": {"properties": {"config": {"$ref": f"#/$defs/{definition_name}"}}},
            }
        )
    stage_schema["allOf"] = rules
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "collobench benchmark spec"
    return schema
