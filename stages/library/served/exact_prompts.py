"""Prompts of an exact token count for a given tokenizer (`dataset.synthetic_prompts`).

A prompt is a run of whole words from the tokenizer's own vocabulary, joined by spaces. Only
words that are ONE token after a space in running text are kept (checked by encoding them
after a probe word): the usual pre-tokenizers (byte-level BPE, SentencePiece, WordPiece) split
text at spaces first, so each further word adds exactly one token and decode/encode round trips
cannot merge neighbours. The count is then measured on the text as the server will see it
(`count_as`: the text alone, the completions API's encoding with special tokens, or the chat
API's templated conversation) and the number of words corrected until it is exact; a count
that cannot be reached raises `PromptLengthError`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Literal

from stages.contracts.errors import RunFailedError

CountAs = Literal["text", "completions", "chat"]
PROBE_WORD = "the"
MAX_ROUNDS = 8
"""Corrections of the word count before a length is declared unreachable."""
MAX_WORDS = 20_000
"""Vocabulary words kept (the first ones by token id): enough variety, bounded start-up."""


class PromptLengthError(RunFailedError, ValueError):
    """A prompt of the asked token count could not be built; the text is one line."""


def _ids(encoded: Any) -> list[int]:
    """The token ids of an encoding: a list, or a mapping with `input_ids` (transformers 5
    returns a BatchEncoding from `apply_chat_template(tokenize=True)`)."""
    ids = encoded["input_ids"] if not isinstance(encoded, list) else encoded
    return list(ids)


def token_counter(tokenizer: Any, count_as: CountAs) -> Callable[[str], int]:
    """How many tokens a prompt text is as the server counts it: `text` (no special tokens),
    `completions` (`tokenizer(text)`, special tokens added, as /v1/completions encodes) or
    `chat` (one user message through the chat template with the generation prompt, as
    /v1/chat/completions does)."""
    if count_as == "text":
        return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
    if count_as == "completions":
        return lambda text: len(tokenizer(text)["input_ids"])
    if not getattr(tokenizer, "chat_template", None):
        raise PromptLengthError("count_as chat: the tokenizer has no chat template")

    def chat(text: str) -> int:
        messages = [{"role": "user", "content": text}]
        return len(
            _ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
        )

    return chat


def stable_words(tokenizer: Any) -> list[str]:
    """Alphabetic vocabulary words that are one token each after a space in running text,
    in token id order (deterministic for a tokenizer)."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    encode = tokenizer.encode
    base = len(encode(PROBE_WORD, add_special_tokens=False))
    words: list[str] = []
    seen: set[str] = set()
    for token_id in sorted(tokenizer.get_vocab().values()):
        if token_id in special:
            continue
        word = tokenizer.decode([token_id]).strip()
        if len(word) < 2 or not (word.isascii() and word.isalpha()) or word in seen:
            continue
        if len(encode(f"{PROBE_WORD} {word}", add_special_tokens=False)) != base + 1:
            continue
        seen.add(word)
        words.append(word)
        if len(words) >= MAX_WORDS:
            break
    if not words:
        raise PromptLengthError("the tokenizer's vocabulary has no whole words to build from")
    return words


class PromptBuilder:
    """Builds prompt texts of an exact token count (as `count_as` counts): a fixed lead word,
    then words drawn from the vocabulary's stable words by the caller's seeded generator."""

    def __init__(self, tokenizer: Any, count_as: CountAs) -> None:
        self.words = stable_words(tokenizer)
        self.count = token_counter(tokenizer, count_as)
        self.count_text = token_counter(tokenizer, "text")
        self.count_as = count_as
        # Every prompt starts with one fixed word (a word at the very start may encode
        # differently from one after a space): the first that is one token there too.
        self.lead = next((w for w in self.words if self.count_text(w) == 1), self.words[0])
        self.min_tokens = self.count(self.lead)
        """The tokens a one-word prompt takes: the fewest a prompt can have."""

    def block(self, words: int, rng: random.Random) -> list[str]:
        """`words` words (as many tokens, after the lead) drawn by `rng`: a shared prefix
        block is drawn by a generator seeded by the block's id, so every prompt holding it
        holds the same text."""
        pool = self.words
        return [pool[rng.randrange(len(pool))] for _ in range(words)]

    def build(
        self, tokens: int, rng: random.Random, prefix: list[str] | None = None
    ) -> tuple[str, int]:
        """(text, its raw token count without template or special tokens) for a prompt of
        exactly `tokens` tokens as `count_as` counts, starting with `prefix` (shared blocks;
        cut short when the prompt is shorter); PromptLengthError when none is."""
        if tokens < self.min_tokens:
            raise PromptLengthError(
                f"{tokens} tokens is below the {self.min_tokens} a one-word prompt takes "
                f"(count_as {self.count_as})"
            )
        sequence = [self.lead, *(prefix or []), *self.block(tokens, rng)]
        words = max(1, tokens - (self.min_tokens - 1))
        for _ in range(MAX_ROUNDS):
            text = " ".join(sequence[:words])
            counted = self.count(text)
            if counted == tokens:
                return text, self.count_text(text)
            words = min(len(sequence), max(1, words + tokens - counted))
        raise PromptLengthError(
            f"no prompt of exactly {tokens} tokens (count_as {self.count_as}): the last try "
            f"counted {counted}"
        )
