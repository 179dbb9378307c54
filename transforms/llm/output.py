"""What an LLM stage expects back: free `text`, one `choice` of a list, or `json` checked by a model.

A `json` output is validated against a pydantic model, named by a dotted "module:Class" path or built
from a field spec in the config (`fields: {goal: str, label: int}`), and its fields become typed Arrow
columns (str → string, int → int64, float → float64, bool → bool, list[str] → list<string>; anything
nested is stored as a JSON string). Extra keys and wrong types make a reply invalid (`strict`), and
the validation error is the text shown to the model when `on_invalid: retry`.
"""

from __future__ import annotations

import importlib
import json
import types
import typing
from typing import Annotated, Any, Literal, Union

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from transforms.llm.answers import AnswerError, extract_json, match_choice

FIELD_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float, "bool": bool, "list[str]": list[str],
                               "list[int]": list[int], "list[float]": list[float]}


class TextOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["text"] = "text"
    column: str = Field("llm_text", description="Column the reply goes to.")
    strip: bool = Field(True, description="Strip surrounding whitespace.")
    allow_empty: bool = Field(False, description="An empty reply is valid.")

    def parse(self, reply: str) -> Any:
        text = reply.strip() if self.strip else reply
        if not text.strip() and not self.allow_empty:
            raise AnswerError("the reply is empty")
        return text

    def arrow_fields(self) -> list[pa.Field]:
        return [pa.field(self.column, pa.string())]


class ChoiceOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["choice"] = "choice"
    column: str = Field("llm_choice", description="Column the chosen option goes to.")
    choices: list[str] | None = Field(None, description="The options; unset: the prompt file's `options`.")
    aliases: dict[str, list[str]] | None = Field(None, description="Other spellings per option; unset: the "
                                                 "prompt file's `aliases`.")

    def parse(self, reply: str, choices: list[str], aliases: dict[str, list[str]]) -> str:
        option = match_choice(reply, choices, aliases)
        if option is None:
            raise AnswerError(f"the reply is not one of {choices}")
        return option

    def arrow_fields(self) -> list[pa.Field]:
        return [pa.field(self.column, pa.string())]


class FieldSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["str", "int", "float", "bool", "list[str]", "list[int]", "list[float]"] = "str"
    description: str = ""
    required: bool = True
    choices: list[str] | None = Field(None, description="str fields: the allowed values.")


class JsonOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["json"] = "json"
    model: str | None = Field(None, description="A pydantic model as 'module:Class'.")
    fields: dict[str, FieldSpec | str] | None = Field(
        None, description="Or the model's fields here: name → type ('str', 'int', ...) or a FieldSpec.")
    items: bool = Field(False, description="The reply is a JSON list of such objects (or an object holding "
                        "one list); generation stages make one row per item.")
    prefix: str = Field("", description="Prepended to every field's column name.")
    strict: bool = Field(True, description="Wrong types are invalid ('3' is not an int); extra keys always are.")

    @model_validator(mode="after")
    def _one_source(self) -> JsonOutput:
        if (self.model is None) == (self.fields is None):
            raise ValueError("json output needs exactly one of `model` ('module:Class') or `fields`")
        self.pydantic_model()  # fail when the config is built, not at the first reply
        return self

    def pydantic_model(self) -> type[BaseModel]:
        return _model_from_path(self.model) if self.model else _model_from_fields(
            json.dumps({k: v if isinstance(v, str) else v.model_dump() for k, v in (self.fields or {}).items()}))

    def json_schema(self) -> dict[str, Any]:
        schema = self.pydantic_model().model_json_schema()
        if not self.items:
            return schema
        # A list of items is asked for as {"items": [...]}: OpenAI's structured outputs need an object
        # at the root, and `parse` accepts an object holding one list.
        defs = schema.pop("$defs", None)
        wrapper = {"type": "object", "properties": {"items": {"type": "array", "items": schema, "minItems": 1}},
                   "required": ["items"], "additionalProperties": False}
        return {**wrapper, "$defs": defs} if defs else wrapper

    def parse(self, reply: str) -> list[dict[str, Any]]:
        """The validated objects of a reply (one unless `items`); raises AnswerError saying what is wrong.

        With `items`, objects that fail validation come back as {"_invalid": error, "_raw": json} so a
        generation stage can keep the good items of a reply and record the bad ones."""
        value = extract_json(reply, expect=(list, dict) if self.items else dict)
        if not self.items:
            return [self.validate_one(value)]
        if isinstance(value, dict):
            lists = [v for v in value.values() if isinstance(v, list)]
            if len(lists) != 1:
                raise AnswerError("expected a JSON list of objects (or an object holding one list)")
            value = lists[0]
        if not value:
            raise AnswerError("the reply's JSON list is empty")
        out = []
        for item in value:
            try:
                out.append(self.validate_one(item))
            except AnswerError as err:
                out.append({"_invalid": str(err), "_raw": json.dumps(item, ensure_ascii=False)})
        return out

    def validate_one(self, value: Any) -> dict[str, Any]:
        model = self.pydantic_model()
        if not isinstance(value, dict):
            raise AnswerError(f"expected a JSON object, got a JSON {type(value).__name__}")
        known = {info.alias or name for name, info in model.model_fields.items()} | set(model.model_fields)
        extra = sorted(set(value) - known)
        if extra:  # also for user models that would ignore them: an unasked key means a confused reply
            raise AnswerError(f"the JSON has keys the schema does not allow: {extra}")
        try:
            obj = model.model_validate(value, strict=self.strict)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in err.errors())
            raise AnswerError(f"the JSON does not match the schema: {problems}") from None
        return obj.model_dump(mode="json")

    def arrow_fields(self) -> list[pa.Field]:
        model = self.pydantic_model()
        return [pa.field(self.prefix + name, arrow_type(info.annotation))
                for name, info in model.model_fields.items()]

    def columns(self, objects: list[dict[str, Any] | None]) -> dict[str, pa.Array]:
        """Typed columns from validated objects (None: a row without a valid object, all nulls)."""
        out = {}
        for f in self.arrow_fields():
            name = f.name[len(self.prefix):]
            values = [None if o is None else o.get(name) for o in objects]
            if pa.types.is_string(f.type):
                values = [v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                          for v in values]
            out[f.name] = pa.array(values, f.type)
        return out


OutputSpec = Annotated[Union[TextOutput, ChoiceOutput, JsonOutput], Field(discriminator="kind")]  # noqa: UP007


def arrow_type(annotation: Any) -> pa.DataType:
    """The Arrow type of a pydantic field; optional fields are nullable columns of the inner type."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return arrow_type(inner[0]) if len(inner) == 1 else pa.string()
    if origin is Literal:
        values = typing.get_args(annotation)
        return arrow_type(type(values[0])) if len({type(v) for v in values}) == 1 else pa.string()
    if origin is list:
        (inner,) = typing.get_args(annotation) or (str,)
        return pa.list_(arrow_type(inner))
    scalar = {str: pa.string(), bool: pa.bool_(), int: pa.int64(), float: pa.float64()}
    return scalar.get(annotation, pa.string())  # nested models, dicts: a JSON string


def _model_from_path(path: str) -> type[BaseModel]:
    module_name, _, cls_name = path.partition(":")
    if not cls_name:
        raise ValueError(f"json output model must be 'module:Class', got {path!r}")
    cls = getattr(importlib.import_module(module_name), cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise ValueError(f"{path!r} is not a pydantic model")
    return cls


_BUILT: dict[str, type[BaseModel]] = {}


def _model_from_fields(spec_json: str) -> type[BaseModel]:
    if spec_json not in _BUILT:
        spec = {k: FieldSpec(type=v) if isinstance(v, str) else FieldSpec(**v)
                for k, v in json.loads(spec_json).items()}
        defs: dict[str, Any] = {}
        for name, f in spec.items():
            tp: Any = Literal[tuple(f.choices)] if f.choices and f.type == "str" else FIELD_TYPES[f.type]
            default = ... if f.required else None
            defs[name] = (tp if f.required else tp | None, Field(default, description=f.description or None))
        _BUILT[spec_json] = create_model("LLMReply", __config__=ConfigDict(extra="forbid"), **defs)
    return _BUILT[spec_json]


def choose_from_logprobs(logprobs: list[list[float]], choices: list[str], temperature: float, seed: int | None,
                         salts: list[str]) -> list[str]:
    """Choice-constrained replies for engines without constrained decoding, from the options' scores:
    greedy (temperature 0) takes the best option; sampling draws from softmax(logprob / temperature)
    with a generator seeded by (seed, the prompt), so a reply does not depend on its batch."""
    import zlib

    import numpy as np

    out = []
    for row, salt in zip(logprobs, salts, strict=True):
        scores = np.asarray(row, dtype=np.float64)
        scores = np.where(np.isfinite(scores), scores, -np.inf)
        if temperature <= 0 or not np.isfinite(scores).any():
            out.append(choices[int(np.argmax(scores))])
            continue
        p = np.exp((scores - scores.max()) / temperature)
        rng = np.random.default_rng([seed or 0, zlib.crc32(salt.encode("utf-8"))])
        out.append(choices[int(rng.choice(len(choices), p=p / p.sum()))])
    return out
