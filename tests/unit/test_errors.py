"""The error tree: one root, drawn in the docstring, every class pickles; and the source
raises nothing outside it on purpose (an ``ast`` walk of every package)."""

from __future__ import annotations

import ast
import builtins
import importlib
import pickle
import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from tidb_binlog import errors

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tidb_binlog", "actors", "cluster", "spark_on_ray")

# Builtin exceptions that a raise on purpose must not use bare: each has a class of the
# tree instead (InvalidArgument for a broken call contract, ConfigError for a user's bad
# value, ...). NotImplementedError (abstract methods), StopIteration (iterators) and
# OSError (vlog_segment's EIO for a short source, translated with the OS's own) stay.
BARE = ("Exception", "BaseException", "ValueError", "TypeError", "RuntimeError", "KeyError",
        "IndexError", "LookupError", "AttributeError", "TimeoutError")

# Bare raises allowed per file while a change converts them (none today); an entry must
# match the file's count exactly, so a stale one fails too.
PENDING_BARE: dict[str, dict[str, int]] = {}

# Package-private control-flow exceptions: raised and caught inside their package, which
# translates them (CodecError / ProtocolError naming the offset, ConfigError naming the
# key); see errors.py. The value is the package they must not leave.
PACKAGE_PRIVATE = {
    ("tidb_binlog/codec/primitives.py", "Malformed"): "tidb_binlog/codec/",
    ("tidb_binlog/drainer/translate/wire_fields.py", "Malformed"): "tidb_binlog/drainer/translate/",
    ("tidb_binlog/config/_kinds.py", "_Bad"): "tidb_binlog/config/",
}

BUILTIN_EXCEPTIONS = {name for name, obj in vars(builtins).items()
                      if isinstance(obj, type) and issubclass(obj, BaseException)}


@cache
def _sources() -> dict[str, ast.Module]:
    """Every module of the packages (generated protobuf code left out), by path."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            out[path.relative_to(ROOT).as_posix()] = ast.parse(path.read_text(), str(path))
    return out


def _module_name(rel: str) -> str:
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _base_names(node: ast.ClassDef) -> list[str]:
    """The last component of each base: ``errors.StateError`` → ``StateError``."""
    out = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            out.append(base.id)
        elif isinstance(base, ast.Attribute):
            out.append(base.attr)
    return out


def _class_defs() -> list[tuple[str, ast.ClassDef]]:
    return [(rel, node) for rel, tree in _sources().items() for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)]


@cache
def _tree_classes() -> dict[str, type]:
    """Every class of the project deriving from BinlogError, found in the source (so a
    subclass defined anywhere counts), imported from where it is defined."""
    names = {"BinlogError"}
    where: dict[str, str] = {}
    defs = _class_defs()
    grew = True
    while grew:
        grew = False
        for rel, node in defs:
            if node.name not in names and set(_base_names(node)) & names:
                names.add(node.name)
                where[node.name] = rel
                grew = True
    where["BinlogError"] = "tidb_binlog/errors.py"
    found = {}
    for name in sorted(names):
        cls = getattr(importlib.import_module(_module_name(where[name])), name)
        assert issubclass(cls, errors.BinlogError), (where[name], name)
        found[name] = cls
    return found


CLASSES = list(_tree_classes().values())


def _sample_fields(cls) -> dict:
    # Distinct values of several types, so a field swapped or dropped is noticed.
    samples = [7, "key-name", b"\x00bytes", 3.5, ("t", 1), None, 2**63 + 1]
    return {name: samples[i % len(samples)] for i, name in enumerate(cls._fields)}


def test_all_names_exist_and_are_classes():
    assert len(set(errors.__all__)) == len(errors.__all__)
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert isinstance(cls, type) and cls.__name__ == name
        assert _tree_classes()[name] is cls


def test_the_walk_finds_the_classes_defined_elsewhere():
    """Classes of the tree outside errors.py are found too (the walk really walks)."""
    found = {cls.__module__ for cls in CLASSES}
    assert {"spark_on_ray.errors", "tidb_binlog.pump_client.inflight", "cluster.demo"} <= found
    assert len(CLASSES) > len(errors.__all__)


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
    with pytest.raises(errors.InvalidArgument, match="no_such_field"):
        cls("x", no_such_field=1)


def _drawn_tree() -> list[tuple[int, str]]:
    """(column where the name starts, name) for every class drawn in the docstring."""
    drawn = []
    for line in errors.__doc__.splitlines():
        m = re.match(r"^[\s│]*(?:[├└]── )?(?P<name>[A-Z]\w+)\b", line)
        if m and m.group("name") in _tree_classes():
            drawn.append((m.start("name"), m.group("name")))
    return drawn


def _line_of(name: str) -> str:
    return next(line for line in errors.__doc__.splitlines()
                if re.search(rf"(── |^    ){name}\b", line))


def test_docstring_tree_names_every_class():
    drawn = [name for _, name in _drawn_tree()]
    missing = sorted(set(_tree_classes()) - set(drawn))
    assert not missing, f"classes missing from the docstring tree: {missing}"
    assert len(drawn) == len(set(drawn)), f"a class is drawn twice: {drawn}"


def test_docstring_tree_names_the_module_of_a_class_defined_elsewhere():
    for name, cls in _tree_classes().items():
        tag = re.search(r"\[([\w.]+)\]\s*$", _line_of(name))
        if cls.__module__ == errors.__name__:
            assert tag is None, f"{name} is defined in errors.py, not in {tag.group(1)}"
            continue
        assert tag is not None, f"{name}'s line does not name its module [{cls.__module__}]"
        assert cls.__module__ in (tag.group(1), f"tidb_binlog.{tag.group(1)}"), \
            (name, cls.__module__, tag.group(1))


def test_docstring_tree_nesting_matches_the_class_hierarchy():
    stack: list[tuple[int, str]] = []
    classes = _tree_classes()
    for column, name in _drawn_tree():
        while stack and stack[-1][0] >= column:
            stack.pop()
        cls = classes[name]
        if stack:
            parent = classes[stack[-1][1]]
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


def test_invalid_argument_is_still_a_value_error():
    """Callers written against the builtin (``except ValueError``) keep catching it."""
    assert issubclass(errors.InvalidArgument, ValueError)
    with pytest.raises(ValueError, match="attempts"):
        raise errors.InvalidArgument("attempts must be >= 1, got 0")


@pytest.mark.parametrize("cls, retryable", [
    (errors.BinlogError, False), (errors.UpstreamError, False),
    (errors.UpstreamSchemaError, False), (errors.DDLNotRecorded, False),
    (errors.UpstreamUnsupportedDDL, False), (errors.SchemaChanged, True),
    (errors.TxnConflict, True), (errors.PumpUnavailable, True), (errors.UnavailableError, True),
    (errors.TransientDownstreamError, True), (errors.DownstreamError, False),
    (errors.InvalidArgument, False), (errors.Unimplemented, True),
])
def test_retryable_says_whether_a_retry_may_succeed(cls, retryable):
    assert cls("x").retryable is retryable
    assert pickle.loads(pickle.dumps(cls("x"))).retryable is retryable


# -- the source raises only the tree's classes --------------------------------------------

def _bare_raises(tree: ast.Module) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id in BARE:
                out.append((node.lineno, target.id))
    return out


def test_no_bare_builtin_raise():
    """``raise ValueError(...)`` and its kin are not how this project says what went
    wrong: the tree has a class for it (see errors.py)."""
    offenders = []
    for rel, tree in _sources().items():
        found = _bare_raises(tree)
        counts = Counter(name for _, name in found)
        if counts == Counter(PENDING_BARE.get(rel, {})):
            continue
        offenders += [f"{rel}:{line}: raise {name}" for line, name in found]
        if rel in PENDING_BARE:
            offenders.append(f"{rel}: PENDING_BARE says {PENDING_BARE[rel]}, the file has "
                             f"{dict(counts)}: update or drop its entry")
    assert not offenders, "raise a class of tidb_binlog.errors instead:\n" + "\n".join(offenders)


def test_the_bare_raise_check_can_fail():
    tree = ast.parse("def f(x):\n    if x:\n        raise ValueError(x)\n    raise TypeError\n"
                     "def g():\n    raise errors.ConfigError('x')\n")
    assert sorted(_bare_raises(tree)) == [(3, "ValueError"), (4, "TypeError")]


def _outside_the_tree() -> list[str]:
    tree = set(_tree_classes())
    offenders = []
    for rel, node in _class_defs():
        bases = _base_names(node)
        exceptional = [b for b in bases if b in BUILTIN_EXCEPTIONS or b.endswith(("Error",
                                                                                  "Exception"))]
        if not exceptional or node.name in tree or (rel, node.name) in PACKAGE_PRIVATE:
            continue
        if node.name.startswith("_") and not any(b in tree for b in bases):
            continue  # module-private control flow (checked below)
        offenders.append(f"{rel}:{node.lineno}: class {node.name}({', '.join(bases)})")
    return offenders


def test_every_exception_class_is_in_the_tree():
    offenders = _outside_the_tree()
    assert not offenders, ("derive these from a class of tidb_binlog.errors and draw them "
                           "in its docstring:\n" + "\n".join(offenders))


def _imports(rel: str, tree: ast.Module) -> set[tuple[str, str]]:
    """(module, name) of every ``from module import name`` (relative ones resolved) and
    of every ``alias.name`` where ``import module as alias``."""
    package = _module_name(rel).split(".")
    if not rel.endswith("__init__.py"):
        package = package[:-1]
    out, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            out |= {(module, alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            aliases |= {alias.asname or alias.name: alias.name for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases:
            out.add((aliases[node.value.id], node.attr))
    return out


def test_private_exceptions_stay_where_they_are_raised():
    """A module-private exception is used by its own module only, a package-private one
    within its package only: neither is imported or named from outside."""
    private = {}
    for rel, node in _class_defs():
        if node.name.startswith("_") and any(
                b in BUILTIN_EXCEPTIONS for b in _base_names(node)):
            private[(rel, node.name)] = rel
    private.update(PACKAGE_PRIVATE)
    assert ("tidb_binlog/pump/storage/chaser.py", "_Stopped") in private
    leaks = []
    for rel, tree in _sources().items():
        for module, name in _imports(rel, tree):
            for (home, private_name), scope in private.items():
                if (module, name) == (_module_name(home), private_name) \
                        and not rel.startswith(scope) and rel != home:
                    leaks.append(f"{rel} imports {name} of {home}")
    assert not leaks, "\n".join(leaks)


def test_the_private_exception_check_can_fail():
    tree = ast.parse("from tidb_binlog.config._kinds import _Bad\nfrom . import x\n"
                     "import tidb_binlog.codec.primitives as p\np.Malformed\n")
    assert _imports("spark_on_ray/x.py", tree) == {
        ("tidb_binlog.config._kinds", "_Bad"), ("spark_on_ray", "x"),
        ("tidb_binlog.codec.primitives", "Malformed")}


# -- pymysql: one boundary per role ---------------------------------------------------------

# Every module that imports pymysql, and what ties it to its boundary (errors.py lists the
# three): the boundary itself, or the call that hands the error to it.
PYMYSQL_MODULES = {
    # the upstream emulator's MariaDB: UpstreamError
    "tidb_binlog/upstream/conn.py": "def translate(",
    "tidb_binlog/upstream/core.py": "translate(exc",
    "tidb_binlog/upstream/ddl.py": "translate(exc",
    "tidb_binlog/upstream/meta.py": "translate(exc",
    "tidb_binlog/upstream/txn.py": "translate(exc",
    # the downstream: DownstreamError
    "tidb_binlog/drainer/sinks/mysql/downstream.py": "def translate_error(",
    "tidb_binlog/drainer/sinks/mysql/emulated.py": "translate_error(exc",
    "tidb_binlog/drainer/apply/sql.py": "LiteralRenderer",  # pymysql's escaping, no errors
    # the Spark jobs' own sessions: SparkJobError (QueryFailed in a task)
    "spark_on_ray/sql_task.py": "def translate(",
    "spark_on_ray/diff.py": "raise SparkJobError(",
    "spark_on_ray/load_task.py": "pymysql.cursors.SSCursor",  # a copy task's failure crosses Spark
    # the throwaway test servers: LocalServerError
    "tidb_binlog/testing/mariadb.py": "LocalServerError(",
}


def _imports_pymysql(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "pymysql"
                                                for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pymysql":
            return True
    return False


def test_pymysql_is_used_only_at_its_boundaries():
    importing = {rel for rel, tree in _sources().items() if _imports_pymysql(tree)}
    assert importing == set(PYMYSQL_MODULES), (
        "a new module talks to pymysql: translate its errors at one of the boundaries "
        "errors.py names and list it in PYMYSQL_MODULES")
    for rel, marker in PYMYSQL_MODULES.items():
        assert marker in (ROOT / rel).read_text(), (rel, marker)


def test_the_pymysql_check_can_fail():
    assert _imports_pymysql(ast.parse("from pymysql.constants import CLIENT\n"))
    assert _imports_pymysql(ast.parse("def f():\n    import pymysql.err\n"))
    assert not _imports_pymysql(ast.parse("import pymysqlx\n"))


def test_each_pymysql_boundary_gives_its_class():
    import pymysql

    from spark_on_ray.errors import SparkJobError
    from spark_on_ray.sql_task import translate as spark_translate
    from tidb_binlog.drainer.sinks.mysql.downstream import translate_error
    from tidb_binlog.upstream.conn import translate as upstream_translate

    lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    assert isinstance(upstream_translate(lost, "SELECT 1"), errors.UpstreamUnreachable)
    assert isinstance(translate_error(lost, "SELECT 1", "downstream h:1"),
                      errors.TransientDownstreamError)
    err = spark_translate(lost, "root@h:1", "SELECT 1")
    assert isinstance(err, SparkJobError)
    assert err.where == "root@h:1" and "OperationalError 2013: Lost connection" in str(err)
    assert "(statement: 'SELECT 1')" in str(err)
