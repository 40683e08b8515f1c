"""What every model-file loader shares: its error and one-line reason, where an entry's file
lies (`located`, which builds an `artifact:` model), and how a loaded module states its inputs.

A leaf, so that the loaders (`loaders`, `hf_folders`) and their users (`fit`, `infer`,
`stages.library.served.synthetic_prompts`) import it without importing one another.
"""

from __future__ import annotations

from stages.contracts.errors import InvalidInputError
from stages.spec.model_entry import ModelEntry

INPUT_SHAPE_ATTRIBUTE = "collobench_input_shape"
"""Set on a loaded `torch.export` module: the shape it was exported with."""
REASON_CHARS = 300  # of the loader's message, on the one line a failed load gives
DeclaredInput = tuple[str, tuple[int | None, ...], str]
"""An input a model file declares: name, shape (None for a symbolic dimension), dtype name."""


class ModelFileError(InvalidInputError, ValueError):
    """A model file that cannot be loaded as the format its entry names."""


def located(entry: ModelEntry, build: bool = True) -> ModelEntry:
    """`entry` with an `artifact:<name>` location replaced by the artefact's model file, built
    first when needed (`build=False`: an ArtifactError instead); any other entry as it is."""
    name = entry.artifact_name
    if name is None:
        return entry
    from stages.artifacts.registry import ensure_artifact

    built = ensure_artifact(name, build=build)
    if entry.location_key == "path":  # a model folder artefact (tiny_lm, minilm)
        return entry.with_location(str(built.path))
    return entry.with_location(str(built.path / built.metadata["model_file"]))


def model_file_reason(error: Exception) -> str:
    """A loader's message on one line, at most REASON_CHARS long (its type when empty)."""
    return " ".join(str(error).split())[:REASON_CHARS] or type(error).__name__
