"""What one JSON Schema says, keyword by keyword: the JSON types it allows, its numeric
bounds, the schemas it applies to a property or an array position, local ``$ref``
resolution, and which of its value keywords rejects a given value. Pure functions on parsed
JSON (dict or bool); ``sparklog.schemas.jsoncompat``'s compatibility rules are built on
them.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from typing import Any, TypeGuard
from urllib.parse import unquote

Node = dict[str, Any]
#: every JSON Schema type name
ALL_TYPES = frozenset({"null", "boolean", "object", "array", "string", "number", "integer"})
_KINDS = {bool: "boolean", int: "integer", str: "string", list: "array", dict: "object"}
_INERT = {"$ref", "$schema", "$id", "id", "$comment", "title", "description", "definitions"}
_INERT |= {"$defs", "default", "examples", "deprecated", "readOnly", "writeOnly"}


def as_dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def is_number(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, int | float) and not isinstance(x, bool)


def show(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False, default=str)


def escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def canonical(x: Any) -> str:
    """JSON equality key: 1 == 1.0, but true != 1."""
    if isinstance(x, list):
        return "[" + ",".join(canonical(i) for i in x) + "]"
    if isinstance(x, dict):
        return "{" + ",".join(f"{show(k)}:{canonical(v)}" for k, v in sorted(x.items())) + "}"
    return show(int(x) if isinstance(x, float) and x.is_integer() else x)


def value_type(v: Any) -> str:
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    return _KINDS.get(type(v), "null")


def types_of(d: Node) -> frozenset[str] | None:
    """The JSON types ``d`` allows (``number`` includes ``integer``), None: any."""
    t = d.get("type")
    if t is None:
        return None
    names = {t} if isinstance(t, str) else set(as_list(t))
    if not names <= ALL_TYPES:
        return None  # an unknown type name: the keyword is ignored
    return frozenset(names | ({"integer"} if "number" in names else set()))


def show_types(types: frozenset[str]) -> str:
    if types == ALL_TYPES:
        return "any"
    names = sorted(types - {"integer"} if "number" in types else types)
    return names[0] if len(names) == 1 else "[" + ", ".join(names) + "]"


def matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


def resolve(root: Any, ref: Any) -> tuple[bool, Any]:
    """A local ``$ref`` (``#`` or ``#/json/pointer``) in ``root``: (found, target)."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return False, None
    pointer = unquote(ref[1:])
    if not pointer:
        return True, root
    if not pointer.startswith("/"):
        return False, None  # a named anchor
    node = root
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def is_inert(d: Any, root: Any) -> bool:
    """Only annotations and a resolvable ``$ref``: it adds no constraint of its own."""
    return isinstance(d, dict) and d.keys() <= _INERT and resolve(root, d.get("$ref", "#"))[0]


def is_false(schema: Any, root: Any) -> bool:
    for _ in range(32):  # follows a chain of bare $refs, cycles included
        if not isinstance(schema, dict) or set(schema) != {"$ref"}:
            break
        found, schema = resolve(root, schema["$ref"])
        if not found:
            return False
    return schema is False


def limits(d: Node, lower: bool) -> list[tuple[float, bool, str]]:
    """(bound, exclusive, keyword) of ``d``'s lower or upper numeric bounds (draft 4 too)."""
    kw, ekw = ("minimum", "exclusiveMinimum") if lower else ("maximum", "exclusiveMaximum")
    out: list[tuple[float, bool, str]] = []
    if is_number(d.get(kw)):
        out.append((d[kw], d.get(ekw) is True, kw))
    if is_number(d.get(ekw)):
        out.append((d[ekw], True, ekw))
    return out


def tightness(v: float, exclusive: bool, lower: bool, integer: bool) -> tuple[float, bool]:
    """A key that grows as the bound gets tighter (integer data: exclusive bounds inclusive)."""
    if integer and exclusive:
        v, exclusive = (math.floor(v) + 1 if lower else math.ceil(v) - 1), False
    elif integer:
        v = math.ceil(v) if lower else math.floor(v)
    return (v if lower else -v, exclusive)


def divides(k: Any, w: Any) -> bool:
    """Is every multiple of ``w`` a multiple of ``k``?"""
    try:
        return Fraction(str(w)) % Fraction(str(k)) == 0
    except (ValueError, ZeroDivisionError):
        return False


def value_issue(d: Node, v: Any) -> str | None:
    """The keyword of ``d`` (enum, const, string and number keywords) that rejects ``v``."""
    if "const" in d and canonical(d["const"]) != canonical(v):
        return "const"
    if isinstance(d.get("enum"), list) and canonical(v) not in {canonical(x) for x in d["enum"]}:
        return "enum"
    if isinstance(v, str):
        if is_number(d.get("minLength")) and len(v) < d["minLength"]:
            return "minLength"
        if is_number(d.get("maxLength")) and len(v) > d["maxLength"]:
            return "maxLength"
        if isinstance(d.get("pattern"), str) and not matches(d["pattern"], v):
            return "pattern"
    if is_number(v):
        for lower in (True, False):
            for bound, exclusive, kw in limits(d, lower):
                if (v < bound if lower else v > bound) or (exclusive and v == bound):
                    return kw
        if (
            is_number(d.get("multipleOf"))
            and d["multipleOf"] > 0
            and not divides(d["multipleOf"], v)
        ):
            return "multipleOf"
    return None


def property_slots(ds: tuple[Any, ...], kind: str, name: str = "") -> list[Any]:
    """The schemas the conjuncts ``ds`` apply to a property: ``kind`` "name" (property
    ``name``), "pattern" (a name matching the regex ``name`` only), "other" (any other name)."""
    out: list[Any] = []
    for d in ds:
        props, pats = as_dict(d.get("properties")), as_dict(d.get("patternProperties"))
        found = [props[name]] if kind == "name" and name in props else []
        for p, s in pats.items():
            if (kind == "pattern" and p == name) or (kind == "name" and matches(p, name)):
                found.append(s)
        if not found and "additionalProperties" in d:
            found = [d["additionalProperties"]]
        out += found
    return out


def tuple_schemas(d: Node) -> tuple[list[Any], Any]:
    """(schemas of the first positions, schema of the rest or None) of an array schema."""
    if isinstance(d.get("prefixItems"), list):
        return d["prefixItems"], d.get("items")
    if isinstance(d.get("items"), list):
        return d["items"], d.get("additionalItems")
    return [], d.get("items")


def item_slots(ds: tuple[Any, ...], index: int | None) -> list[Any]:
    """The schemas the conjuncts ``ds`` apply at an array position (None: past the tuples)."""
    pairs = [tuple_schemas(d) for d in ds]
    return [
        pre[index] if index is not None and index < len(pre) else rest
        for pre, rest in pairs
        if (index is not None and index < len(pre)) or rest is not None
    ]
