"""bot/core imports nothing but the standard library and bot.core (STYLE.md's dependency rule);
only wiring names the whole Store."""
import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "bot" / "core"
FORBIDDEN = {"discord", "openai", "aiosqlite", "tiktoken", "dotenv", "storage", "aiohttp", "httpx", "httpx2", "sqlite3"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
            if node.module == "bot" or (node.module.startswith("bot.") and not node.module.startswith("bot.core")):
                roots.add(node.module)
    return roots


def test_core_imports_only_stdlib_and_core():
    files = sorted(CORE.rglob("*.py"))
    assert files, "bot/core has no modules"
    problems = []
    for path in files:
        for root in imported_roots(path):
            allowed = root in sys.stdlib_module_names or root == "bot"
            if root in FORBIDDEN or (root.startswith("bot.") and not root.startswith("bot.core")) or not allowed:
                problems.append(f"{path.relative_to(CORE.parent.parent)} imports {root}")
    assert not problems, "\n".join(problems)


WHOLE_STORE_NAMED_BY = {"bot/wiring.py"}


def test_only_wiring_names_the_whole_store():
    """A consumer names the store roles it uses (`HasThread`, a Protocol of holders), never the whole `Store`
    (issue 32): only wiring, which builds the parts, imports it."""
    root = CORE.parent.parent
    naming = set()
    for path in sorted([*(root / "bot").rglob("*.py"), *(root / "storage").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.ImportFrom) and node.module == "bot.core.ports"
                    and any(alias.name == "Store" for alias in node.names)):
                naming.add(path.relative_to(root).as_posix())
    assert naming <= WHOLE_STORE_NAMED_BY, sorted(naming - WHOLE_STORE_NAMED_BY)
