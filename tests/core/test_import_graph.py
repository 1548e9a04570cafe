"""bot/core's modules import one another as a tree: no circle, not even one hidden behind
`TYPE_CHECKING` or inside a function (STYLE.md: a circle means a seam is in the wrong place).
The engine composes its parts; no part imports it back."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "bot" / "core"


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def core_imports(path: Path, modules: set[str]) -> set[str]:
    """The bot.core modules `path` imports anywhere in it (top level, in functions, under TYPE_CHECKING)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    paths = sorted(CORE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): core_imports(p, modules) - {module_name(p)} for p in paths}


def circle_through(edges: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> start, or None."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(edges.get(node, ())):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_the_walk_sees_the_imports() -> None:
    edges = graph()
    assert "bot.core.ports" in edges["bot.core.runtime.engine"]
    assert "bot.core.models" in edges["bot.core.ports"]


def test_a_circle_is_found() -> None:
    assert circle_through({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a") == ["a", "b", "c", "a"]
    assert circle_through({"a": {"b"}, "b": {"c"}, "c": set()}, "a") is None


def test_no_core_module_is_on_an_import_circle() -> None:
    edges = graph()
    circles = [" -> ".join(path) for m in sorted(edges) if (path := circle_through(edges, m)) is not None]
    assert not circles, "\n".join(circles)


def test_no_part_of_the_engine_imports_it() -> None:
    edges = graph()
    importers = sorted(m for m, targets in edges.items() if "bot.core.runtime.engine" in targets)
    assert importers == ["bot.core.verbs.admin"], importers  # the verbs the surfaces call act on an engine


LAYERS = (  # bot/core/__init__.py draws them; a module imports only its own layer and the ones before it
    ("bot.core.settings",),
    ("bot.core", "bot.core.models", "bot.core.errors"),
    ("bot.core.rules",),
    ("bot.core.ports",),
    ("bot.core.features",),
    ("bot.core.runtime", "bot.core.record"),  # side by side: neither imports the other
    ("bot.core.verbs",),
)


def layer(module: str) -> tuple[int, str]:
    """The layer of a module (its index, and the name that places it: the longest prefix)."""
    best, found = "", -1
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, found = name, index
    return found, best


def test_every_core_module_has_a_layer() -> None:
    assert [m for m in graph() if layer(m)[0] < 0] == []
    assert layer("bot.core.rules.tags") == (2, "bot.core.rules")
    assert layer("bot.core.ports")[0] == 3 and layer("bot.core.verbs.admin")[0] == 6


def test_no_core_module_imports_a_later_layer_or_a_neighbour() -> None:
    wrong = []
    for module, targets in sorted(graph().items()):
        (mine, my_name), later = layer(module), []
        for target in sorted(targets):
            theirs, their_name = layer(target)
            if theirs > mine or (theirs == mine and their_name != my_name):
                later.append(target)
        wrong += [f"{module} imports {t}" for t in later]
    assert not wrong, "\n".join(wrong)
