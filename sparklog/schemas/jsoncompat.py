"""JSON Schema compatibility: can a reader validate every value a writer's schema allows?

``incompatibilities(reader, writer)`` lists why a value valid under ``writer`` might be
rejected by ``reader`` (empty: compatible). The registry calls ``(new, old)`` for BACKWARD,
``(old, new)`` for FORWARD and both for FULL. The rules follow Confluent Schema Registry's
JSON Schema diff (``io.confluent.kafka.schemaregistry.json.diff``, whose ``Difference.Type``
names are in brackets): a constraint the reader adds or tightens is incompatible, one it removes
or loosens is compatible. "Open": no ``additionalProperties`` (or ``true``), "closed":
``additionalProperties: false``, "partly open": a schema there.

| change, writer → reader | ok? | why |
|---|---|---|
| ``type``: reader allows the same or more [TYPE_EXTENDED] | yes | old values still fit |
| ``type`` narrowed, changed or added [TYPE_NARROWED, TYPE_CHANGED] | no | some values go |
| ``integer`` → ``number`` | yes | every integer is a number |
| ``number`` → ``integer`` [TYPE_NARROWED] | no | 1.5 is rejected |
| property added, writer open [PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL] | no (``{}``: yes) | (1) |
| property added, writer closed [OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL] | yes | unsent |
| property added, writer partly open [PROPERTY_ADDED_IS_COVERED_BY_...] | compared | |
| property removed, reader open [PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL] | yes | accepted |
| property removed, reader closed [PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL] | no | rejected |
| property removed, reader partly open | compared with its schema | |
| property in both | schemas compared recursively | |
| ``required`` name added [REQUIRED_ATTRIBUTE_ADDED, ...] | no | removed: yes |
| ``required`` name added with a ``default`` in the reader [..._WITH_DEFAULT_...] | yes | (2) |
| ``additionalProperties: false`` added [ADDITIONAL_PROPERTIES_REMOVED] | no | extras rejected |
| ``additionalProperties`` schema added/tightened [..._NARROWED] | no | removed/loosened: yes |
| ``patternProperties`` (matched by regex text) | like properties | |
| ``dependentRequired``/``dependentSchemas``/``dependencies`` added, grown | no | removed: yes |
| ``items`` schema, or tuple (``items`` list, ``prefixItems``) positions | compared recursively | |
| tuple position/rest closed by reader [ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL] | no | rejected |
| tuple position or ``items`` added, writer open [ITEM_ADDED_TO_OPEN_CONTENT_MODEL] | no | (1) |
| ``minLength``/``minItems``/``minProperties`` raised/added [MIN_*_INCREASED] | no | lowered: yes |
| ``maxLength``/``maxItems``/``maxProperties`` lowered/added [MAX_*_DECREASED] | no | raised: yes |
| ``uniqueItems: true`` added [UNIQUE_ITEMS_ADDED] | no | removed: yes |
| ``contains`` added, or not implied by the writer's | no | removed: yes |
| ``pattern`` added or changed (regex text) [PATTERN_ADDED, _CHANGED] | no | removed: yes |
| ``format`` added or changed | no | removed: yes (3) |
| ``minimum``/``exclusiveMinimum`` raised or added [MINIMUM_INCREASED, ...] | no | lowered: yes |
| ``maximum``/``exclusiveMaximum`` lowered or added [MAXIMUM_DECREASED, ...] | no | raised: yes |
| ``multipleOf`` added, or not dividing the writer's (2 → 3) [MULTIPLE_OF_CHANGED] | no | |
| ``multipleOf`` removed or a divisor of the writer's (4 → 2) [MULTIPLE_OF_REDUCED] | yes | |
| ``enum``/``const`` narrowed, changed or added [ENUM_ARRAY_NARROWED, _CHANGED] | no | (4) |
| ``not`` added, or not covered by the writer's ``not`` | no | removed: yes |
| reader ``anyOf``/``oneOf`` [SUM_TYPE_EXTENDED] | yes if a branch accepts | (5) |
| writer ``anyOf``/``oneOf`` | each branch must be accepted | dropped: no |
| reader ``allOf`` [PRODUCT_TYPE_EXTENDED] | each member must accept | |
| writer ``allOf`` [PRODUCT_TYPE_NARROWED] | members combined | (6) |
| ``$ref`` to ``#``, ``#/definitions/..``, ``#/$defs/..`` (any local pointer) | resolved | (7) |
| ``$ref`` not resolvable (another document, an anchor) | yes only if the same ``$ref`` | |
| reader ``true``/``{}``, or writer ``false`` | yes | nothing is rejected |
| reader ``false`` | no | rejects everything |
| writer ``true``/``{}`` | each reader constraint counts as added | |
| annotations, unknown keywords | yes | ignored |

(1) The writer allowed any value there; a reader schema ``{}``/``true`` is still compatible.
(2) Confluent's rule: the reader fills the default in. (3) ``format`` is treated as a
constraint, though validators may only annotate with it. (4) Extended or removed: yes. The
writer's possible values (its ``enum``/``const``, filtered by its other keywords; or null and
booleans) are checked one by one against the reader's enum, const, string and number keywords;
object and array values are not inspected (conservative: the writer counts as open there).
(5) The writer is expanded into alternatives (one per anyOf/oneOf branch, with its other
keywords and ``allOf`` members); each must be accepted by some branch of every reader
anyOf/oneOf (``oneOf`` exclusivity is not checked); over 256 alternatives: "too complex".
(6) A reader keyword holds if one member implies it (tightest bound, union of ``required``,
intersection of types). (7) A pair already under comparison (a ``$ref`` cycle) counts as
compatible where it recurs; keywords next to a ``$ref`` apply too (2019-09).

Messages name the logical JSON pointer of the value's schema (``#/properties/a/items``),
whichever combinator it sits in. Ignored keywords include ``if``/``then``/``else``,
``propertyNames``, ``unevaluated*``, ``minContains``/``maxContains``, ``content*`` and
annotations (``title``, ``description``, ``default``, ``examples``): changing them never makes
schemas incompatible.
"""

from __future__ import annotations

import math
from typing import Any

from sparklog.errors import SchemasTooComplexError
from sparklog.schemas.jsonkeywords import (
    ALL_TYPES,
    Node,
    as_dict,
    as_list,
    canonical,
    divides,
    escape,
    is_false,
    is_inert,
    is_number,
    item_slots,
    limits,
    property_slots,
    resolve,
    show,
    show_types,
    tightness,
    tuple_schemas,
    types_of,
    value_issue,
    value_type,
)

Issue = tuple[str, str]  # (JSON pointer relative to the compared schema, message)
_MAX_ALTERNATIVES = 256
_DEP_KWS = ("dependencies", "dependentRequired", "dependentSchemas")


def incompatibilities(reader: Any, writer: Any) -> list[str]:
    """Why data valid under the JSON Schema ``writer`` might not be valid under ``reader``
    (empty: compatible). Both are parsed JSON (dict or bool)."""
    try:
        issues = _Checker(reader, writer).cmp(reader, (writer,))
    except (SchemasTooComplexError, RecursionError):  # over _MAX_ALTERNATIVES, or nested too deep
        return ["#: the schemas are too complex to compare (anyOf/oneOf alternatives, nesting)"]
    return [f"#{path}: {message}" for path, message in issues]


def _under(path: str, issues: list[Issue]) -> list[Issue]:
    return [(path + p, m) for p, m in issues]


class _Checker:
    """Compares reader schemas (resolved in ``rroot``) with conjunctions of writer schemas
    (resolved in ``wroot``). A writer is expanded into alternatives: tuples of schema objects
    whose own keywords all hold (their combinators and ``$ref`` already unfolded)."""

    def __init__(self, rroot: Any, wroot: Any) -> None:
        self.rroot, self.wroot = rroot, wroot
        self.memo: dict[tuple[int, frozenset[int]], list[Issue]] = {}
        self.active: set[tuple[int, frozenset[int]]] = set()
        self.cycles = 0

    def cmp(self, r: Any, ws: tuple[Any, ...]) -> list[Issue]:
        """Does ``r`` accept every value valid under all of ``ws``?"""
        out: list[Issue] = []
        for wa in self.expand(ws):
            out += self.cmp_alt(r, wa)
        return list(dict.fromkeys(out))

    def expand(self, ws: tuple[Any, ...]) -> list[tuple[Node, ...]]:
        alts: list[tuple[Node, ...]] = [()]
        for w in ws:
            alts = self._product(alts, self._expand(w, frozenset()))
        return [tuple({id(d): d for d in alt}.values()) for alt in alts]

    def _expand(self, w: Any, stack: frozenset[int]) -> list[tuple[Node, ...]]:
        if w is False:
            return []
        if not isinstance(w, dict) or id(w) in stack:
            return [()]
        stack |= {id(w)}
        alts: list[tuple[Node, ...]] = [(w,)]
        if "$ref" in w:
            found, target = resolve(self.wroot, w["$ref"])
            if found:
                alts = self._product(alts, self._expand(target, stack))
        for member in as_list(w.get("allOf")):
            alts = self._product(alts, self._expand(member, stack))
        for kw in ("anyOf", "oneOf"):
            if isinstance(w.get(kw), list):
                branches = [alt for b in w[kw] for alt in self._expand(b, stack)]
                alts = self._product(alts, branches)
        return alts

    @staticmethod
    def _product(a: list[tuple[Node, ...]], b: list[tuple[Node, ...]]) -> list[tuple[Node, ...]]:
        if len(a) * len(b) > _MAX_ALTERNATIVES:
            raise SchemasTooComplexError
        return [x + y for x in a for y in b]

    def cmp_alt(self, r: Any, wa: tuple[Node, ...]) -> list[Issue]:
        """Does ``r`` accept every value valid under all of the conjuncts ``wa``?"""
        for _ in range(32):  # {"$ref": ...} alone: compare its target (catches cycles sooner)
            if not (is_inert(r, self.rroot) and "$ref" in r):
                break
            r = resolve(self.rroot, r["$ref"])[1]
        key = (id(r), frozenset(id(d) for d in wa if not is_inert(d, self.wroot)))
        if key in self.memo:
            return self.memo[key]
        if key in self.active:  # a $ref cycle: assume compatible (checked on the way in)
            self.cycles += 1
            return []
        self.active.add(key)
        cycles = self.cycles
        try:
            out = list(dict.fromkeys(self._cmp_alt(r, wa)))
        finally:
            self.active.discard(key)
        if self.cycles == cycles:  # a result cut short by a cycle holds only in its context
            self.memo[key] = out
        return out

    def _cmp_alt(self, r: Any, wa: tuple[Node, ...]) -> list[Issue]:
        if r is True or not (isinstance(r, dict) or r is False):
            return []
        wtypes, values = self._domain(wa)
        if not wtypes:
            return []  # the writer's constraints contradict each other: no data
        if r is False:
            return [("", "the reader's schema is false: it rejects everything the writer allows")]
        out = self._core(r, wa, wtypes, values)
        if "$ref" in r:
            found, target = resolve(self.rroot, r["$ref"])
            if found:
                out += self.cmp_alt(target, wa)
            elif not any(d.get("$ref") == r["$ref"] for d in wa):
                out.append(("", f"cannot resolve $ref {show(r['$ref'])}"))
        for member in as_list(r.get("allOf")):
            out += self.cmp_alt(member, wa)
        for kw in ("anyOf", "oneOf"):
            results = [self.cmp_alt(b, wa) for b in as_list(r.get(kw))]
            if not results or not all(results):
                continue  # no such keyword, or a branch accepts the writer's data
            if len(results) == 1:
                out += results[0]
                continue
            i = min(range(len(results)), key=lambda j: len(results[j]))
            path, message = results[i][0]
            out.append(
                (
                    "",
                    f"no branch of the reader's {kw} accepts all the writer's data "
                    f"(closest: {kw}/{i}, #{path}: {message})",
                )
            )
        return out

    def _domain(self, wa: tuple[Node, ...]) -> tuple[frozenset[str], list[Any] | None]:
        """The writer's possible types and, when finite, its possible values."""
        types = ALL_TYPES
        values: list[Any] | None = None
        for d in wa:
            t = types_of(d)
            if t is not None:
                types &= t
            if "const" in d or isinstance(d.get("enum"), list):
                vs = [d["const"]] if "const" in d else d["enum"]
                keys = {canonical(v) for v in vs}
                values = vs if values is None else [v for v in values if canonical(v) in keys]
        if values is None and types and types <= {"null", "boolean"}:
            values = [v for v in (None, True, False) if value_type(v) in types]
        if values is not None:
            values = [v for v in values if all(value_issue(d, v) is None for d in wa)]
            values = [v for v in values if value_type(v) in types]
            types = frozenset(value_type(v) for v in values)
        return types, values

    def _core(
        self, c: Node, wa: tuple[Node, ...], wtypes: frozenset[str], values: list[Any] | None
    ) -> list[Issue]:
        """The keywords of the reader schema object ``c`` itself (not its combinators)."""
        out: list[Issue] = []
        rtypes = types_of(c)
        live = wtypes if rtypes is None else wtypes & rtypes
        if rtypes is not None and not wtypes <= rtypes:
            verb = "narrowed" if live else "changed"
            out.append(("", f"type {verb} from {show_types(wtypes)} to {show_types(rtypes)}"))
        if values is not None:
            rejected: dict[str, list[Any]] = {}
            for v in values:
                kw = value_issue(c, v) if value_type(v) in live else None
                if kw:
                    rejected.setdefault(kw, []).append(v)
            for kw, vs in rejected.items():
                shown = ", ".join(show(v) for v in vs)
                if kw == "enum":
                    out.append(("", f"enum narrowed: the reader does not accept {shown}"))
                elif kw == "const":
                    out.append(("", f"const changed to {show(c['const'])}: rejects {shown}"))
                else:
                    out.append(("", f"{kw} {show(c[kw])} rejects the writer's value {shown}"))
        else:
            if "const" in c:
                out.append(("", f"const added: the reader only accepts {show(c['const'])}"))
            elif isinstance(c.get("enum"), list):
                out.append(("", f"enum added: the reader only accepts {show(c['enum'])}"))
            if "string" in live:
                out += self._string(c, wa)
            if live & {"number", "integer"}:
                out += self._number(c, wa, integer=not live & {"number"})
        if "object" in live:
            out += self._object(c, wa)
        if "array" in live:
            out += self._array(c, wa)
        if "not" in c:
            out += self._not(c["not"], wa, live)
        return out

    def _string(self, c: Node, wa: tuple[Node, ...]) -> list[Issue]:
        out = self._counts(c, wa, "minLength", "maxLength")
        for kw in ("pattern", "format"):
            if isinstance(c.get(kw), str):
                theirs = [d[kw] for d in wa if isinstance(d.get(kw), str)]
                if c[kw] not in theirs:
                    was = f"changed from {show(theirs[0])} to" if theirs else "added:"
                    out.append(("", f"{kw} {was} {show(c[kw])}"))
        return out

    def _number(self, c: Node, wa: tuple[Node, ...], integer: bool) -> list[Issue]:
        out: list[Issue] = []
        for lower in (True, False):
            theirs = [b for d in wa for b in limits(d, lower)]
            best = max(theirs, key=lambda b: tightness(b[0], b[1], lower, integer), default=None)
            for bound, exclusive, kw in limits(c, lower):
                need = tightness(bound, exclusive, lower, integer)
                if best is not None and tightness(best[0], best[1], lower, integer) >= need:
                    continue
                if best is None:
                    out.append(("", f"{kw} added: {show(bound)}"))
                elif best[2] == kw:
                    verb = "increased" if lower else "decreased"
                    out.append(("", f"{kw} {verb} from {show(best[0])} to {show(bound)}"))
                else:
                    out.append(
                        (
                            "",
                            f"{kw} {show(bound)} is stricter than the writer's "
                            f"{best[2]} {show(best[0])}",
                        )
                    )
        k = c.get("multipleOf")
        if is_number(k) and k > 0:
            theirs = [d["multipleOf"] for d in wa if is_number(d.get("multipleOf"))]
            if not any(divides(k, w) for w in [*theirs, *([1] if integer else [])]):
                was = f"changed from {show(theirs[0])} to" if theirs else "added:"
                out.append(("", f"multipleOf {was} {show(k)}"))
        return out

    def _counts(self, c: Node, wa: tuple[Node, ...], low: str, high: str) -> list[Issue]:
        """Integer lower (default 0) and upper (default none) bounds: lengths, sizes."""
        out: list[Issue] = []
        for kw, sign in ((low, 1), (high, -1)):
            mine, theirs = c.get(kw), [sign * d[kw] for d in wa if is_number(d.get(kw))]
            if is_number(mine) and max(theirs, default=0 if sign > 0 else -math.inf) < sign * mine:
                verb = "increased" if sign > 0 else "decreased"
                change = f"{verb} from {show(sign * max(theirs))} to" if theirs else "added:"
                out.append(("", f"{kw} {change} {show(mine)}"))
        return out

    def _slot(
        self, path: str, rs: list[Any], ws: list[Any], what: str, new: str = ""
    ) -> list[Issue]:
        """Reader schemas ``rs`` against writer schemas ``ws`` (all apply) for one place."""
        if not rs or any(is_false(s, self.wroot) for s in ws):
            return []  # the reader is open there, or the writer never has a value there
        if any(is_false(s, self.rroot) for s in rs):
            return [(path, f"{what} removed from closed content model")]
        if not ws:
            opened = f"{new or what} added to open content model: the writer allowed any value"
            return [(path, opened)] if any(self.cmp(s, (True,)) for s in rs) else []
        return [i for s in rs for i in _under(path, self.cmp(s, tuple(ws)))]

    def _object(self, c: Node, wa: tuple[Node, ...]) -> list[Issue]:
        out: list[Issue] = []
        mine = as_dict(c.get("properties"))
        theirs = {p for d in wa for p in as_dict(d.get("properties"))}
        for p in dict.fromkeys([*mine, *sorted(theirs)]):
            rs, ws = property_slots((c,), "name", p), property_slots(wa, "name", p)
            out += self._slot(f"/properties/{escape(p)}", rs, ws, "property")
        patterns = [*as_dict(c.get("patternProperties"))]
        patterns += sorted({p for d in wa for p in as_dict(d.get("patternProperties"))})
        for pat in dict.fromkeys(patterns):
            rs, ws = property_slots((c,), "pattern", pat), property_slots(wa, "pattern", pat)
            out += self._slot(f"/patternProperties/{escape(pat)}", rs, ws, "pattern property")
        rs, ws = property_slots((c,), "other"), property_slots(wa, "other")
        out += self._slot(
            "/additionalProperties", rs, ws, "additional properties", "additionalProperties schema"
        )
        required = {p for d in wa for p in as_list(d.get("required"))}
        for p in as_list(c.get("required")):
            prop = as_dict(mine.get(p))
            target = as_dict(resolve(self.rroot, prop.get("$ref"))[1])
            if p in required or "default" in prop or "default" in target:
                continue  # Confluent's rule: a reader default fills a missing property in
            what = "property became required" if p in theirs else "required property added"
            out.append((f"/properties/{escape(p)}", what))
        out += self._counts(c, wa, "minProperties", "maxProperties")
        for kw in _DEP_KWS:
            for key, dep in as_dict(c.get(kw)).items():
                if any(is_false(s, self.wroot) for s in property_slots(wa, "name", key)):
                    continue  # the writer never has the property that triggers it
                theirs_deps = [as_dict(d.get(k)).get(key) for d in wa for k in _DEP_KWS]
                path = f"/{kw}/{escape(key)}"
                if isinstance(dep, list):
                    have = required.union(*[set(x) for x in theirs_deps if isinstance(x, list)])
                    missing = [n for n in dep if n not in have]
                    if missing:
                        out.append((path, f"dependency added: {key} requires {show(missing)}"))
                elif isinstance(dep, dict | bool):
                    extra = tuple(x for x in theirs_deps if isinstance(x, dict | bool))
                    for alt in self.expand(extra):
                        out += _under(path, self.cmp_alt(dep, wa + alt))
        return out

    def _array(self, c: Node, wa: tuple[Node, ...]) -> list[Issue]:
        out: list[Issue] = []
        positions = max([len(tuple_schemas(d)[0]) for d in (c, *wa)])
        most = min([d["maxItems"] for d in wa if is_number(d.get("maxItems"))], default=math.inf)
        word = "prefixItems" if "prefixItems" in c else "items"
        ended = False
        for i in range(positions):
            ws = item_slots(wa, i)
            if i >= most or any(is_false(s, self.wroot) for s in ws):
                ended = True  # the writer's arrays never reach position i
                break
            out += self._slot(f"/{word}/{i}", item_slots((c,), i), ws, "item")
        if not ended and positions < most:
            rest = "/additionalItems" if isinstance(c.get("items"), list) else "/items"
            rs, ws = item_slots((c,), None), item_slots(wa, None)
            closed = "additional items" if rest == "/additionalItems" else "items"
            out += self._slot(rest, rs, ws, closed, "items schema")
        out += self._counts(c, wa, "minItems", "maxItems")
        unique = any(d.get("uniqueItems") is True for d in wa)
        if c.get("uniqueItems") is True and most > 1 and not unique:
            out.append(("", "uniqueItems added"))
        if "contains" in c:
            theirs = [d["contains"] for d in wa if "contains" in d]
            if not any(not self.cmp(c["contains"], (w,)) for w in theirs):
                out.append(("", "contains changed" if theirs else "contains added"))
        return out

    def _not(self, n: Any, wa: tuple[Node, ...], live: frozenset[str]) -> list[Issue]:
        """The reader rejects values valid under ``n``: fine if the writer's own ``not``
        rejects at least those, or ``n`` only names types the writer never produces."""
        if isinstance(n, dict) and set(n) == {"type"} and not live & (types_of(n) or frozenset()):
            return []
        swapped = _Checker(self.wroot, self.rroot)  # is n (reader) inside the writer's not?
        theirs = [d["not"] for d in wa if "not" in d]
        if any(not swapped.cmp(w, (n,)) for w in theirs):
            return []
        return [("", f"not {'changed' if theirs else 'added'}: the reader rejects {show(n)}")]
