"""Reading and writing a declared config tree: strict TOML parsing, flag overrides, rendering.

A config is a frozen dataclass whose fields are declared with ``_opt`` / ``_section``
(``_kinds.py``). :func:`_load` reads a TOML file into such a tree:

1. Strict: a key that is not declared, at any nesting level, raises
   :class:`~tidb_binlog.errors.ConfigError` naming the dotted key and the file
   (keys of TiDB Binlog's kafka/oracle sinks get a hint saying which db-types are
   supported); a value of the wrong type or range names the key, the file, the
   value and what is expected.
2. ``overrides`` (the command-line flags) win over the file: dotted TOML keys or
   the flag names in ``flag_aliases``; ``_`` may stand for ``-``; ``None`` means
   "flag not given"; strings are converted for numbers and booleans. Within one
   source a field's ``inverse`` key (``disable-*``) is applied after ``enable-*``.

Validation and TiDB Binlog's adjustments are the caller's (``pump.py``,
``drainer.py``). :func:`_to_toml` renders a tree back; loading that text gives an
equal config.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import MISSING, fields, is_dataclass

from tidb_binlog.config._common import _TIDB_ONLY_KEYS, SUPPORTED_DB_TYPES
from tidb_binlog.config._kinds import _Bad, _bad_value, _Kind
from tidb_binlog.errors import ConfigError, InvalidArgument

__all__: list[str] = []


class _Partial(dict):
    """Values of one table section, by field name, before defaults are filled in."""


def _load(cls, path, overrides, flag_aliases):
    source, values = "defaults", _Partial()
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as fh:
                table = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {source}: {exc.strerror}",
                              path=source) from exc  # fmt: skip
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source} is not valid TOML: {exc}", path=source) from exc
        values = _parse_table(cls, table, "", source)
    if overrides:
        _apply_overrides(cls, values, overrides, flag_aliases, source)
    return _build(cls, values), source


def _parse_table(cls, table, prefix: str, source: str) -> _Partial:
    if not isinstance(table, dict):
        raise _bad_value(prefix.rstrip("."), source, table, "a table")
    by_key = {f.metadata["key"]: f for f in fields(cls)}
    inverse = {f.metadata["inverse"]: f for f in fields(cls) if "inverse" in f.metadata}
    out = _Partial()
    for key in sorted(table, key=lambda k: k in inverse):  # disable-* after enable-*
        dotted, value = prefix + key, table[key]
        if key in inverse:
            out[inverse[key].name] = not _parse_value(inverse[key], value, dotted, source)
        elif key in by_key:
            out[by_key[key].name] = _parse_value(by_key[key], value, dotted, source)
        else:
            hint = ""
            if key in _TIDB_ONLY_KEYS:
                hint = (" (it configures TiDB Binlog's kafka/oracle sink, which is not supported"
                        f" here: db-type may be {', '.join(SUPPORTED_DB_TYPES)})")
            raise ConfigError(f"unknown key `{dotted}` in {source}{hint}; remove it or check "
                              "its spelling against tidb_binlog/CONFIG.md",
                              key=dotted, path=source)  # fmt: skip
    return out


def _parse_value(f, value, dotted: str, source: str, *, from_flag: bool = False):
    meta = f.metadata
    if "section" not in meta:
        kind: _Kind = meta["kind"]
        try:
            if from_flag and isinstance(value, str) and kind.from_text is not None:
                try:
                    value = kind.from_text(value)
                except ValueError:
                    raise _Bad(kind.expected) from None
            return kind.parse(value)
        except _Bad as exc:
            if meta.get("secret"):  # a password: never echo it, even when it is wrong
                raise ConfigError(f"`{dotted}` in {source} is {_toml_type(value)} (its value "
                                  f"is not shown: it is a secret); expected {exc}: put it in "
                                  'quotes, password = "..."', key=dotted, path=source) from None
            raise _bad_value(dotted, source, value, str(exc)) from None
    cls, shape = meta["section"], meta["shape"]
    if shape == "table":
        return _parse_table(cls, value, dotted + ".", source)
    if shape == "array":
        if not isinstance(value, list):
            raise _bad_value(dotted, source, value, f"an array of tables ([[{dotted}]])")
        return tuple(_build(cls, _parse_table(cls, item, f"{dotted}[{i}].", source))
                     for i, item in enumerate(value))  # fmt: skip
    if not isinstance(value, dict):
        raise _bad_value(dotted, source, value, f"a table of named tables ([{dotted}.<name>])")
    return {name: _build(cls, _parse_table(cls, item, f"{dotted}.{name}.", source))
            for name, item in value.items()}  # fmt: skip


def _toml_type(value) -> str:
    """The TOML type of a parsed value, for messages that must not show the value."""
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"),
                       (str, "a string"), (list, "an array"), (dict, "a table")):
        if isinstance(value, kind):
            return name
    return "a date or time" if value is not None else "empty"


def _build(cls, values: _Partial):
    kwargs = {}
    for f in fields(cls):
        if f.name in values:
            value = values[f.name]
            kwargs[f.name] = _build(f.metadata["section"], value) if isinstance(
                value, _Partial) else value
    return cls(**kwargs)


def _flag_index(cls, prefix: str = "", path: tuple = ()) -> dict:
    """Dotted TOML key → (field path, field, inverted) for every scalar option."""
    index = {}
    for f in fields(cls):
        key = prefix + f.metadata["key"]
        if "section" in f.metadata:
            if f.metadata["shape"] == "table" and f.default is MISSING:
                index.update(_flag_index(f.metadata["section"], key + ".", path + (f,)))
            continue
        index[key] = (path, f, False)
        if "inverse" in f.metadata:
            index[prefix + f.metadata["inverse"]] = (path, f, True)
    return index


def _apply_overrides(cls, values: _Partial, overrides: dict, aliases: dict, source: str):
    index = _flag_index(cls)
    flags_source = f"the command line (over {source})"
    resolved = []
    for key, value in overrides.items():
        if value is None:
            continue
        candidates = (key, key.replace("_", "-"))
        dotted = next((aliases.get(c, c) for c in candidates if aliases.get(c, c) in index), None)
        if dotted is None:
            raise ConfigError(f"unknown flag or override `{key}`; use a dotted config key "
                              "such as `syncer.worker-count` (see tidb_binlog/CONFIG.md)",
                              key=key, path=flags_source)  # fmt: skip
        resolved.append((dotted, value))
    for dotted, value in sorted(resolved, key=lambda kv: index[kv[0]][2]):
        path, f, inverted = index[dotted]
        parsed = _parse_value(f, value, dotted, flags_source, from_flag=True)
        target = values
        for section in path:
            target = target.setdefault(section.name, _Partial())
        target[f.name] = (not parsed) if inverted else parsed


# ------------------------------------------------------------------ rendering

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_value(key)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if is_dataclass(value):
        return _toml_value(dict(_scalar_items(value, inline=True)))
    raise InvalidArgument(f"cannot render {value!r} as TOML")


def _scalar_items(obj, *, inline: bool):
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is None or ("section" in f.metadata and not inline):
            continue
        kind = f.metadata.get("kind")
        yield f.metadata["key"], kind.render(value) if kind and kind.render else value


def _to_toml(cfg) -> str:
    lines = [f"# {type(cfg).__name__} rendered by tidb_binlog.config"]
    _emit_table(cfg, "", lines)
    return "\n".join(lines) + "\n"


def _emit_table(obj, dotted: str, lines: list[str]) -> None:
    if dotted:
        lines += ["", f"[{dotted}]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in _scalar_items(obj, inline=False)]
    for f in fields(obj):
        value, meta = getattr(obj, f.name), f.metadata
        if "section" not in meta or value is None:
            continue
        child = f"{dotted}.{_toml_key(meta['key'])}" if dotted else _toml_key(meta["key"])
        if meta["shape"] == "table":
            _emit_table(value, child, lines)
        elif meta["shape"] == "array":
            for item in value:
                lines += ["", f"[[{child}]]"]
                lines += [f"{_toml_key(k)} = {_toml_value(v)}"
                          for k, v in _scalar_items(item, inline=True)]  # fmt: skip
        else:
            for name, item in value.items():
                _emit_table(item, f"{child}.{_toml_key(name)}", lines)
