"""Pydantic's errors as one sentence: field, value, what is allowed, the fix (table-driven)."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podfleet.validation import first_refusal, range_of, refusal, suggest


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field("a", pattern=r"^[a-z][a-z0-9-]*$", max_length=8)
    chips: int = Field(1, ge=1, le=64)
    speed: float = Field(1.0, gt=0)
    fabric: Literal["sim", "local", "ray", "neuron"] = "sim"
    kind: Literal["chip-failure", "link-down"] | Literal["kill-worker"] = "link-down"
    tags: list[str] = Field([], max_length=2)


def errors(**body: object) -> list[dict]:
    with pytest.raises(ValidationError) as ei:
        Body.model_validate(body)
    return ei.value.errors()  # type: ignore[return-value]


def one(**body: object) -> str:
    errs = errors(**body)
    return first_refusal(errs, lambda e: ".".join(map(str, e["loc"])),
                         lambda f: range_of(Body, f.split("."))).message


@pytest.mark.parametrize(("body", "words"), [
    ({"chips": 0}, ["chips: 0 is too small; allowed 1-64"]),
    ({"chips": 500}, ["chips: 500 is too large; allowed 1-64"]),
    ({"speed": 0.0}, ["speed: 0.0 is too small; allowed > 0"]),
    ({"chips": "8"}, ["chips: '8' is not an integer"]),
    ({"fabric": "rey"}, ["fabric: 'rey' is not a known fabric (did you mean 'ray'?); allowed: sim, local, ray, neuron"]),
    ({"fabric": "gpu"}, ["fabric: 'gpu' is not a known fabric; allowed: sim, local, ray, neuron"]),
    ({"name": "pod-O"}, ["name: 'pod-O' is not valid: names are lowercase letters, digits and '-', starting with a "
                         "letter; try 'pod-o'"]),
    ({"name": "abcdefghijk"}, ["name: 11 characters is too many; give at most 8 characters"]),
    ({"tags": ["a", "b", "c"]}, ["tags: 3 items is too many; give at most 2 items"]),
    ({"colour": "red"}, ["colour: unknown field"]),
    ({"chips": 0, "speed": -1.0}, ["chips: 0 is too small", "(also refused: speed)"]),
])
def test_one_sentence(body: dict, words: list[str]) -> None:
    msg = one(**body)
    for w in words:
        assert w in msg, msg
    assert "Input should" not in msg and "\n" not in msg


def test_a_union_of_names_is_one_error_with_every_name() -> None:
    errs = errors(kind="chip-fial")
    assert len(errs) == 2  # pydantic: one per member of the union
    out = first_refusal(errs, lambda e: str(e["loc"][0]))
    assert out.field == "kind" and out.allowed == ["chip-failure", "link-down", "kill-worker"]
    assert "did you mean 'chip-failure'?" in out.message and "more" not in out.message


def test_an_unknown_field_suggests_the_close_one() -> None:
    err = errors(chps=3)[0]
    out = refusal(err, "chps", allowed=["chips", "name", "speed"])
    assert out.message == "chps: unknown field; did you mean 'chips'? (fields: chips, name, speed)"


def test_suggest() -> None:
    assert suggest("lama3-8b", ["llama3-8b", "llama3-70b", "debug"]) == "llama3-8b"
    assert suggest("LLAMA3-8B", ["llama3-8b"]) == "llama3-8b"
    assert suggest("zzz", ["debug"]) is None
