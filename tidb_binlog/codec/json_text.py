"""TiDB's JSON text: ``BinaryJSON.String()`` and parsing JSON text into the model.

:func:`json_to_string` is TiDB's ``BinaryJSON.String()``, the text a MySQL
sink receives: ``{"k": v, "k2": v2}``, ``[a, b]``, Go ``encoding/json``
string escaping without HTML escaping, plus ``\\b``/``\\f`` (current TiDB).
Doubles follow **current TiDB master**: exponent form when
``|f| < 1e-15 or |f| >= 1e15`` with no ``+`` in the exponent (``1e15``), and
integral doubles keep ``.0`` (``4.0``). Older TiDB (v4-v7 binlog era)
used Go's JSON cut-offs ``1e-6``/``1e21``, printed ``4`` and ``1e+21``:
pass ``legacy_floats=True`` for that form.

:func:`parse_json_text` reads JSON text (e.g. a MariaDB JSON column) by TiDB's
number rules: integers that fit int64 are ``int``, else ``JSONUInt`` up to
uint64, else ``float``; object keys come back in TiDB's byte-wise order and the
last of duplicate keys wins; nesting deeper than ``MAX_DEPTH`` is rejected.
Invalid text raises :class:`~tidb_binlog.errors.CodecError` with the character
offset.
"""

from __future__ import annotations

import base64
import json
import math
import re
from decimal import Decimal

from tidb_binlog.codec.json_model import (
    _INT64_MAX,
    _INT64_MIN,
    _UINT64_MAX,
    JSON_FLAG,
    MAX_DEPTH,
    JSONDuration,
    JSONOpaque,
    JSONTime,
    JSONUInt,
    _err,
    _utf8,
)
from tidb_binlog.errors import CodecError

__all__ = ["json_to_string", "parse_json_text"]


def json_to_string(obj: object, *, legacy_floats: bool = False) -> str:
    """TiDB's ``BinaryJSON.String()`` of a Python JSON model value."""
    out: list[str] = []
    _to_text(obj, out, legacy_floats)
    return "".join(out)


def _to_text(obj: object, out: list[str], legacy: bool) -> None:
    if obj is None:
        out.append("null")
    elif obj is True or obj is False:
        out.append("true" if obj else "false")
    elif isinstance(obj, int):
        out.append(str(int(obj)))
    elif isinstance(obj, float):
        out.append(_format_double(obj, legacy))
    elif isinstance(obj, str):
        out.append(_quote(obj))
    elif isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, str):
                raise _err(f"object key {key!r} is not a str", None)
        items = sorted(((_utf8(k), k, v) for k, v in obj.items()), key=lambda kv: kv[0])
        out.append("{")
        for i, (_, key, value) in enumerate(items):
            out.append(", " if i else "")
            out.append(_quote(key) + ": ")
            _to_text(value, out, legacy)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for i, value in enumerate(obj):
            out.append(", " if i else "")
            _to_text(value, out, legacy)
        out.append("]")
    elif isinstance(obj, JSONOpaque):
        out.append(f'"base64:type{obj.mysql_type}:{base64.b64encode(obj.data).decode()}"')
    elif isinstance(obj, (JSONTime, JSONDuration)):
        out.append(f'"{obj}"')
    else:
        raise _err(f"cannot render {type(obj).__name__} {obj!r}: not a TiDB JSON value", None)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b",
            "\f": "\\f", "\u2028": "\\u2028", "\u2029": "\\u2029"}  # fmt: skip
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\u2028\u2029\ud800-\udfff]')
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    ch = match.group()
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch < " ":
        return f"\\u00{ord(ch):02x}"
    return "\\ufffd"  # a surrogate: a byte that was not UTF-8 (surrogateescape)


def _quote(text: str) -> str:
    """Go encoding/json string quoting without HTML escaping (TiDB jsonMarshalStringTo)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _format_double(value: float, legacy: bool) -> str:
    """Go ``strconv.AppendFloat(f, 'f'|'e', -1, 64)`` with TiDB's cut-offs and clean-ups."""
    if not math.isfinite(value):
        raise _err(f"double {value} has no JSON text form", None)
    magnitude = abs(value)
    low, high = (1e-6, 1e21) if legacy else (1e-15, 1e15)
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)  # |value| = digits × 10**exponent
    if not digits:  # ±0.0
        digits, exponent = "0", 0
    prefix = "-" if sign else ""
    if magnitude != 0 and (magnitude < low or magnitude >= high):
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        power = exponent + len(digits) - 1
        if legacy:  # Go pads to two digits and keeps '+'; TiDB only strips "e-0"
            return f"{prefix}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}".replace(
                "e-0", "e-"
            )
        return f"{prefix}{mantissa}e{power}"
    if exponent >= 0:
        text = digits + "0" * exponent
    else:
        point = len(digits) + exponent
        text = "0." + "0" * -point + digits if point <= 0 else digits[:point] + "." + digits[point:]
    if not legacy and "." not in text:
        text += ".0"
    return prefix + text


def parse_json_text(text: str | bytes) -> object:
    """Parse JSON text (e.g. a MariaDB JSON column) into the model, by TiDB's rules.

    Integers that fit int64 become ``int``, else fitting uint64 ``JSONUInt``,
    else ``float``; numbers with ``.`` or an exponent are ``float``. Objects
    keep the last of duplicate keys and come back with keys in TiDB's byte-wise
    order. Invalid text raises CodecError with the character offset.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    try:
        parsed = json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                            parse_constant=_reject_constant)  # fmt: skip
    except json.JSONDecodeError as exc:
        raise CodecError(
            f"invalid JSON text at line {exc.lineno} column {exc.colno} (char {exc.pos}): "
            f"{exc.msg}; TiDB would reject this document too",
            offset=exc.pos, flag=JSON_FLAG,
        ) from exc  # fmt: skip
    except RecursionError as exc:
        raise _err(f"document nested deeper than TiDB's limit of {MAX_DEPTH}", None) from exc
    model, depth = _normalize(parsed)
    if depth - 1 > MAX_DEPTH:
        raise _err(f"document nested deeper than TiDB's limit of {MAX_DEPTH}", None)
    return model


def _parse_int(literal: str) -> object:
    if len(literal) <= 20:
        value = int(literal)
        if _INT64_MIN <= value <= _INT64_MAX:
            return value
        if 0 <= value <= _UINT64_MAX:
            return JSONUInt(value)
    return _parse_float(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise _err(f"number {literal[:40]} is out of the double range", None)
    return value


def _reject_constant(name: str) -> object:
    raise _err(f"{name} is not valid JSON", None)


def _normalize(obj: object) -> tuple[object, int]:
    """Sort object keys byte-wise, replace lone surrogates by U+FFFD (as Go
    does), and compute TiDB's element depth (scalar 1, container 1 + max)."""
    if isinstance(obj, str):
        return _scrub(obj), 1
    if isinstance(obj, list):
        pairs = [_normalize(v) for v in obj]
        return [v for v, _ in pairs], 1 + max((d for _, d in pairs), default=0)
    if isinstance(obj, dict):
        fields = sorted(((_scrub(k), _normalize(v)) for k, v in obj.items()),
                        key=lambda kv: kv[0].encode("utf-8"))  # fmt: skip
        for key, _ in fields:
            if len(key.encode("utf-8")) > 0xFFFF:
                raise _err("object key exceeds TiDB's 65535-byte limit", None)
        depth = 1 + max((d for _, (_, d) in fields), default=0)
        return {k: v for k, (v, _) in fields}, depth
    return obj, 1


def _scrub(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)
