"""Declarative Go-struct JSON for the model dataclasses.

Each model class lists its fields as ``(json_key, attribute, kind)`` in Go's
struct order, so ``json.dumps`` reproduces TiDB's key order. ``kind`` is
``None`` for a plain value, a model class for a nested struct (``null`` when
``None``), or ``[cls]`` for a slice (written ``null`` when empty, as Go writes a
nil slice). Keys listed in ``_OMITEMPTY`` are left out when zero. Unknown keys
met when reading are kept in ``extra`` and written back after the known ones,
so a newer TiDB's JSON survives a round trip.
"""

from __future__ import annotations

from typing import Any

from tidb_binlog.errors import SchemaError

__all__ = ["GoStruct"]


class GoStruct:
    """Mixin: ``to_obj``/``from_obj`` driven by the class's ``_JSON`` spec."""

    _JSON: tuple = ()
    _OMITEMPTY: frozenset = frozenset()

    def to_obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, attr, kind in self._JSON:
            value = getattr(self, attr)
            if key in self._OMITEMPTY and not value:
                continue
            out[key] = _dump(value, kind)
        for key, value in getattr(self, "extra", {}).items():
            out.setdefault(key, value)
        return out

    @classmethod
    def from_obj(cls, obj: Any):
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise SchemaError(f"{cls.__name__}: expected a JSON object, got {type(obj).__name__}")
        kwargs: dict[str, Any] = {}
        known = set()
        for key, attr, kind in cls._JSON:
            known.add(key)
            if key in obj:
                kwargs[attr] = _load(obj[key], kind, cls.__name__, key)
        extra = {k: v for k, v in obj.items() if k not in known}
        inst = cls(**kwargs)
        if extra and hasattr(inst, "extra"):
            inst.extra = extra
        return inst


def _dump(value, kind):
    if kind is None or value is None:
        return value
    if isinstance(kind, list):
        return [v.to_obj() for v in value] if value else None
    return value.to_obj()


def _load(value, kind, owner: str, key: str):
    if kind is None or value is None:
        if isinstance(kind, list) and value is None:
            return []
        return value
    if isinstance(kind, list):
        if not isinstance(value, list):
            raise SchemaError(f"{owner}.{key}: expected a JSON array, got {type(value).__name__}")
        return [kind[0].from_obj(v) for v in value]
    return kind.from_obj(value)
