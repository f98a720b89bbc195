"""zmesh's modules import each other without cycles (issue 8).

Walks every module's imports with `ast`: module-level and function-level ones (a lazy import
inside a function hides a cycle, it does not remove it), but not those under
`if TYPE_CHECKING:` (never run) and not a module's own parent packages (importing a module
always runs them first).
"""

from __future__ import annotations

import ast
from pathlib import Path

import zmesh

ROOT = Path(zmesh.__file__).parent


def module_names() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ("zmesh", *path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(name: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """zmesh modules that `name` imports at run time: {module: line}."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit_stmt(stmt)
                continue
            visit_stmt(child)

    def visit_stmt(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.setdefault(sub if sub in known else base, node.lineno)
        else:
            visit(node)

    visit(ast.parse(path.read_text(), str(path)))
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return {m: line for m, line in found.items()
            if m in known and m != name and m not in ancestors}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_zmesh_has_no_import_cycles():
    known = module_names()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    found = cycles(graph)
    report = [
        [f"{a} -> {b} (line {graph[a][b]})" for a in comp for b in graph[a] if b in comp]
        for comp in found
    ]
    assert found == [], f"import cycles: {report}"


def test_the_cycle_finder_sees_a_lazy_import_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 3}, "c": {"a": 9}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c"]]
