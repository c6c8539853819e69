"""Whether a shipper model surely takes a JSON record as it is, answered without building the model.

Most of a fleet's records hold no rule literal (``normalize.vet_without_lines``): they are only
checked, so that a malformed one is still dead-lettered, and nothing is read from them. Building
the pydantic model of each was 18 % of the extract stage's instructions on ``make bench-stream``'s
mix (callgrind over its first 30 k records, 2026-12-03), for a verdict that is "valid" for nearly
every record.

:class:`Acceptance` reads a model's own field annotations once and answers ``True`` only where
pydantic cannot refuse: every field the record holds has a value of a JSON type its annotation takes
as it is (``str`` for ``str``, ``float`` or ``int`` for ``float``, ``dict`` for ``dict[str, Any]``,
``None`` where optional), a nested model's object passes the same test, a ``datetime`` string is
parsed by a pydantic adapter of the field's own annotation, and every required field is there. Any
other value, field or model (validators, constraints, aliases it cannot read, ``extra`` other than
``allow``) is "not sure" (``False``), and the caller validates the model as before. So a ``True``
never hides a record pydantic would refuse (``tests/unit/test_acceptance.py`` holds it to that on
generated records), and a ``False`` costs only the full validation it replaces.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

# exact JSON types a plain annotation takes unchanged (``int`` for ``float``: pydantic widens it;
# never ``bool`` for ``int`` or ``float``: an exact type check keeps it out)
_PLAIN: dict[Any, frozenset[type]] = {
    str: frozenset({str}),
    int: frozenset({int}),
    float: frozenset({float, int}),
    bool: frozenset({bool}),
    type(None): frozenset({type(None)}),
}


@dataclass(frozen=True, slots=True)
class _Field:
    types: frozenset[type]  # values of these exact types are taken as they are
    parse: Callable[[Any], Any] | None  # a string is checked by the field's own validator (a datetime)
    nested: Acceptance | None  # an object is checked against the nested model


class Acceptance:
    """The sure-valid test of one model; :meth:`of` builds it, or says the model is out of scope."""

    __slots__ = ("_fields", "_required")

    def __init__(self, fields: dict[str, _Field], required: tuple[tuple[str, ...], ...]) -> None:
        self._fields = fields
        self._required = required

    @classmethod
    def of(cls, model: type[BaseModel]) -> Acceptance | None:
        """The test of ``model``; None where its validation is more than its field types say."""
        decorators = model.__pydantic_decorators__
        config = model.model_config
        if (
            config.get("extra") != "allow"
            or config.get("strict")
            or any(
                (
                    decorators.validators,
                    decorators.field_validators,
                    decorators.root_validators,
                    decorators.model_validators,
                )
            )
        ):
            return None
        fields: dict[str, _Field] = {}
        required: list[tuple[str, ...]] = []
        for name, info in model.model_fields.items():
            alias = info.validation_alias
            if info.metadata or (alias is not None and not isinstance(alias, str)):
                return None  # constraints or alias paths: only pydantic reads them right
            field = _field_of(info.annotation)
            if field is None:
                return None
            keys = (name,) if info.alias is None else (info.alias, name)  # populate_by_name: either
            if not config.get("populate_by_name") and info.alias is not None:
                keys = (info.alias,)
            for key in keys:
                fields[key] = field
            if info.is_required():
                required.append(keys)
        return cls(fields, tuple(required))

    def accepts(self, obj: dict[str, Any]) -> bool:
        """True where the model surely validates ``obj``; False where only pydantic can tell."""
        fields = self._fields
        for key, value in obj.items():
            field = fields.get(key)
            if field is None:  # an extra key: the model keeps it, whatever it holds
                continue
            kind = type(value)
            if kind in field.types:
                continue
            if kind is dict and field.nested is not None:
                if field.nested.accepts(value):
                    continue
                return False
            if kind is str and field.parse is not None:
                try:
                    field.parse(value)
                except ValidationError:
                    return False
                continue
            return False
        for keys in self._required:  # plain loops: generators here cost more than the fields
            for key in keys:
                if key in obj:
                    break
            else:
                return False
        return True


def _field_of(annotation: Any) -> _Field | None:
    """How one annotation is tested; None for one this module does not read (the model is then left
    to pydantic whole)."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    kinds: set[type] = set()
    nested: Acceptance | None = None
    dated = False
    for member in members:
        if member in _PLAIN:
            kinds |= _PLAIN[member]
        elif member is datetime:
            dated = True
        elif member is dict or (get_origin(member) is dict and get_args(member) == (str, Any)):
            kinds.add(dict)  # JSON object keys are strings; values are Any
        elif isinstance(member, type) and issubclass(member, BaseModel) and nested is None:
            nested = Acceptance.of(member)
            if nested is None:
                return None
        else:
            return None
    if nested is not None and dict in kinds:
        return None  # which member an object becomes is pydantic's call
    return _Field(
        types=frozenset(kinds),
        # the adapter's core validator: its Python wrapper cost twice the parse
        parse=TypeAdapter(annotation).validator.validate_python if dated else None,
        nested=nested,
    )
