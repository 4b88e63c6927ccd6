"""The error tree: one root, drawn in the docstring, every class pickles."""

from __future__ import annotations

import pickle
import re

import pytest

from tidb_binlog import errors

CLASSES = [getattr(errors, name) for name in errors.__all__]


def _sample_fields(cls) -> dict:
    # Distinct values of several types, so a field swapped or dropped is noticed.
    samples = [7, "key-name", b"\x00bytes", 3.5, ("t", 1), None, 2**63 + 1]
    return {name: samples[i % len(samples)] for i, name in enumerate(cls._fields)}


def test_all_names_exist_and_are_classes():
    assert len(set(errors.__all__)) == len(errors.__all__)
    for name, cls in zip(errors.__all__, CLASSES, strict=True):
        assert isinstance(cls, type) and cls.__name__ == name


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_derives_from_binlog_error(cls):
    assert issubclass(cls, errors.BinlogError)
    assert issubclass(cls, Exception)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_pickle_round_trip_keeps_type_message_and_fields(cls):
    fields = _sample_fields(cls)
    err = cls(f"{cls.__name__} went wrong at offset 12", **fields)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(err, protocol=protocol))
        assert type(back) is cls
        assert back.message == err.message
        assert str(back) == str(err)
        assert back.args == err.args
        for name, value in fields.items():
            assert getattr(back, name) == value, (cls.__name__, name)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_pickle_round_trip_with_a_cause(cls):
    try:
        try:
            raise OSError(5, "disk on fire")
        except OSError as exc:
            raise cls("wrapped") from exc
    except errors.BinlogError as err:
        back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and back.message == "wrapped"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_unknown_field_is_rejected(cls):
    with pytest.raises(TypeError, match="no_such_field"):
        cls("x", no_such_field=1)


def _drawn_tree() -> list[tuple[int, str]]:
    """(column where the name starts, name) for every class drawn in the docstring."""
    drawn = []
    for line in errors.__doc__.splitlines():
        m = re.match(r"^[\s│]*(?:[├└]── )?(?P<name>[A-Z]\w+)\b", line)
        if m and isinstance(getattr(errors, m.group("name"), None), type):
            drawn.append((m.start("name"), m.group("name")))
    return drawn


def _line_of(name: str) -> str:
    return next(line for line in errors.__doc__.splitlines()
                if re.search(rf"── {name}\b", line))


def test_docstring_tree_names_every_class():
    drawn = [name for _, name in _drawn_tree()]
    missing = sorted(set(errors.__all__) - set(drawn))
    assert not missing, f"classes missing from the docstring tree: {missing}"
    assert len(drawn) == len(set(drawn)), f"a class is drawn twice: {drawn}"


def test_docstring_tree_nesting_matches_the_class_hierarchy():
    stack: list[tuple[int, str]] = []
    for column, name in _drawn_tree():
        while stack and stack[-1][0] >= column:
            stack.pop()
        cls = getattr(errors, name)
        if stack:
            parent = getattr(errors, stack[-1][1])
            assert cls.__bases__[0] is parent, f"{name} is drawn under {parent.__name__}"
            for extra in cls.__bases__[1:]:  # a second base is named on the class's line
                assert f"also a {extra.__name__}" in _line_of(name) \
                    or f"also an {extra.__name__}" in _line_of(name), (name, extra.__name__)
        else:
            assert cls is errors.BinlogError, f"{name} is drawn at the root"
        stack.append((column, name))


def test_upstream_errors_form_one_tree():
    """Whatever the upstream emulator raises is an UpstreamError; the older classes a
    caller may catch (SchemaError, UnsupportedDDL) still match."""
    for cls in (errors.UpstreamSchemaError, errors.SchemaChanged, errors.UpstreamUnsupportedDDL,
                errors.TxnConflict, errors.PumpUnavailable, errors.DDLNotRecorded):
        assert issubclass(cls, errors.UpstreamError)
    assert issubclass(errors.SchemaChanged, errors.SchemaError)
    assert issubclass(errors.UpstreamUnsupportedDDL, errors.UnsupportedDDL)


@pytest.mark.parametrize("cls, retryable", [
    (errors.BinlogError, False), (errors.UpstreamError, False),
    (errors.UpstreamSchemaError, False), (errors.DDLNotRecorded, False),
    (errors.UpstreamUnsupportedDDL, False), (errors.SchemaChanged, True),
    (errors.TxnConflict, True), (errors.PumpUnavailable, True), (errors.UnavailableError, True),
    (errors.TransientDownstreamError, True), (errors.DownstreamError, False),
])
def test_retryable_says_whether_a_retry_may_succeed(cls, retryable):
    assert cls("x").retryable is retryable
    assert pickle.loads(pickle.dumps(cls("x"))).retryable is retryable
