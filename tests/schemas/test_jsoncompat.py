"""JSON Schema compatibility (sparklog.schemas.jsoncompat): each rule of its docstring, both
ways. ``incompatibilities(reader, writer)``: BACKWARD is (new, old), FORWARD (old, new)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from sparklog.schemas.jsoncompat import incompatibilities


def ok(reader: Any, writer: Any) -> None:
    assert incompatibilities(reader, writer) == []


def bad(reader: Any, writer: Any, *fragments: str) -> list[str]:
    found = incompatibilities(reader, writer)
    assert found, "expected an incompatibility"
    for fragment in fragments:
        assert any(fragment in m for m in found), (fragment, found)
    return found


def obj(closed: bool = False, required: list[str] | None = None, **props: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if closed:
        out["additionalProperties"] = False
    if required:
        out["required"] = required
    return out


STR: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
NUM: dict[str, Any] = {"type": "number"}


# -- type ------------------------------------------------------------------------------------


def test_same_schema_is_compatible() -> None:
    ok(obj(a=STR, b=INT), obj(a=STR, b=INT))


def test_type_changed_is_incompatible_and_names_the_path() -> None:
    assert incompatibilities(obj(age=INT), obj(age=STR)) == [
        "#/properties/age: type changed from string to integer"
    ]


def test_integer_to_number_is_a_compatible_widening() -> None:
    ok(NUM, INT)


def test_number_to_integer_is_a_narrowing() -> None:
    assert incompatibilities(INT, NUM) == ["#: type narrowed from number to integer"]


def test_type_array_extended_is_compatible() -> None:
    ok({"type": ["string", "null"]}, STR)


def test_type_array_narrowed_is_incompatible() -> None:
    bad(STR, {"type": ["string", "null"]}, "type narrowed from [null, string] to string")


def test_type_removed_is_compatible() -> None:
    ok({}, STR)


def test_type_added_to_an_unconstrained_writer_is_incompatible() -> None:
    bad(STR, {}, "type narrowed from any to string")


# -- objects -----------------------------------------------------------------------------------


def test_property_added_to_open_content_model_is_incompatible() -> None:
    assert incompatibilities(obj(a=STR, b=STR), obj(a=STR)) == [
        "#/properties/b: property added to open content model: the writer allowed any value"
    ]


def test_property_with_empty_schema_added_to_open_content_model_is_compatible() -> None:
    ok(obj(a=STR, b={}), obj(a=STR))


def test_property_added_to_closed_content_model_is_compatible() -> None:
    ok(obj(a=STR, b=INT), obj(closed=True, a=STR))


def test_property_added_covered_by_writer_additional_properties_schema() -> None:
    writer = {**obj(a=STR), "additionalProperties": STR}
    ok(obj(a=STR, b={"type": ["string", "null"]}), writer)
    bad(obj(a=STR, b=INT), writer, "#/properties/b: type changed from string to integer")


def test_property_removed_from_open_content_model_is_compatible() -> None:
    ok(obj(a=STR), obj(a=STR, b=INT))


def test_property_removed_from_closed_content_model_is_incompatible() -> None:
    bad(
        obj(closed=True, a=STR), obj(closed=True, a=STR, b=INT),
        "#/properties/b: property removed from closed content model",
    )  # fmt: skip


def test_property_removed_checked_against_reader_additional_properties_schema() -> None:
    ok({**obj(a=STR), "additionalProperties": NUM}, obj(closed=True, a=STR, b=INT))
    bad(
        {**obj(a=STR), "additionalProperties": STR},
        obj(closed=True, a=STR, b=INT),
        "#/properties/b",
    )


def test_property_false_in_reader_is_incompatible() -> None:
    bad(obj(a=STR, b=False), obj(a=STR, b=INT), "#/properties/b: property removed from closed")


def test_required_property_added_is_incompatible() -> None:
    assert incompatibilities(obj(required=["a"], a=STR), obj(a=STR)) == [
        "#/properties/a: property became required"
    ]


def test_required_property_with_default_added_is_compatible() -> None:
    ok(obj(required=["a"], a={**STR, "default": ""}), obj(a=STR))


def test_new_required_property_is_incompatible() -> None:
    bad(
        obj(closed=True, required=["b"], a=STR, b=STR),
        obj(closed=True, a=STR),
        "required property added",
    )


def test_required_property_with_default_behind_a_ref_is_compatible() -> None:
    reader = with_defs(obj(required=["a"], a={"$ref": "#/definitions/A"}), A={**STR, "default": ""})
    ok(reader, obj(a=STR))


def test_required_property_removed_is_compatible() -> None:
    ok(obj(a=STR), obj(required=["a"], a=STR))


def test_nested_property_change_names_the_nested_path() -> None:
    reader = obj(address=obj(zip=INT))
    writer = obj(address=obj(zip=STR))
    assert incompatibilities(reader, writer) == [
        "#/properties/address/properties/zip: type changed from string to integer"
    ]


def test_property_names_are_escaped_in_the_pointer() -> None:
    def one(schema: Any) -> dict[str, Any]:
        return {"type": "object", "properties": {"a/b": schema}}

    bad(one(INT), one(STR), "#/properties/a~1b: type changed")


def test_additional_properties_false_added_is_incompatible() -> None:
    bad(
        obj(closed=True, a=STR),
        obj(a=STR),
        "#/additionalProperties: additional properties removed from closed content model",
    )


def test_additional_properties_false_removed_is_compatible() -> None:
    ok(obj(a=STR), obj(closed=True, a=STR))


def test_additional_properties_schema_narrowed_is_incompatible() -> None:
    bad(
        {**obj(a=STR), "additionalProperties": STR},
        obj(a=STR),
        "#/additionalProperties: additionalProperties schema added to open content model",
    )
    bad(
        {"type": "object", "additionalProperties": INT},
        {"type": "object", "additionalProperties": NUM},
    )


def test_additional_properties_schema_extended_is_compatible() -> None:
    ok(
        {"type": "object", "additionalProperties": NUM},
        {"type": "object", "additionalProperties": INT},
    )
    ok({"type": "object"}, {"type": "object", "additionalProperties": INT})


def test_pattern_properties_compared_per_pattern() -> None:
    def pats(schema: Any) -> dict[str, Any]:
        return {"type": "object", "patternProperties": {"^x-": schema}}

    ok(pats(NUM), pats(INT))
    bad(pats(INT), pats(NUM), "#/patternProperties/^x-: type narrowed")
    bad(
        pats(INT),
        {"type": "object"},
        "#/patternProperties/^x-: pattern property added to open content model",
    )


def test_min_and_max_properties() -> None:
    ok({"type": "object", "minProperties": 1}, {"type": "object", "minProperties": 2})
    bad({"type": "object", "minProperties": 2}, {"type": "object"}, "minProperties added: 2")
    ok({"type": "object", "maxProperties": 5}, {"type": "object", "maxProperties": 3})
    bad({"type": "object", "maxProperties": 3}, {"type": "object", "maxProperties": 5},
        "maxProperties decreased from 5 to 3")  # fmt: skip


def test_dependent_required_added_is_incompatible_and_removed_is_compatible() -> None:
    dep = {**obj(a=STR, b=STR), "dependentRequired": {"a": ["b"]}}
    bad(dep, obj(a=STR, b=STR), "#/dependentRequired/a: dependency added")
    ok(obj(a=STR, b=STR), dep)
    ok(dep, {**obj(a=STR, b=STR), "dependencies": {"a": ["b"]}})


def test_dependent_schemas_compared() -> None:
    dep = {**obj(a=STR, b=STR), "dependentSchemas": {"a": {"required": ["b"]}}}
    bad(dep, obj(a=STR, b=STR), "#/dependentSchemas/a/properties/b")
    ok(dep, {**obj(a=STR, b=STR), "required": ["b"]})


# -- arrays ------------------------------------------------------------------------------------


def arr(items: Any = None, **kw: Any) -> dict[str, Any]:
    return {"type": "array", **({"items": items} if items is not None else {}), **kw}


def test_items_changed_is_incompatible() -> None:
    assert incompatibilities(arr(INT), arr(STR)) == ["#/items: type changed from string to integer"]


def test_items_widened_is_compatible() -> None:
    ok(arr(NUM), arr(INT))


def test_items_added_where_writer_had_none_is_incompatible() -> None:
    bad(arr(INT), arr(), "#/items: items schema added to open content model")
    ok(arr({}), arr())


def test_tuple_items_compared_per_position() -> None:
    ok(arr([STR, NUM]), arr([STR, INT]))
    bad(arr([STR, INT]), arr([STR, NUM]), "#/items/1: type narrowed from number to integer")


def test_prefix_items_compared_per_position() -> None:
    bad({"prefixItems": [STR, INT]}, {"prefixItems": [STR, STR]}, "#/prefixItems/1: type changed")
    ok({"prefixItems": [STR, {}]}, {"prefixItems": [STR]})


def test_tuple_position_added_to_open_writer_is_incompatible() -> None:
    bad(arr([STR, INT]), arr([STR]), "#/items/1: item added to open content model")


def test_tuple_position_added_to_closed_writer_is_compatible() -> None:
    ok(arr([STR, INT]), arr([STR], additionalItems=False))
    ok({"prefixItems": [STR, INT]}, {"prefixItems": [STR], "items": False})


def test_tuple_position_removed_from_closed_reader_is_incompatible() -> None:
    bad(arr([STR], additionalItems=False), arr([STR, INT]), "#/items/1: item removed from closed")
    ok(arr([STR]), arr([STR, INT]))


def test_tuple_rest_closed_by_reader_is_incompatible() -> None:
    bad(
        arr([STR], additionalItems=False),
        arr([STR]),
        "#/additionalItems: additional items removed from closed content model",
    )


def test_max_items_bounds_the_positions_compared() -> None:
    ok(arr([STR], additionalItems=False), arr([STR, INT], maxItems=1))


def test_min_items_increased_is_incompatible_and_decreased_compatible() -> None:
    bad(arr(STR, minItems=2), arr(STR, minItems=1), "#: minItems increased from 1 to 2")
    ok(arr(STR, minItems=1), arr(STR, minItems=2))
    ok(arr(STR), arr(STR, minItems=2))


def test_max_items_decreased_is_incompatible_and_increased_compatible() -> None:
    bad(arr(STR, maxItems=2), arr(STR, maxItems=3), "#: maxItems decreased from 3 to 2")
    bad(arr(STR, maxItems=2), arr(STR), "maxItems added: 2")
    ok(arr(STR, maxItems=3), arr(STR, maxItems=2))


def test_unique_items_added_is_incompatible_and_removed_compatible() -> None:
    bad(arr(STR, uniqueItems=True), arr(STR), "uniqueItems added")
    ok(arr(STR), arr(STR, uniqueItems=True))


def test_contains_added_is_incompatible_and_removed_compatible() -> None:
    bad(arr(contains=STR), arr(), "contains added")
    ok(arr(), arr(contains=STR))
    ok(arr(contains={"type": ["string", "null"]}), arr(contains=STR))


# -- strings -----------------------------------------------------------------------------------


def test_max_length_decreased_is_incompatible() -> None:
    assert incompatibilities({**STR, "maxLength": 5}, {**STR, "maxLength": 10}) == [
        "#: maxLength decreased from 10 to 5"
    ]


def test_max_length_increased_or_removed_is_compatible() -> None:
    ok({**STR, "maxLength": 10}, {**STR, "maxLength": 5})
    ok(STR, {**STR, "maxLength": 5})


def test_max_length_added_is_incompatible() -> None:
    bad({**STR, "maxLength": 5}, STR, "maxLength added: 5")


def test_min_length_increased_is_incompatible_and_decreased_compatible() -> None:
    bad({**STR, "minLength": 3}, {**STR, "minLength": 1}, "minLength increased from 1 to 3")
    ok({**STR, "minLength": 1}, {**STR, "minLength": 3})
    ok({**STR, "minLength": 0}, STR)


def test_pattern_changed_is_incompatible() -> None:
    bad({**STR, "pattern": "^[a-z]+$"}, {**STR, "pattern": "^[a-z0-9]+$"}, "pattern changed from")
    bad({**STR, "pattern": "^a"}, STR, 'pattern added: "^a"')


def test_pattern_removed_or_kept_is_compatible() -> None:
    ok(STR, {**STR, "pattern": "^a"})
    ok({**STR, "pattern": "^a"}, {**STR, "pattern": "^a"})


def test_format_added_or_changed_is_incompatible_and_removed_compatible() -> None:
    bad({**STR, "format": "date-time"}, STR, 'format added: "date-time"')
    bad({**STR, "format": "date"}, {**STR, "format": "email"}, "format changed")
    ok(STR, {**STR, "format": "date"})


# -- numbers -----------------------------------------------------------------------------------


def test_minimum_increased_is_incompatible_and_decreased_compatible() -> None:
    bad({**NUM, "minimum": 5}, {**NUM, "minimum": 0}, "#: minimum increased from 0 to 5")
    bad({**NUM, "minimum": 5}, NUM, "minimum added: 5")
    ok({**NUM, "minimum": 0}, {**NUM, "minimum": 5})
    ok(NUM, {**NUM, "minimum": 5})


def test_maximum_decreased_is_incompatible_and_increased_compatible() -> None:
    bad({**NUM, "maximum": 5}, {**NUM, "maximum": 10}, "maximum decreased from 10 to 5")
    ok({**NUM, "maximum": 10}, {**NUM, "maximum": 5})


def test_exclusive_bounds() -> None:
    bad(
        {**NUM, "exclusiveMinimum": 2}, {**NUM, "exclusiveMinimum": 1}, "exclusiveMinimum increased"
    )
    ok({**NUM, "exclusiveMinimum": 1}, {**NUM, "exclusiveMinimum": 2})
    bad(
        {**NUM, "exclusiveMaximum": 1}, {**NUM, "exclusiveMaximum": 2}, "exclusiveMaximum decreased"
    )
    ok({**NUM, "exclusiveMaximum": 2}, {**NUM, "exclusiveMaximum": 1})


def test_minimum_made_exclusive_is_incompatible() -> None:
    bad(
        {**NUM, "exclusiveMinimum": 0},
        {**NUM, "minimum": 0},
        "stricter than the writer's minimum 0",
    )
    ok({**NUM, "minimum": 0}, {**NUM, "exclusiveMinimum": 0})


def test_integer_bounds_compare_as_integers() -> None:
    ok({**INT, "exclusiveMinimum": 0}, {**INT, "minimum": 1})
    ok({**INT, "exclusiveMaximum": 10}, {**INT, "maximum": 9})
    bad({**INT, "exclusiveMaximum": 10}, {**INT, "maximum": 10}, "exclusiveMaximum 10 is stricter")


def test_draft4_boolean_exclusive_minimum() -> None:
    bad({**NUM, "minimum": 0, "exclusiveMinimum": True}, {**NUM, "minimum": 0}, "minimum")
    ok({**NUM, "minimum": 0}, {**NUM, "minimum": 0, "exclusiveMinimum": True})


def test_multiple_of() -> None:
    bad({**NUM, "multipleOf": 2}, NUM, "multipleOf added: 2")
    bad({**INT, "multipleOf": 3}, {**INT, "multipleOf": 2}, "multipleOf changed from 2 to 3")
    ok({**INT, "multipleOf": 2}, {**INT, "multipleOf": 4})
    ok({**NUM, "multipleOf": 0.1}, {**NUM, "multipleOf": 0.3})
    ok(NUM, {**NUM, "multipleOf": 2})
    ok({**NUM, "multipleOf": 1}, INT)


# -- enum and const ----------------------------------------------------------------------------


def test_enum_narrowed_is_incompatible() -> None:
    assert incompatibilities({"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}) == [
        '#: enum narrowed: the reader does not accept "c"'
    ]


def test_enum_extended_or_removed_is_compatible() -> None:
    ok({"enum": ["a", "b", "c"]}, {"enum": ["a", "b"]})
    ok(STR, {"enum": ["a", "b"]})


def test_enum_added_is_incompatible() -> None:
    bad({"enum": ["a", "b"]}, STR, "enum added")


def test_enum_values_compare_as_json() -> None:
    ok({"enum": [1.0, "x"]}, {"enum": [1]})
    bad({"enum": [1]}, {"enum": [True]}, "enum narrowed")


def test_const_changed_is_incompatible_and_removed_compatible() -> None:
    bad({"const": "b"}, {"const": "a"}, 'const changed to "b"')
    bad({"const": "b"}, STR, "const added")
    ok(STR, {"const": "a"})
    ok({"enum": ["a", "b"]}, {"const": "a"})


def test_writer_enum_values_are_checked_against_reader_keywords() -> None:
    ok({**STR, "maxLength": 2}, {"enum": ["a", "bb"]})
    bad(
        {**STR, "maxLength": 1},
        {"enum": ["a", "bb"]},
        'maxLength 1 rejects the writer\'s value "bb"',
    )
    bad(INT, {"enum": [1, "x"]}, "type narrowed from [integer, string] to integer")


def test_boolean_writer_is_covered_by_a_full_enum() -> None:
    ok({"enum": [True, False]}, {"type": "boolean"})
    bad({"enum": [True]}, {"type": "boolean"}, "false")


# -- not ---------------------------------------------------------------------------------------


def test_not_added_is_incompatible_and_removed_compatible() -> None:
    bad({"not": {"const": "x"}}, STR, "not added")
    ok(STR, {**STR, "not": {"const": "x"}})


def test_not_kept_or_narrowed_is_compatible() -> None:
    ok({"not": {"const": "x"}}, {"not": {"enum": ["x", "y"]}})
    ok({"not": {"type": "null"}}, STR)


# -- anyOf / oneOf / allOf -----------------------------------------------------------------------


def test_reader_union_extended_is_compatible() -> None:
    ok({"oneOf": [STR, {"type": "null"}]}, STR)
    ok({"anyOf": [STR, INT, {"type": "null"}]}, {"anyOf": [STR, INT]})


def test_writer_union_branch_not_accepted_is_incompatible() -> None:
    bad(STR, {"oneOf": [STR, INT]}, "type changed from integer to string")


def test_union_narrowed_is_incompatible() -> None:
    bad(
        {"anyOf": [STR, {"type": "null"}]}, {"anyOf": [STR, INT]}, "no branch of the reader's anyOf"
    )


def test_union_members_are_matched_recursively() -> None:
    writer = {"oneOf": [obj(a=STR), {"type": "null"}]}
    ok({"oneOf": [{"type": "null"}, obj(a={"type": ["string", "integer"]})]}, writer)
    bad({"oneOf": [obj(a=INT), {"type": "null"}]}, writer,
        "closest: oneOf/0, #/properties/a: type changed from string to integer")  # fmt: skip


def test_union_is_compared_with_a_plain_type_list() -> None:
    ok({"type": ["string", "integer"]}, {"oneOf": [STR, INT]})
    ok({"anyOf": [STR, INT]}, {"type": "string"})


def test_singleton_union_is_its_member() -> None:
    ok({"anyOf": [STR]}, STR)
    bad({"oneOf": [INT]}, STR, "#: type changed from string to integer")


def test_one_of_to_any_of_is_compatible() -> None:
    ok({"anyOf": [STR, INT]}, {"oneOf": [STR, INT]})


def test_reader_all_of_member_added_is_incompatible() -> None:
    bad({"allOf": [STR, {"maxLength": 3}]}, {"allOf": [STR]}, "maxLength added: 3")


def test_reader_all_of_member_removed_is_compatible() -> None:
    ok({"allOf": [STR]}, {"allOf": [STR, {"maxLength": 3}]})


def test_writer_all_of_members_combine() -> None:
    ok({**STR, "maxLength": 10}, {"allOf": [STR, {"maxLength": 5}]})
    ok(obj(required=["a"], a=STR), {"allOf": [obj(a=STR), {"required": ["a"]}]})


def test_writer_all_of_closed_member_forbids_undeclared_properties() -> None:
    writer = {"allOf": [obj(closed=True, a=STR), {"properties": {"b": INT}}]}
    ok(obj(a=STR, b=STR), writer)  # b can never be present: the first member forbids it


def test_too_many_alternatives_are_reported() -> None:
    writer = {"allOf": [{"anyOf": [STR, {**STR, "maxLength": i}]} for i in range(9)]}
    assert "too complex" in bad(STR, writer)[0]


# -- $ref --------------------------------------------------------------------------------------


def with_defs(root: Any, key: str = "definitions", **defs: Any) -> dict[str, Any]:
    return {**root, key: defs}


def test_ref_to_definitions_is_resolved() -> None:
    reader = with_defs(obj(a={"$ref": "#/definitions/A"}), A=obj(x=INT))
    writer = with_defs(obj(a={"$ref": "#/definitions/A"}), A=obj(x=STR))
    bad(reader, writer, "#/properties/a/properties/x: type changed from string to integer")
    ok(reader, reader)


def test_ref_to_defs_is_resolved() -> None:
    reader = with_defs(obj(a={"$ref": "#/$defs/A"}), "$defs", A=NUM)
    writer = with_defs(obj(a={"$ref": "#/$defs/A"}), "$defs", A=INT)
    ok(reader, writer)
    bad(writer, reader, "#/properties/a: type narrowed")


def test_ref_is_compared_with_an_inline_schema() -> None:
    ok(obj(a=NUM), with_defs(obj(a={"$ref": "#/$defs/A"}), "$defs", A=INT))


def recursive(value: Any) -> dict[str, Any]:
    node = obj(value=value, next={"$ref": "#/definitions/node"})
    return with_defs({"$ref": "#/definitions/node"}, node=node)


def test_recursive_ref_terminates_and_is_compatible() -> None:
    ok(recursive(INT), recursive(INT))
    ok(recursive(NUM), recursive(INT))


def test_recursive_ref_change_is_found() -> None:
    assert incompatibilities(recursive(INT), recursive(STR)) == [
        "#/properties/value: type changed from string to integer"
    ]


def test_root_ref_cycle_terminates() -> None:
    tree = obj(children={"type": "array", "items": {"$ref": "#"}}, name=STR)
    ok(tree, tree)
    bad(obj(children={"type": "array", "items": {"$ref": "#"}}, name=INT), tree,
        "#/properties/name: type changed")  # fmt: skip


def test_mutual_ref_cycle_terminates() -> None:
    loop = with_defs({"$ref": "#/definitions/a"}, a={"$ref": "#/definitions/b"},
                     b={"$ref": "#/definitions/a"})  # fmt: skip
    ok(loop, STR)
    ok(STR, with_defs({"allOf": [{"$ref": "#/definitions/a"}, STR]}, a={"$ref": "#/definitions/a"}))


def test_unresolvable_ref_is_compatible_only_with_the_same_ref() -> None:
    ok({"$ref": "other.json"}, {"$ref": "other.json"})
    bad({"$ref": "other.json"}, {"$ref": "another.json"}, 'cannot resolve $ref "other.json"')


# -- true, {}, false ---------------------------------------------------------------------------


def test_reader_true_or_empty_accepts_everything() -> None:
    ok(True, obj(a=STR))
    ok({}, obj(a=STR))


def test_writer_false_has_nothing_to_read() -> None:
    ok(STR, False)


def test_reader_false_is_incompatible() -> None:
    bad(False, STR, "the reader's schema is false")
    ok(False, False)


def test_writer_true_makes_every_reader_constraint_new() -> None:
    bad(obj(a=STR), True, "type narrowed from any to object")
    ok({}, True)


# -- ignored keywords, directions ----------------------------------------------------------------


def test_annotations_and_unknown_keywords_are_ignored() -> None:
    reader = {**STR, "title": "new", "description": "d", "x-custom": 1, "examples": ["a"]}
    ok(reader, {**STR, "title": "old", "$comment": "c"})


def test_backward_and_forward_are_the_two_argument_orders() -> None:
    old, new = obj(closed=True, a=STR), obj(closed=True, a=STR, b=INT)  # an optional field added
    assert incompatibilities(new, old) == []  # BACKWARD: the new reader reads old data
    assert incompatibilities(old, new)  # FORWARD: the old reader rejects b


# -- every reported incompatibility has a witness ------------------------------------------------


@pytest.mark.parametrize(
    ("reader", "writer", "witness"),
    [
        (obj(age=INT), obj(age=STR), {"age": "x"}),
        (INT, NUM, 1.5),
        (obj(closed=True, a=STR), obj(a=STR), {"a": "x", "z": 1}),
        ({**STR, "maxLength": 5}, {**STR, "maxLength": 10}, "abcdefg"),
        (arr([STR], additionalItems=False), arr([STR, INT]), ["a", 1]),
        ({"oneOf": [obj(a=INT), {"type": "null"}]}, {"oneOf": [obj(a=STR), {"type": "null"}]},
         {"a": "x"}),
        (recursive(INT), recursive(STR), {"value": "x"}),
    ],
)  # fmt: skip
def test_incompatibility_has_a_witness_value(reader: Any, writer: Any, witness: Any) -> None:
    assert incompatibilities(reader, writer)
    assert jsonschema.Draft7Validator(writer).is_valid(witness)
    assert not jsonschema.Draft7Validator(reader).is_valid(witness)
