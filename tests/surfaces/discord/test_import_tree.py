"""bot's modules outside bot/core import each other as a tree: no import circle, counting every
import (at the top, inside a function, under TYPE_CHECKING). STYLE.md: a circle, even one hidden
behind TYPE_CHECKING, means a seam is in the wrong place (the Discord client once built its parts
from itself and they imported it back). bot/core's own circles are issue 23.3's other part."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def modules() -> dict[str, Path]:
    """Every module of the bot package by its dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted((ROOT / "bot").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that the module imports anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, `level - 1` packages up
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `from bot.core.models import Group` -> bot.core.models
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def in_circles(graph: dict[str, set[str]]) -> list[str]:
    """The modules that import themselves through others."""
    circular = []
    for start in graph:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
        if start in seen:
            circular.append(start)
    return sorted(circular)


def test_the_finder_sees_a_circle_hidden_anywhere() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert in_circles(graph) == ["a", "b", "c"]
    assert in_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_outside_core() -> None:
    known = modules()
    assert "bot.surfaces.discord.client" in known
    graph = {name: imported(name, path, known) for name, path in known.items()}
    outside_core = [m for m in in_circles(graph) if not m.startswith("bot.core")]
    assert outside_core == [], f"in an import circle: {', '.join(outside_core)}"
