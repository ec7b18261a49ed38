"""Parsing schemas and their normal forms, so logically identical schemas share one id.

- **AVRO** is parsed by the Apache ``avro`` package. Named types a schema takes from its
  references are parsed first, into the same name space. The text the registry stores
  and serves is the schema re-serialised by ``avro`` (one attribute order, no white space,
  no unknown attribute lost), so two spellings of one schema (attribute order, spacing,
  ``"string"`` vs ``{"type": "string"}``) get one id. With references, the submitted
  JSON is kept (compacted), as its references must stay names; its identity is still the
  expanded form.
- **JSON** (JSON Schema) is checked against its meta-schema (``$schema``, else draft 7) by
  ``jsonschema``; the stored text is the compacted JSON, key order kept; the identity
  sorts keys.

``identity`` is what "the same schema" means: type, normal form and references.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.errors import InvalidSchemaError
from sparklog.schemas.model import AVRO, JSON, PROTOBUF, SCHEMA_TYPES, Reference


@dataclass(frozen=True)
class ParsedSchema:
    """A schema checked and normalised: ``parsed`` is an ``avro.schema.Schema`` (AVRO) or
    the JSON document (JSON)."""

    schema_type: str
    text: str
    parsed: Any
    references: tuple[Reference, ...]
    identity: tuple[str, str, tuple[Reference, ...]]


def _compact(obj: Any, *, sort_keys: bool = False) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=sort_keys, ensure_ascii=False)


def schema_type_of(raw: Any) -> str:
    """A request's ``schemaType`` (absent: AVRO), checked."""
    st = AVRO if raw in (None, "") else str(raw).upper()
    if st == PROTOBUF:
        raise InvalidSchemaError("PROTOBUF schemas are not served by this registry (AVRO, JSON)")
    if st not in SCHEMA_TYPES:
        raise InvalidSchemaError(f"unknown schemaType {raw!r}: one of {', '.join(SCHEMA_TYPES)}")
    return st


def parse(
    schema_type: str,
    text: str,
    references: Sequence[tuple[Reference, ParsedSchema]] = (),
) -> ParsedSchema:
    """Check ``text`` as a schema of ``schema_type``; ``references`` are its dependencies,
    already parsed, in the order they must be read (dependencies first)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("the schema is empty")
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidSchemaError(f"the schema is not valid JSON: {e}") from None
    refs = tuple(r for r, _ in references)
    if schema_type == AVRO:
        return _parse_avro(doc, refs, references)
    if schema_type == JSON:
        return _parse_json(doc, refs, references)
    raise InvalidSchemaError(f"unknown schema type {schema_type!r}")


def _parse_avro(
    doc: Any, refs: tuple[Reference, ...], references: Sequence[tuple[Reference, ParsedSchema]]
) -> ParsedSchema:
    import avro.errors
    import avro.schema
    from avro.name import Names

    names = Names()
    try:
        for _ref, dep in references:
            avro.schema.make_avsc_object(json.loads(dep.text), names)
        parsed = avro.schema.make_avsc_object(doc, names)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as e:
        raise InvalidSchemaError(f"Invalid schema: {e}") from None
    _check_avro_defaults(doc, references)
    expanded = parsed.to_json()
    text = _compact(doc) if refs else _compact(expanded)
    return ParsedSchema(AVRO, text, parsed, refs, (AVRO, _compact(expanded, sort_keys=True), refs))


def _check_avro_defaults(doc: Any, references: Sequence[tuple[Reference, ParsedSchema]]) -> None:
    """Refuse a default that is not a value of its field's type, as Confluent's registry
    does (the ``avro`` package does not check defaults; ``fastavro`` does)."""
    import fastavro
    import fastavro.schema

    named: dict[str, Any] = {}
    try:
        for _ref, dep in references:
            fastavro.parse_schema(json.loads(dep.text), named_schemas=named)
        fastavro.parse_schema(doc, named_schemas=named)
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as e:
        raise InvalidSchemaError(f"Invalid schema: {e}") from None


def _parse_json(
    doc: Any, refs: tuple[Reference, ...], references: Sequence[tuple[Reference, ParsedSchema]]
) -> ParsedSchema:
    import jsonschema
    import jsonschema.exceptions

    if not isinstance(doc, dict | bool):
        raise InvalidSchemaError("a JSON Schema is an object or a boolean")
    try:
        jsonschema.validators.validator_for(doc, default=jsonschema.Draft7Validator).check_schema(
            doc
        )
    except jsonschema.exceptions.SchemaError as e:
        raise InvalidSchemaError(f"Invalid schema: {e.message}") from None
    del references  # $refs to other subjects resolve by name when validating (codec)
    return ParsedSchema(JSON, _compact(doc), doc, refs, (JSON, _compact(doc, sort_keys=True), refs))
