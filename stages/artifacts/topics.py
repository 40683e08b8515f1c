"""The project's own text: seeded templates over a small vocabulary of ML and systems topics.

`prompts` (questions with a reference answer) and `rag_corpus` (short documents) are drawn from
the same topics, so a prompt's topic names the documents that should answer it. Pure Python
(`random.Random`), no heavy imports: the same seed gives the same texts on every machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    """One subject: the terms it talks about, what they affect, and facts about them."""

    name: str
    terms: tuple[str, ...]
    metrics: tuple[str, ...]
    facts: tuple[str, ...]


TOPICS: tuple[Topic, ...] = (
    Topic(
        "gpu memory",
        ("HBM bandwidth", "device memory", "memory fragmentation", "pinned host memory"),
        ("out-of-memory errors", "batch size limits", "kernel throughput"),
        (
            "device memory bounds the largest batch a model can serve",
            "fragmentation wastes free memory between live allocations",
            "pinned host memory makes copies to the GPU asynchronous",
            "memory bandwidth limits kernels that read more bytes than they compute on",
        ),
    ),
    Topic(
        "batching",
        ("dynamic batching", "batch size", "continuous batching", "padding"),
        ("throughput", "tail latency", "GPU utilisation"),
        (
            "larger batches raise throughput but make each request wait longer",
            "continuous batching admits new sequences at every decoding step",
            "padding short inputs to the longest one wastes compute",
            "a batching window trades queueing delay for device efficiency",
        ),
    ),
    Topic(
        "quantization",
        ("int8 weights", "float16", "bfloat16", "weight-only quantization"),
        ("accuracy", "model size", "memory traffic"),
        (
            "int8 weights halve memory traffic compared with float16",
            "bfloat16 keeps the exponent range of float32 with fewer mantissa bits",
            "quantization error grows in layers with large activation outliers",
            "weight-only quantization speeds up memory-bound decoding",
        ),
    ),
    Topic(
        "kv cache",
        ("key-value cache", "paged attention", "prefix caching", "cache eviction"),
        ("time per output token", "memory footprint", "concurrency"),
        (
            "the key-value cache stores past attention keys so decoding skips recomputation",
            "paged attention allocates the cache in fixed blocks to avoid fragmentation",
            "prefix caching reuses the cache of a shared system prompt",
            "the cache grows linearly with sequence length and batch size",
        ),
    ),
    Topic(
        "attention",
        ("self-attention", "flash attention", "attention heads", "context length"),
        ("quadratic cost", "memory reads", "time to first token"),
        (
            "self-attention cost grows with the square of the context length",
            "flash attention tiles the computation to stay in on-chip memory",
            "the prefill pass processes the whole prompt before the first token",
            "grouped-query attention shares keys and values between heads",
        ),
    ),
    Topic(
        "data loading",
        ("data loader workers", "prefetching", "decoding images", "shuffling"),
        ("input stalls", "CPU load", "training step time"),
        (
            "data loader workers decode samples in parallel with training",
            "prefetching hides input latency behind the previous step",
            "image decoding can starve the GPU when CPU cores are scarce",
            "a seeded shuffle makes an epoch's order reproducible",
        ),
    ),
    Topic(
        "scheduling",
        ("time slicing", "priority queues", "preemption", "MPS"),
        ("fairness", "interference", "queueing delay"),
        (
            "time slicing gives each process the whole GPU in turns",
            "MPS lets kernels of several processes run on the GPU at once",
            "preemption bounds how long an urgent request waits",
            "collocated workloads interfere through shared caches and memory bandwidth",
        ),
    ),
    Topic(
        "networking",
        ("RDMA", "all-reduce", "gradient compression", "network bandwidth"),
        ("communication time", "scaling efficiency", "step time"),
        (
            "all-reduce sums gradients across workers every training step",
            "RDMA moves data between hosts without involving their CPUs",
            "gradient compression trades accuracy for less communication",
            "overlapping communication with backward computation hides its cost",
        ),
    ),
    Topic(
        "caching",
        ("result caching", "embedding cache", "cache hit rate", "warm caches"),
        ("request latency", "load on the model", "freshness"),
        (
            "a result cache answers repeated queries without running the model",
            "a cold cache makes the first requests after a restart slow",
            "the hit rate decides how much load a cache takes off the model",
            "warm-up queries fill caches before measurement starts",
        ),
    ),
    Topic(
        "compilers",
        ("kernel fusion", "graph capture", "torch.compile", "CUDA graphs"),
        ("launch overhead", "compile time", "operator count"),
        (
            "kernel fusion merges elementwise operators into one launch",
            "CUDA graphs replay a captured sequence of kernels with little CPU cost",
            "compilation time is paid once before the measured window",
            "dynamic shapes can trigger recompilation at run time",
        ),
    ),
    Topic(
        "power",
        ("power capping", "energy counters", "clock frequency", "idle power"),
        ("energy per query", "performance per watt", "thermal throttling"),
        (
            "the energy counter integrates power more precisely than sampled readings",
            "power capping lowers clocks and energy per query",
            "idle power is paid even when no query is running",
            "thermal throttling reduces clocks when the device runs hot",
        ),
    ),
    Topic(
        "retrieval",
        ("vector search", "embeddings", "approximate nearest neighbours", "re-ranking"),
        ("recall", "retrieval latency", "answer quality"),
        (
            "embeddings map texts with similar meaning to nearby vectors",
            "exact vector search compares the query with every document",
            "approximate nearest neighbour indexes trade recall for speed",
            "re-ranking the retrieved documents improves answer quality",
        ),
    ),
)

_QUESTIONS = (
    "How does {term} affect {metric}?",
    "Explain why {term} matters for {metric}.",
    "What is the effect of {term} on {metric} in a serving system?",
    "Describe how {term} changes {metric} when pipelines share a device.",
    "Why should an engineer measure {metric} when tuning {term}?",
)

_DOCUMENT_OPENINGS = (
    "In {topic}, {fact}.",
    "A note on {term}: {fact}.",
    "When tuning {term}, remember that {fact}.",
    "Engineers studying {metric} observe that {fact}.",
)

_DOCUMENT_FOLLOW_UPS = (
    " This shows up in {metric}.",
    " It matters most for {metric}.",
    " Measure {metric} before and after changing {term}.",
    " Benchmarks of {term} report {metric}.",
)


@dataclass(frozen=True)
class Prompt:
    prompt_id: int
    topic: str
    text: str
    reference: str
    """A fact of the prompt's topic: what a good answer would say."""


@dataclass(frozen=True)
class Document:
    doc_id: int
    topic: str
    text: str


def make_prompts(count: int, seed: int) -> list[Prompt]:
    """`count` questions, topics in turn (so every topic is covered), wording seeded."""
    chooser = random.Random(seed)
    prompts = []
    for prompt_id in range(count):
        topic = TOPICS[prompt_id % len(TOPICS)]
        term, metric = chooser.choice(topic.terms), chooser.choice(topic.metrics)
        text = chooser.choice(_QUESTIONS).format(term=term, metric=metric)
        fact = chooser.choice(topic.facts)
        prompts.append(Prompt(prompt_id, topic.name, text, fact[0].upper() + fact[1:] + "."))
    return prompts


def make_documents(count: int, seed: int) -> list[Document]:
    """`count` short documents (one or two sentences), topics in turn, wording seeded."""
    chooser = random.Random(seed)
    documents = []
    for doc_id in range(count):
        topic = TOPICS[doc_id % len(TOPICS)]
        words = {
            "topic": topic.name,
            "term": chooser.choice(topic.terms),
            "metric": chooser.choice(topic.metrics),
            "fact": chooser.choice(topic.facts),
        }
        text = chooser.choice(_DOCUMENT_OPENINGS).format(**words)
        if chooser.random() < 0.5:
            text += chooser.choice(_DOCUMENT_FOLLOW_UPS).format(**words)
        documents.append(Document(doc_id, topic.name, text[0].upper() + text[1:]))
    return documents
