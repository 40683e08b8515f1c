"""The trained `digits_cnn` as the files a user would bring: an ONNX file (`digits_cnn_onnx`)
and a `torch.export` program (`digits_cnn_pt2`), each graded on the digits test split through
the runtime that will run it (ONNX Runtime, the exported module), so a benchmark of the file
can be compared with the built-in model. A spec names one with `{onnx: artifact:digits_cnn_onnx}`
(stages.spec.model_entry); metadata `model_file` says which file of the folder is the model.

torch and onnxruntime are imported inside the builders.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from stages.artifacts.store import ArtifactBuilder, ArtifactParams, BuiltArtifact
from stages.artifacts.vision_artifacts import load_digits_cnn, load_digits_split

EXPORT_BATCH = "batch"
"""The name of the exported programs' one dynamic dimension (the batch)."""


class DigitsCnnExportParams(ArtifactParams):
    seed: int = Field(0, description="Seed of the digits_cnn trained and exported.")


class _DigitsCnnExport(ArtifactBuilder[DigitsCnnExportParams]):
    """What the two exports share: the trained model, a dynamic batch, and grading the file."""

    kind = "model"
    model_file: str

    def dependencies(self, params: DigitsCnnExportParams) -> list[tuple[str, dict[str, Any]]]:
        return [("digits_cnn", {"seed": params.seed}), ("digits", {})]

    def build(
        self, params: DigitsCnnExportParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        import torch

        model = load_digits_cnn(inputs["digits_cnn"])
        path = out_dir / self.model_file
        with torch.inference_mode(False):
            self.export(model, torch.zeros((2, 1, 8, 8)), path)
        images, labels = load_digits_split(inputs["digits"], "test")
        predictions = self.predict(path, images)
        return {
            "source": "the trained digits_cnn artefact, exported here",
            "model_file": self.model_file,
            "input_shape": [1, 8, 8],
            "classes": 10,
            "test_correct": int((predictions == labels).sum()),
            "test_size": len(labels),
        }

    def export(self, model: Any, example: Any, path: Path) -> None:
        raise NotImplementedError

    def predict(self, path: Path, images: Any) -> Any:
        """Top-1 answers (numpy) of the exported file on `images`, through its own runtime."""
        raise NotImplementedError


class DigitsCnnOnnxBuilder(_DigitsCnnExport):
    """digits_cnn as ONNX (`torch.onnx.export`, a dynamic batch), graded by ONNX Runtime."""

    name = "digits_cnn_onnx"
    description = "the trained digits_cnn exported to ONNX (graded by ONNX Runtime)"
    model_file = "model.onnx"

    def export(self, model: Any, example: Any, path: Path) -> None:
        import torch

        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=["images"],
            output_names=["logits"],
            verbose=False,
            dynamic_shapes=({0: torch.export.Dim(EXPORT_BATCH)},),
        )

    def predict(self, path: Path, images: Any) -> Any:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {"images": images})[0].argmax(1)


class DigitsCnnExportBuilder(_DigitsCnnExport):
    """digits_cnn as a `torch.export` program (`.pt2`, a dynamic batch)."""

    name = "digits_cnn_pt2"
    description = "the trained digits_cnn saved by torch.export (.pt2)"
    model_file = "model.pt2"

    def export(self, model: Any, example: Any, path: Path) -> None:
        import torch

        batch = torch.export.Dim(EXPORT_BATCH)
        program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
        torch.export.save(program, str(path))

    def predict(self, path: Path, images: Any) -> Any:
        import torch

        module = torch.export.load(str(path)).module()
        with torch.inference_mode():
            return module(torch.from_numpy(images)).argmax(1).numpy()


BUILDERS: tuple[ArtifactBuilder[Any], ...] = (DigitsCnnOnnxBuilder(), DigitsCnnExportBuilder())
