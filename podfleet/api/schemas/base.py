"""What every wire payload shares: the request and response bases, bounds that several
nouns use, printable text, and the problem+json body."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    TypeAdapter,
    model_validator,
)
from pydantic.config import JsonDict, JsonValue
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from podfleet.api import wirecase
from podfleet.api.wirenames import OLD_NAME
from podfleet.control.specs import MAX_CLUSTER_CHIPS
from podfleet.perf.models import MODELS
from podfleet.sdk.models import Reply
from podfleet.security.text import printable_pattern, unprintable

PRESET_NAMES = tuple(sorted(MODELS))
PresetName = Literal[PRESET_NAMES]  # type: ignore[valid-type]
MAX_CHIPS = MAX_CLUSTER_CHIPS  # the most chips one cluster has (custom dims or chips): the absolute bound of an index
MAX_FLEET_CHIPS = 1024 * 64  # a fleet cluster: up to 1,024 pods of 64 chips (catalog.MAX_FLEET_PODS)
MAX_CHIP_INDEX = MAX_FLEET_CHIPS - 1
MAX_LINK_INDEX = 6 * MAX_FLEET_CHIPS - 1  # the most links: a 6-axis torus per pod
ClientToken = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$",
                    description="idempotency key: a retry with the same token returns the same object")

QUEUE_PATTERN = r"^[a-z0-9][a-z0-9-]*$"


def present(*fields: str) -> JsonDict:
    """JSON Schema: each of ``fields`` is given and not null (the server reads a null as absent)."""
    return {"required": list(fields), "properties": {f: {"not": {"type": "null"}} for f in fields}}


def keyed_schema(key: Any, value: Any) -> JsonDict:
    """The JSON schema of ``dict[key, value]`` for ``WithJsonSchema``: pydantic writes a
    key's pattern as patternProperties, which lets every other key through; propertyNames
    says each key matches, so a key the server refuses is one the schema refuses."""
    return {"type": "object", "propertyNames": TypeAdapter(key).json_schema(),
            "additionalProperties": TypeAdapter(value).json_schema()}


def _printable(value: str) -> str:
    bad = unprintable(value)
    if bad is not None:
        raise PydanticCustomError("unprintable", "contains {char}: names and commands are printable text (no "
                                  "control, bidirectional or other invisible characters)", {"char": bad})
    return value


class _Printable:
    """Free text an operator names something with (``security/text.py``): refused with a
    400 that names the character, and stated in the schema as a pattern, so a request
    the schema allows is never refused for it. (Fields with an ASCII pattern refuse such
    characters already.)"""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(_printable, handler(source))

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        out["pattern"] = printable_pattern()
        return out


Printable = _Printable()
# Lengths inside, so they are checked (and worded) as a string's before the characters are.
Name = Annotated[str, StringConstraints(min_length=1, max_length=63), Printable]
Command = Annotated[str, StringConstraints(min_length=1, max_length=1024), Printable]
Address = Annotated[str, StringConstraints(min_length=1, max_length=512), Printable]


def _has_int(annotation: Any) -> bool:
    """True when ``int`` is the annotation or one of its arguments (``int | None``, ``list[int]``...)."""
    return annotation is int or any(_has_int(a) for a in get_args(annotation))


def _integral(value: Any) -> Any:
    """JSON's 3.0 is the integer 3 (JSON Schema agrees); everything else is left to validation."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value


class RequestBody(BaseModel):
    """A request body: unknown fields and loose types are refused, so the server accepts
    exactly what the schema says (``false`` is not an integer and ``"1"`` is not a number)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _integers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        # A field's deprecated camelCase spelling is its field (api/wirecase.py).
        data = wirecase.renamed(data, fields.keys())
        return {k: _integral(v) if k in fields and _has_int(fields[k].annotation) else v for k, v in data.items()}

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        # The deprecated spellings are accepted, so the schema says so (deprecated: true,
        # the same constraints), and a generated client marks them.
        out = handler(schema)
        target = handler.resolve_ref_schema(out)
        props = target.get("properties", {})
        for new in [n for n in props if n in OLD_NAME]:
            old = OLD_NAME[new]
            props[old] = {**props[new], "deprecated": True,
                          "description": f"deprecated spelling of {new}; accepted for one release"}
        return out


def old_spellings(rules: list[JsonValue]) -> list[JsonValue]:
    """``rules`` (if/then over field names), then each rule that names a renamed field again
    with the deprecated spellings, so a request in the old spelling is held to the same."""
    def respell(node: JsonValue) -> JsonValue:
        if isinstance(node, dict):
            return {OLD_NAME.get(k, k): respell(v) for k, v in node.items()}
        if isinstance(node, list):
            return [OLD_NAME.get(v, v) if isinstance(v, str) else respell(v) for v in node]
        return node

    return [*rules, *(r for r in (respell(rule) for rule in rules) if r not in rules)]


# A reply: its model is the SDK's too (``podfleet.sdk.models``), so client and server share one shape.
ResponseBody = Reply


class Problem(BaseModel):
    type: str
    title: str
    status: int
    detail: str
    code: str
    field: str | None = None
    allowed: Any = None
