"""The two sides a fidelity benchmark compares, shared by `perf/fidelity.py` and
`perf/backend_fidelity.py`: the bare loop (the pipeline's work without the harness) and the
measured window's rate of a recorded run.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FAKE_IMAGE_SIZE = 64
FAKE_DATASET = {"size": 256, "image_size": FAKE_IMAGE_SIZE, "num_classes": 1000}


def measured_window(measured: pa.Table) -> tuple[int, int, int]:
    """(ok queries, first measured schedule, last ok completion) of the measured rows."""
    ok = measured.filter(pc.equal(measured.column("status"), "ok"))
    if ok.num_rows == 0:
        raise RuntimeError("no measured query completed ok")
    start_ns = pc.min(measured.column("scheduled_ns")).as_py()
    return ok.num_rows, start_ns, pc.max(ok.column("completed_ns")).as_py()


def window_qps(measured: pa.Table) -> float:
    """Measured ok queries / (last completion - first measured schedule)."""
    ok_count, start_ns, end_ns = measured_window(measured)
    return float(ok_count / ((end_ns - start_ns) / 1e9))


class BareLoop:
    """The pipeline's work without the harness: data, preprocessing and the model in a loop."""

    def __init__(self, model: str, batch: int) -> None:
        import torch

        from stages.artifacts.registry import ensure_artifact
        from stages.artifacts.vision_artifacts import load_digits_split, load_fake_images
        from stages.library.models.classifier_choice import ModelChoiceConfig, load_classifier
        from stages.library.vision.torchvision_stages import IMAGENET_MEAN, IMAGENET_STD

        self.torch = torch
        self.batch = batch
        if model == "digits_cnn":
            images, labels = load_digits_split(ensure_artifact("digits"), "test")
            mean, std = [0.5], [0.5]
        else:
            images, labels = load_fake_images(ensure_artifact("fake_images", FAKE_DATASET))
            mean, std = list(IMAGENET_MEAN), list(IMAGENET_STD)
        self.images = torch.from_numpy(np.ascontiguousarray(images))
        self.labels = torch.from_numpy(np.ascontiguousarray(labels))
        self.mean = torch.tensor(mean).reshape(1, -1, 1, 1)
        self.std = torch.tensor(std).reshape(1, -1, 1, 1)
        self.model = load_classifier(ModelChoiceConfig(model=model)).eval()
        self.rng = np.random.default_rng(0)
        self.order = torch.from_numpy(self.rng.permutation(len(self.labels)))
        self.position = 0

    def step(self) -> int:
        """One batch: serve, preprocess, classify, grade; returns the top-1 count."""
        torch = self.torch
        if self.position + self.batch > len(self.order):
            rest = self.order[self.position :]
            fresh = torch.from_numpy(self.rng.permutation(len(self.labels)))
            self.order, self.position = torch.cat((rest, fresh)), 0
        indices = self.order[self.position : self.position + self.batch]
        self.position += self.batch
        images = self.images.index_select(0, indices)
        labels = self.labels.index_select(0, indices)
        with torch.no_grad():
            x = images.float().div(255.0) if images.dtype == torch.uint8 else images.float()
            x = (x - self.mean) / self.std
        with torch.inference_mode():
            predictions = self.model(x).argmax(1)
            return int((predictions == labels).sum())

    def qps(self, window_s: float, warmup: int) -> tuple[float, float]:
        """(iterations/s, process CPU microseconds per iteration) over a window."""
        for _ in range(warmup):
            self.step()
        count = 0
        cpu_started = time.process_time()
        started = time.perf_counter()
        deadline = started + window_s
        now = started
        while now < deadline:
            self.step()
            count += 1
            now = time.perf_counter()
        return count / (now - started), (time.process_time() - cpu_started) / count * 1e6
