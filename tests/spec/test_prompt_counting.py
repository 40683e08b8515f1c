"""`dataset.synthetic_prompts`' `count_as` follows the API of the http.openai stage that sends
its prompts: left unset it is filled in at validation (the normal form holds it), and a value
that contradicts that API is refused by `collobench validate` and `collobench run` with one
line and exit 2, before anything starts. Validation only: no process is started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from stages.cli.app import app
from stages.validation.loading import LoadedSpec, SpecError, validate_document

runner = CliRunner()


def sender(api: str, stage_id: str = "llm") -> dict[str, Any]:
    return {"id": stage_id, "type": "http.openai",
            "config": {"base_url": "http://127.0.0.1:9", "api": api}}  # fmt: skip


def prompts_doc(
    *senders: dict[str, Any], count_as: str | None = None, between: bool = False
) -> dict[str, Any]:
    """A trace-shaped pipeline: synthetic prompts (optionally through a noop stage) to the
    given http.openai stages."""
    config = {} if count_as is None else {"count_as": count_as}
    targets = [stage["id"] for stage in senders]
    first = {"id": "prompts", "type": "dataset.synthetic_prompts", "config": config}
    stages: list[dict[str, Any]] = [{**first, "outputs": ["pass"] if between else targets}]
    if between:
        stages.append({"id": "pass", "type": "noop", "outputs": targets})
    stages += senders
    loadgen = {"type": "closed_loop", "concurrency": 1, "duration_s": 1}
    return {"name": "counting", "pipelines": [{"name": "p", "loadgen": loadgen, "stages": stages}]}


def count_as(loaded: LoadedSpec) -> tuple[Any, Any]:
    """(the count the run's stage gets, the normal form's)."""
    pipeline = loaded.spec.pipelines[0]
    normal = loaded.normalized["pipelines"][0]["stages"][0]["config"]
    return pipeline.stages[0].config.get("count_as"), normal["count_as"]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_an_unset_count_follows_the_api_that_sends_the_prompts(api: str) -> None:
    assert count_as(validate_document(prompts_doc(sender(api)))) == (api, api)
    # through a stage that passes the payload on, the sender is still the one that counts
    assert count_as(validate_document(prompts_doc(sender(api), between=True))) == (api, api)
    # the same meaning, the same hash: unset equals the api's own count spelled out
    spelled = validate_document(prompts_doc(sender(api), count_as=api))
    assert spelled.spec_hash == validate_document(prompts_doc(sender(api))).spec_hash


def test_prompts_no_stage_sends_keep_the_chat_count() -> None:
    """No http.openai downstream: the old default, so the normal form (and the hash) of a
    spec written before the count followed the api is unchanged."""
    doc = prompts_doc()
    doc["pipelines"][0]["stages"][0]["outputs"] = []
    assert count_as(validate_document(doc)) == ("chat", "chat")


@pytest.mark.parametrize(
    ("api", "given", "counts"),
    [
        ("completions", "chat", "the text with the tokenizer's special tokens"),
        ("chat", "completions", "the user message through the chat template"),
        ("chat", "text", "the user message through the chat template"),
    ],
)
def test_a_count_that_contradicts_the_sending_api_is_refused(
    api: str, given: str, counts: str
) -> None:
    with pytest.raises(SpecError) as caught:
        validate_document(prompts_doc(sender(api), count_as=given))
    assert caught.value.lines() == [
        f"pipelines[0].stages[0].config.count_as: {given}, but stage 'llm' sends these "
        f"prompts over api {api}, whose server counts {counts}: leave count_as unset or set "
        f"{api}"
    ]


def test_prompts_sent_over_two_apis_are_refused_whatever_the_count() -> None:
    line = (
        "pipelines[0].stages[0].config.count_as: the prompts are sent by 'a' (api chat), 'b' "
        "(api completions): no count is exact for each"
    )
    for given in (None, "chat"):
        doc = prompts_doc(sender("chat", "a"), sender("completions", "b"), count_as=given)
        with pytest.raises(SpecError) as caught:
            validate_document(doc)
        assert caught.value.lines() == [line]


@pytest.mark.parametrize("command", ["validate", "run"])
def test_the_cli_refuses_a_contradicting_count_with_one_line_and_exit_2(
    command: str, tmp_path: Path
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(prompts_doc(sender("completions"), count_as="chat")))
    extra = ["--out", str(tmp_path / "runs")] if command == "run" else []
    result = runner.invoke(app, [command, str(path), *extra])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"{path}: pipelines[0].stages[0].config.count_as: chat, but stage 'llm' sends these "
        "prompts over api completions, whose server counts the text with the tokenizer's "
        "special tokens: leave count_as unset or set completions"
    ]
    assert not (tmp_path / "runs").exists()  # refused before anything ran
