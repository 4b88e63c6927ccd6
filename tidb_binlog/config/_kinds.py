"""Value kinds: how one TOML value of pump.toml / drainer.toml is parsed and rendered.

A *kind* (:class:`_Kind`) turns the value read from TOML (or, for a flag, the
command-line text) into the Python value stored on the config dataclass, and
renders it back for ``to_toml()``. A wrong value raises :class:`_Bad`, whose
message says what was expected; the loader (``_toml.py``) adds the dotted key
and the file. ``_Bad`` never leaves the config package: the public parsers below
raise :class:`~tidb_binlog.errors.ConfigError`.

Durations are stored in seconds and sizes in bytes whatever unit the file
uses: :func:`parse_gc` is TiDB Binlog's ``util.Duration`` (an int number of
days or a Go duration), :func:`parse_go_duration` is Go's
``time.ParseDuration``, :func:`parse_bytes` is go-humanize's ``ParseBytes``.

:func:`_opt` and :func:`_section` declare a dataclass field: its TOML key, its
kind (or, for a section, its dataclass and shape: ``table``, ``array`` of
tables or ``map`` of named tables) and its default.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, field
from typing import Any

from tidb_binlog.errors import ConfigError

__all__ = ["parse_gc", "parse_go_duration", "parse_bytes"]

_DAY_S = 86400
_MIB = 1 << 20


class _Bad(Exception):
    """A value is wrong; the message says what was expected."""


@dataclass(frozen=True)
class _Kind:
    expected: str
    parse: Any  # (toml value) -> python value, raises _Bad
    render: Any = None  # python value -> toml value (None: identity)
    from_text: Any = None  # str flag value -> toml value, for non-string kinds


def _check(ok: bool, expected: str) -> None:
    if not ok:
        raise _Bad(expected)


def _bad_value(dotted: str, source: str, value, expected: str) -> ConfigError:
    return ConfigError(f"`{dotted}` in {source} is {value!r}; expected {expected}",
                       key=dotted, path=source)  # fmt: skip


def _str_kind() -> _Kind:
    def parse(v):
        _check(isinstance(v, str), "a string")
        return v

    return _Kind("a string", parse)


def _int_kind(low: int | None = None, high: int | None = None) -> _Kind:
    span = f" in [{low}, {high}]" if high is not None else f" >= {low}" if low is not None else ""

    def parse(v):
        _check(isinstance(v, int) and not isinstance(v, bool), f"an integer{span}")
        _check((low is None or v >= low) and (high is None or v <= high), f"an integer{span}")
        return v

    return _Kind(f"an integer{span}", parse, from_text=int)


def _bool_parse(v):
    _check(isinstance(v, bool), "true or false")
    return v


def _bool_text(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise _Bad("true or false")


def _float_kind(unit: str = "seconds", minimum: float = 0.0, unit_s: float = 1.0,
                allow_zero: bool = False, as_float: bool = False) -> _Kind:
    """A number in ``unit``, stored times ``unit_s`` (seconds); rendered as an int when
    integral unless ``as_float`` (TiDB declares the key as a float64)."""
    floor = f">= {minimum / unit_s:g}" if minimum else ">= 0" if allow_zero else "> 0"
    what = f"a number of {unit} {floor} (fractions allowed)"

    def parse(v):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        _check(ok and v * unit_s >= minimum and (v > 0 or (allow_zero and v == 0)), what)
        return float(v) * unit_s

    render = (lambda s: s / unit_s) if as_float else (lambda s: _plain(s / unit_s))
    return _Kind(what, parse, render, float)


def _plain(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


_GO_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
               "m": 60.0, "h": 3600.0}  # fmt: skip
_GO_PART = re.compile(r"(\d*\.?\d*)(ns|us|µs|μs|ms|s|m|h)")


def _parse_go_duration(text: str) -> float:
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        match = _GO_PART.match(body, pos)
        if not match or match.group(1) in ("", "."):
            raise _Bad(f'a Go duration like "8h", "30m" or "1h30m", not {text!r}')
        total += float(match.group(1)) * _GO_UNITS_S[match.group(2)]
        pos = match.end()
    if not body:
        raise _Bad('a Go duration like "8h", "30m" or "1h30m"')
    return -total if text.startswith("-") else total


def _parse_gc(value: int | str) -> float:
    if isinstance(value, int) and not isinstance(value, bool):
        _check(value >= 0, "a number of days >= 0 or a duration string like \"8h\"")
        return float(value * _DAY_S)
    _check(isinstance(value, str), 'an int number of days or a duration string like "8h"')
    if value.isdigit():
        return float(int(value) * _DAY_S)
    return _parse_go_duration(value)


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` in seconds: ``"8h"``, ``"1h30m"``, ``"1.5s"``, ``"0"``;
    ConfigError for anything else."""
    return _public(_parse_go_duration, text)


def parse_gc(value: int | str) -> float:
    """TiDB Binlog's ``util.Duration`` in seconds: an int number of days or a Go duration;
    ConfigError for anything else."""
    return _public(_parse_gc, value)


def parse_bytes(value: int | str) -> int:
    """go-humanize ParseBytes: ``"10 gib"``, ``"512 MiB"``, ``"1GB"`` (SI), or an int;
    ConfigError for anything else."""
    return _public(_parse_bytes, value)


def _public(parse, value):
    """``parse(value)`` for a caller outside this package, which never sees :class:`_Bad`."""
    try:
        return parse(value)
    except _Bad as exc:
        raise ConfigError(f"{value!r}: expected {exc}") from None


def _render_duration(seconds: float) -> int | str:
    if seconds % _DAY_S == 0:
        return int(seconds // _DAY_S)
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{_plain(seconds)}s"


def _duration_kind(allow_zero: bool = False) -> _Kind:
    what = 'an int number of days or a Go duration string like "8h", "30m", "1h30m"'
    what += "" if allow_zero else " (must be > 0)"

    def parse(v):
        seconds = _parse_gc(v)
        _check(seconds > 0 or (allow_zero and seconds == 0), what)
        return seconds

    return _Kind(what, parse, _render_duration)


_GO_DURATION_FORMS = 'a duration string like "1m", "30s", "1m30s" or "500ms"'


def _render_go_duration(seconds: float) -> str:
    """Seconds as a Go duration string that :func:`parse_go_duration` reads back."""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{_plain(seconds * 1000)}ms"


def _go_duration_kind() -> _Kind:
    """A timeout given only as a Go duration string (``read-timeout``).

    TiDB Binlog parses such keys with the same code as ``gc``, so a bare number there
    means *days*: ``read-timeout = 5`` is a five-day read timeout, which nobody means.
    We refuse a bare number (an int, a float or a digit string) instead of guessing,
    and the message shows the accepted forms."""
    what = f"{_GO_DURATION_FORMS} (must be > 0)"
    bare = (f"{_GO_DURATION_FORMS}; a bare number is refused because TiDB Binlog would "
            'read it as days: write "5s" for five seconds')

    def parse(v):
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise _Bad(what)
        if not isinstance(v, str) or re.fullmatch(r"\s*[+-]?[0-9.]+\s*", v):
            raise _Bad(bare)
        seconds = _parse_go_duration(v)
        _check(seconds > 0, what)
        return seconds

    return _Kind(what, parse, _render_go_duration)


_SIZE_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtpe", start=1):
    _SIZE_UNITS.update({_p: 1000**_i, _p + "b": 1000**_i, _p + "i": 1024**_i,
                        _p + "ib": 1024**_i})  # fmt: skip
_SIZE = re.compile(r"([0-9.,]+)\s*([A-Za-z]*)\s*$")


def _parse_bytes(value: int | str) -> int:
    expected = 'a size in bytes: an integer or a string like "10 gib", "512 MiB", "1GB"'
    if isinstance(value, int) and not isinstance(value, bool):
        _check(value >= 0, expected)
        return value
    _check(isinstance(value, str), expected)
    match = _SIZE.match(value.strip())
    _check(match is not None and match.group(2).lower() in _SIZE_UNITS, expected)
    try:
        number = float(match.group(1).replace(",", ""))
    except ValueError:
        raise _Bad(expected) from None
    return int(number * _SIZE_UNITS[match.group(2).lower()])


def _bytes_kind() -> _Kind:
    return _Kind('an integer or a size like "10 gib"', _parse_bytes, from_text=lambda t: t)


def _list_kind(item: _Kind, what: str) -> _Kind:
    def parse(v):
        _check(isinstance(v, list), what)
        try:
            return tuple(item.parse(x) for x in v)
        except _Bad:
            raise _Bad(what) from None

    def from_text(text: str):
        return [item.from_text(x) if item.from_text else x for x in text.split(",") if x]

    return _Kind(what, parse, list, from_text)


def _csv_kind() -> _Kind:
    def parse(v):
        _check(isinstance(v, str), "a comma-separated string")
        return tuple(part.strip() for part in v.split(","))

    return _Kind("a comma-separated string", parse, ",".join)


def _str_map_kind() -> _Kind:
    def parse(v):
        ok = isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
        _check(ok, "a table of string values")
        return dict(v)

    return _Kind("a table of string values", parse, dict)


_STR, _BOOL = _str_kind(), _Kind("true or false", _bool_parse, from_text=_bool_text)
_INT, _UINT64 = _int_kind(), _int_kind(0, (1 << 64) - 1)


def _opt(key: str, kind: _Kind, default: Any, **extra: Any):
    meta = {"key": key, "kind": kind, **extra}
    repr_ = not extra.get("secret", False)  # a password never shows in a repr, log or error
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta, repr=repr_)
    return field(default=default, metadata=meta, repr=repr_)


def _section(key: str, cls: type, *, shape: str = "table", default: Any = MISSING):
    meta = {"key": key, "section": cls, "shape": shape}
    if default is not MISSING:
        return field(default=default, metadata=meta)
    factory = {"table": cls, "array": tuple, "map": dict}[shape]
    return field(default_factory=factory, metadata=meta)
