"""The metadata filter language of ``POST /search`` and ``IndexReader.filter_ids``.

``{"field": value}`` (equality), ``{"field": {"in": [...]}}`` (one of several values), and
``{"field": {"gte"|"gt"|"lte"|"lt": bound, ...}}`` (a range; numbers compare with numbers, strings
with strings). A field is a key of a video's user metadata, or one of the built-in
:data:`~indexer.store.format.BUILTIN_FILTER_FIELDS`; nothing else of a record (its path, for
one) can be filtered on. A video lacking the field never matches.
"""

from __future__ import annotations

from collections.abc import Callable

from indexer.store.format import BUILTIN_FILTER_FIELDS, VideoRecord

MISSING = object()
RANGE_OPS: dict[str, Callable] = {
    "gte": lambda a, b: a >= b,
    "lte": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "lt": lambda a, b: a < b,
}
Condition = Callable[[object], bool]


def field_value(rec: VideoRecord, name: str):
    """A record's value for a filter field (user metadata first), or :data:`MISSING`."""
    if name in rec.metadata:
        return rec.metadata[name]
    if name in BUILTIN_FILTER_FIELDS:
        return getattr(rec, name)
    return MISSING


def parse_filter(flt) -> list[tuple[str, Condition]]:
    """(field, condition) pairs; a ValueError names the problem."""
    if not isinstance(flt, dict):
        raise ValueError(
            f"a filter must be an object mapping field names to conditions, got {type(flt).__name__}"
        )
    conditions = []
    for name, cond in flt.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"filter field names must be non-empty strings, got {name!r}")
        if isinstance(cond, dict):
            unknown = set(cond) - {"in", *RANGE_OPS}
            if unknown or not cond:
                raise ValueError(
                    f"filter on {name!r}: unknown operator(s) {sorted(unknown) or '(none given)'}; "
                    'use a plain value for equality, {"in": [...]}, or gte/lte/gt/lt'
                )
            if "in" in cond:
                if len(cond) > 1:
                    raise ValueError(f"filter on {name!r}: 'in' cannot be combined with range operators")
                values = cond["in"]
                if not isinstance(values, list):
                    raise ValueError(f"filter on {name!r}: 'in' needs a list of values")
                conditions.append((name, _in_cond(values)))
            else:
                for op, bound in cond.items():
                    if isinstance(bound, bool) or not isinstance(bound, int | float | str):
                        raise ValueError(f"filter on {name!r}: {op} needs a number or string, got {bound!r}")
                conditions.append((name, _range_cond(cond)))
        elif isinstance(cond, list):
            raise ValueError(f'filter on {name!r}: use {{"in": [...]}} to match one of several values')
        else:
            conditions.append((name, lambda v, c=cond: v is not MISSING and type(v) is not dict and v == c))
    return conditions


def matches(rec: VideoRecord, conditions: list[tuple[str, Condition]]) -> bool:
    return all(cond(field_value(rec, name)) for name, cond in conditions)


def _in_cond(values: list) -> Condition:
    def check(v):
        return v is not MISSING and not isinstance(v, dict | list) and v in values

    return check


def _range_cond(cond: dict) -> Condition:
    def check(v):
        if v is MISSING or isinstance(v, bool):
            return False
        for op, bound in cond.items():
            numeric = isinstance(bound, int | float)
            if numeric != isinstance(v, int | float):
                return False
            if not RANGE_OPS[op](v, bound):
                return False
        return True

    return check
