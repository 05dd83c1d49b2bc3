"""The base of the API's typed replies (``Reply``, ``PageBody``, ``Envelope``), shared by
both edges: the server declares them as its response models (``api/schemas`` re-exports
them, so ``/openapi.json`` describes exactly these) and ``PodfleetClient`` returns them.

A reply keeps every field the server sent (``extra="allow"``: a newer server's fields
reach an older client), and reads like the dict the SDK returned before, so
``job["state"]``, ``job.get("reason")`` and ``"plan" in job`` keep working beside
``job.state``; ``to_dict()`` is its JSON form (what ``--output json`` prints)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

# control/lifecycle.JobState's values (tests/api/test_presets.py checks they agree): the
# SDK stands above the wire, not on the engine.
JOB_STATE_NAMES = ("PENDING", "PLACING", "RUNNING", "CHECKPOINTING", "RECOVERING", "SUCCEEDED", "FAILED", "STOPPED")
JobStateName = Literal[JOB_STATE_NAMES]  # type: ignore[valid-type]


class Reply(BaseModel):
    """A reply's fields by attribute, and read as a mapping too (the SDK's dicts of before)."""

    model_config = ConfigDict(extra="allow")

    # The keys as the server sent them, in its order (``keep_order``): a model's fields come
    # in declaration order, so a reply rendered outside its model (DescribeClusterHardware's
    # snapshot) would otherwise print with its keys reordered.
    _sent: tuple[str, ...] = PrivateAttr(default=())

    def _fields(self) -> dict[str, Any]:
        # The fields it holds (a reply kept unvalidated may lack some) and the undeclared ones,
        # in the order the server sent them where it is known.
        fields = {**{k: v for k, v in self.__dict__.items() if k in type(self).model_fields}, **(self.model_extra or {})}
        if not self._sent:
            return fields
        return {**{k: fields[k] for k in self._sent if k in fields}, **fields}

    def __getitem__(self, key: str) -> Any:
        fields = self._fields()
        if key not in fields:
            raise KeyError(key)
        return fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._fields().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._fields()

    def keys(self) -> list[str]:
        return list(self._fields())

    def items(self) -> list[tuple[str, Any]]:
        return list(self._fields().items())

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # a mapping's keys, as the dict's were
        return iter(self._fields())

    def keep_order(self, data: Any) -> None:
        """Remember the order of ``data``'s keys (the JSON this reply was read from), and its
        nested replies theirs, for ``to_dict``, ``keys`` and ``items``."""
        if not isinstance(data, dict):
            return
        self._sent = tuple(data)
        for key in _nested_fields(type(self)):
            value, sent = self.__dict__.get(key), data.get(key)
            if isinstance(value, Reply):
                value.keep_order(sent)
            elif isinstance(value, list) and isinstance(sent, list):
                for item, item_sent in zip(value, sent, strict=False):
                    if isinstance(item, Reply):
                        item.keep_order(item_sent)

    def in_sent_order(self, dumped: dict[str, Any]) -> dict[str, Any]:
        """``dumped`` (this reply's JSON form) with its keys, and its nested replies', in the
        order the server sent them (``keep_order``); unchanged where they already are."""
        if self._sent:
            sent = [k for k in self._sent if k in dumped]
            if sent != list(dumped)[:len(sent)]:
                dumped = {**{k: dumped[k] for k in sent}, **dumped}
        for key in _nested_fields(type(self)):
            value, out = self.__dict__.get(key), dumped.get(key)
            if isinstance(value, Reply) and isinstance(out, dict):
                dumped[key] = value.in_sent_order(out)
            elif isinstance(value, list) and isinstance(out, list):
                dumped[key] = [v.in_sent_order(d) if isinstance(v, Reply) and isinstance(d, dict) else d
                               for v, d in zip(value, out, strict=False)]
        return dumped

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the server sent it: no defaults added for fields it left out,
        and its keys in the order it sent them."""
        return self.in_sent_order(self.model_dump(mode="json", exclude_unset=True))

    def __eq__(self, other: object) -> bool:
        # Equal to the dict it was read from, as the SDK's dicts were to their JSON.
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dicts it stands for


@cache
def _nested_fields(model: type[Reply]) -> tuple[str, ...]:
    """The fields of ``model`` that hold replies (``progress: Progress``, ``chips: list[ChipOut]``)."""
    def holds_reply(annotation: Any) -> bool:
        if isinstance(annotation, type) and issubclass(annotation, Reply):
            return True
        return any(holds_reply(a) for a in get_args(annotation))

    return tuple(name for name, f in model.model_fields.items() if holds_reply(f.annotation))


class PageBody(Reply):
    """A page of a list: ``next_token`` asks for the next one. ``nextToken`` repeats it for
    one release, for clients written against the camelCase spelling."""

    model_config = ConfigDict(extra="ignore")  # a page is its items and its token, nothing else

    next_token: str | None = None
    nextToken: str | None = Field(None, json_schema_extra={"deprecated": True},
                                  description="deprecated spelling of next_token; sent for one release")

    @model_validator(mode="before")
    @classmethod
    def _both_spellings(cls, data: Any) -> Any:
        if isinstance(data, dict) and "next_token" in data:
            return {**data, "nextToken": data["next_token"]}
        return data




class Envelope(Reply):
    """A reply that is its declared fields and nothing else: the server drops anything more
    its route returns (as the plain models these were did), so the schema says no more."""

    model_config = ConfigDict(extra="ignore")
