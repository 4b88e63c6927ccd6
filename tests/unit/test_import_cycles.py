"""No import cycles between files, and every import inside a function says why it is there.

The file import graph is built from the source with ``ast`` (nothing is imported), over
``tidb_binlog/``, ``actors/``, ``cluster/`` and ``spark_on_ray/``. Every import statement
counts: at module level, inside functions, and under ``if TYPE_CHECKING:`` (a type-only
cycle is still two files that cannot be understood apart). An import names a file when
its module, or for ``from X import name`` the submodule ``X.name``, is one of ours; the
package ``__init__.py`` that Python runs on the way is not an edge (else every package
whose ``__init__`` re-exports its modules would be a cycle).

A cycle is a strongly connected component of that graph. ``ALLOWED_CYCLE_FILES`` lists
the files of cycles that are known and being removed; the test fails when a cycle holds
a file outside it, and when a listed file is in no cycle any more (shrink the list).

Imports inside functions hide cycles and surprise readers, so each one carries its
reason in a comment on the same line or the line above (an optional heavy dependency,
a cycle with ray, a command's start-up time). ``lazy_imports_allowed.txt`` (next to this
file) lists the ones not yet converted or explained; entries that no longer exist fail
the test so the list stays true.
"""

from __future__ import annotations

import ast
import functools
import io
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("tidb_binlog", "actors", "cluster", "spark_on_ray")
LAZY_ALLOWED_FILE = Path(__file__).with_name("lazy_imports_allowed.txt")

# Cycles known and being removed (none: the drainer pipeline's cycle is gone).
ALLOWED_CYCLE_FILES: frozenset[str] = frozenset()


# -- reading the tree ------------------------------------------------------------------------
def _source_files() -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the roots."""
    modules = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


class _Imports(ast.NodeVisitor):
    """Each import statement with its line and the function it sits in ('' at module level)."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, str]] = []
        self._scope: list[str] = []
        self._in_function = 0

    def _enter(self, node, is_function: bool) -> None:
        self._scope.append(node.name)
        self._in_function += is_function
        self.generic_visit(node)
        self._in_function -= is_function
        self._scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._enter(node, False)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._enter(node, True)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._enter(node, True)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node, ".".join(self._scope) if self._in_function else ""))

    visit_ImportFrom = visit_Import


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names (relative ones resolved against ``path``)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if _is_package(path) else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, path: Path, node, modules: dict[str, Path]) -> list[str]:
    """Our modules that one import statement loads by name."""
    out = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = _resolve(module, path, node)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                 for a in node.names]
    for name in names:
        # `import a.b.c` loads a.b.c; the file of the longest known prefix is the target.
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts and ".".join(parts) != module:
            out.append(".".join(parts))
    return out


@functools.cache  # one parse of the tree for all three tests
def _graph():
    modules = _source_files()
    edges: dict[str, dict[str, list[int]]] = {m: {} for m in modules}
    lazy: list[tuple[str, int, str, str]] = []  # (file, line, function, what)
    for module, path in modules.items():
        text = path.read_text()
        visitor = _Imports()
        visitor.visit(ast.parse(text, filename=str(path)))
        comments = _comment_lines(text)
        for node, function in visitor.found:
            for target in _targets(module, path, node, modules):
                edges[module].setdefault(target, []).append(node.lineno)
            if function and not (node.lineno in comments or node.lineno - 1 in comments):
                what = ", ".join(a.name for a in node.names)
                if isinstance(node, ast.ImportFrom):
                    what = f"{'.' * node.level}{node.module or ''}: {what}"
                lazy.append((_rel(path), node.lineno, function, what))
    return modules, edges, lazy


def _comment_lines(text: str) -> set[int]:
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            lines.add(tok.start[0])
    return lines


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _cycles(edges: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(component: list[str], modules, edges) -> str:
    lines = [" <-> ".join(_rel(modules[m]) for m in component)]
    for a in component:
        for b, where in sorted(edges[a].items()):
            if b in component:
                lines.append(f"  {_rel(modules[a])}:{','.join(map(str, where))} imports "
                             f"{_rel(modules[b])}")
    return "\n".join(lines)


# -- the checks ------------------------------------------------------------------------------
def test_the_graph_sees_imports():
    """The walker really reads the tree (a broken walker would find no cycle anywhere)."""
    modules, edges, _ = _graph()
    assert "tidb_binlog.pump.server" in modules and "actors.pump" in modules
    assert "tidb_binlog.pump.server" in edges["actors.pump"]
    assert _cycles({"a": {"b": [1]}, "b": {"c": [1]}, "c": {"a": [1]}, "d": {"a": [1]}}) == \
        [["a", "b", "c"]]


def test_no_import_cycles_between_files():
    modules, edges, _ = _graph()
    cycles = _cycles(edges)
    unexpected = [c for c in cycles
                  if not {_rel(modules[m]) for m in c} <= ALLOWED_CYCLE_FILES]
    assert not unexpected, ("import cycles between files (break them: move the shared part "
                            "into a module both import, or pass it in):\n" +
                            "\n".join(_describe(c, modules, edges) for c in unexpected))
    in_cycles = {_rel(modules[m]) for c in cycles for m in c}
    gone = sorted(ALLOWED_CYCLE_FILES - in_cycles)
    assert not gone, (f"{gone} are in no import cycle any more: remove them from "
                      "ALLOWED_CYCLE_FILES in tests/unit/test_import_cycles.py")


def _allowed_lazy() -> set[tuple[str, str, str]]:
    allowed = set()
    for raw in LAZY_ALLOWED_FILE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            file, function, what = (part.strip() for part in line.split("|"))
            allowed.add((file, function, what))
    return allowed


def test_imports_inside_functions_state_their_reason():
    _, _, lazy = _graph()
    allowed = _allowed_lazy()
    found = {(file, function, what) for file, _, function, what in lazy}
    missing = sorted((f, line, fn, what) for f, line, fn, what in lazy
                     if (f, fn, what) not in allowed)
    assert not missing, (
        "imports inside functions without a stated reason: move them to module level, or say "
        "why on the line above (optional dependency, cycle with ray, start-up time):\n" +
        "\n".join(f"  {f}:{line} in {fn}: {what}" for f, line, fn, what in missing))
    stale = sorted(allowed - found)
    assert not stale, (f"{LAZY_ALLOWED_FILE.name} lists imports that are gone or now carry "
                       "their reason; remove these lines:\n" +
                       "\n".join(f"  {f} | {fn} | {what}" for f, fn, what in stale))


if __name__ == "__main__":
    # Prints the lines of lazy_imports_allowed.txt for the imports inside functions that
    # state no reason today: for shrinking the list, never for growing it unread.
    for file, _, function, what in sorted(_graph()[2]):
        print(f"{file} | {function} | {what}")
