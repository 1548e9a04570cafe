"""The dependency lock agrees with pyproject.toml, and the code imports only what it declares.

pyproject.toml keeps ranges (each lower bound the version the code is tested with);
constraints.txt pins every package an install takes, for Python 3.11 on Linux
(`pip install -c constraints.txt -e '.[test]'`, as README and .ci/run install). Checked here,
without network:

- every dependency of pyproject.toml (its extras too) is pinned in the lock, inside its range:
  a dependency added without its pin fails, naming it;
- the lock is only pins (`name==version`, once each), never the project itself;
- what the pinned packages need in turn (read from the installed ones whose version is the
  pinned one) is pinned too, inside their ranges; where every package reached is installed at
  its pin, nothing else is pinned (a pin no package needs is left over from an old lock);
- every third-party module imported by bot/ and storage/ comes from a runtime dependency, by
  bench/ from one of those or the bench extra, by tests/ from one of those or the test extra.

CONTRIBUTING.md ("Dependencies") says how to update the lock.
"""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = "constraints.txt"
PROJECT = "roundtable"
# The platform the lock is for: markers are evaluated there (the extra is set per requirement).
TARGET = {
    "python_version": "3.11", "python_full_version": "3.11.7", "implementation_name": "cpython",
    "platform_python_implementation": "CPython", "implementation_version": "3.11.7", "os_name": "posix",
    "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
    "platform_release": "", "platform_version": "",
}
FIRST_PARTY = {"bot", "storage", "bench", "tests", "__future__"}
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#\\]+)$")

Metadata = Callable[[str], "tuple[Version, list[Requirement]] | None"]  # installed version and requirements


@dataclass(frozen=True)
class Declared:
    """One line of pyproject.toml's dependencies: where it is ("dependencies" or an extra) and what."""

    where: str
    requirement: Requirement


def declared(pyproject: Mapping[str, object]) -> list[Declared]:
    project = pyproject["project"]
    assert isinstance(project, dict)
    out = [Declared("dependencies", Requirement(r)) for r in project.get("dependencies", [])]
    for extra, lines in project.get("optional-dependencies", {}).items():
        out += [Declared(f"[{extra}]", Requirement(r)) for r in lines]
    return out


def read_lock(text: str) -> tuple[dict[str, Version], list[str]]:
    """The lock's pins by canonical name, and what is wrong with its lines."""
    pins: dict[str, Version] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if match is None:
            problems.append(f"{LOCK}:{number}: {line!r} is not a pin (name==version, nothing else)")
            continue
        name = canonicalize_name(match["name"])
        try:
            version = Version(match["version"])
        except InvalidVersion:
            problems.append(f"{LOCK}:{number}: {match['version']!r} is not a version")
            continue
        if name in pins:
            problems.append(f"{LOCK}:{number}: {name} is pinned twice")
        elif name == PROJECT:
            problems.append(f"{LOCK}:{number}: the lock pins the project itself ({line})")
        pins[name] = version
    return pins, problems


def _applies(marker: Marker | None, extras: Iterable[str]) -> bool:
    if marker is None:
        return True
    return any(marker.evaluate({**TARGET, "extra": extra}) for extra in ("", *extras))


def lock_problems(roots: list[Declared], pins: Mapping[str, Version], metadata: Metadata) -> list[str]:
    """What in the lock does not agree with pyproject.toml and with what the pinned packages need."""
    problems: list[str] = []
    queue: list[tuple[str, Requirement]] = [
        (f"pyproject.toml {d.where}", d.requirement) for d in roots if _applies(d.requirement.marker, ())]
    expanded: set[tuple[str, frozenset[str]]] = set()
    complete = True  # every package reached is installed at its pin (its requirements were read)
    while queue:
        needed_by, req = queue.pop(0)
        name = canonicalize_name(req.name)
        pinned = pins.get(name)
        if pinned is None:
            problems.append(f"{name} is not pinned in {LOCK} (needed by {needed_by}: '{req}'); "
                            f"add it (CONTRIBUTING.md, 'Dependencies')")
            continue
        if not req.specifier.contains(pinned, prereleases=True):
            problems.append(f"{LOCK} pins {name}=={pinned}, outside {needed_by}'s '{req}'")
        key = (name, frozenset(req.extras))
        if key in expanded:
            continue
        expanded.add(key)
        found = metadata(name)
        if found is None or found[0] != pinned:
            complete = False
            continue
        for sub in found[1]:
            if _applies(sub.marker, req.extras):
                queue.append((f"{name} {pinned}", sub))
    if complete and not problems:
        reached = {name for name, _ in expanded}
        problems += [f"{LOCK} pins {name}=={pins[name]}, which nothing needs any more" for name in sorted(pins)
                     if name not in reached]
    return problems


def installed(name: str) -> tuple[Version, list[Requirement]] | None:
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return Version(dist.version), [Requirement(r) for r in dist.requires or ()]


# the real files -----------------------------------------------------------------------------
def _pyproject() -> list[Declared]:
    return declared(tomllib.loads((ROOT / "pyproject.toml").read_text()))


def test_the_lock_pins_every_dependency_inside_its_range() -> None:
    pins, problems = read_lock((ROOT / LOCK).read_text())
    problems += lock_problems(_pyproject(), pins, installed)
    assert not problems, "\n".join(problems)


def test_install_commands_use_the_lock() -> None:
    """Every command in the docs and CI that installs the project installs it with the lock."""
    for path in ("README.md", ".ci/run", "CONTRIBUTING.md", *sorted(p.relative_to(ROOT).as_posix()
                                                                    for p in (ROOT / "docs").glob("*.md"))):
        text = (ROOT / path).read_text()
        installs = [i for i in re.findall(r"pip install [^\n`&]*", text)
                    if any(word.strip("'\"").startswith(".") for word in i.split())]  # the project: . or '.[x]'
        unlocked = [i.strip() for i in installs if f"-c {LOCK}" not in i]
        assert not unlocked, f"{path} installs without the lock: {unlocked}"
    assert "-c constraints.txt -e '.[test]'" in (ROOT / ".ci/run").read_text()


def _statements(nodes: Iterable[ast.AST]) -> Iterable[ast.AST]:
    """Every statement, nested ones too (imports are statements: expressions need no visit)."""
    for node in nodes:
        yield node
        for block in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, block, None)
            if isinstance(inner, list):
                yield from _statements(inner)


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in _statements(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots - FIRST_PARTY - set(sys.stdlib_module_names)


def test_every_imported_package_is_declared() -> None:
    by_where: dict[str, set[str]] = {}
    for d in _pyproject():
        by_where.setdefault(d.where, set()).add(canonicalize_name(d.requirement.name))
    runtime = by_where["dependencies"]
    allowed = {"bot": runtime, "storage": runtime, "bench": runtime | by_where["[bench]"],
               "tests": runtime | by_where["[test]"]}
    providers = importlib.metadata.packages_distributions()
    problems = []
    for folder, names in allowed.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            for module in sorted(imported_roots(path)):
                # a module of a package not installed here (the bench extra in CI): named like its package
                dists = {canonicalize_name(d) for d in providers.get(module, [module])}
                if not dists & names:
                    problems.append(f"{path.relative_to(ROOT)} imports {module} (from {', '.join(sorted(dists))}), "
                                    f"which pyproject.toml does not declare for {folder}/")
    assert not problems, "\n".join(problems)


# the checks themselves, on made-up files ----------------------------------------------------
def _roots(*lines: str, where: str = "dependencies") -> list[Declared]:
    return [Declared(where, Requirement(line)) for line in lines]


def _no_metadata(name: str) -> None:
    return None


@pytest.mark.parametrize("lock, expected", [
    ("a==1.0\n# via x\n    # via y\n\nb==2.0rc1\n", []),
    ("-e .\n", ["constraints.txt:1: '-e .' is not a pin (name==version, nothing else)"]),
    ("a>=1.0\n", ["constraints.txt:1: 'a>=1.0' is not a pin (name==version, nothing else)"]),
    ("a==1.0 ; python_version < '3.12'\n", [
        "constraints.txt:1: \"a==1.0 ; python_version < '3.12'\" is not a pin (name==version, nothing else)"]),
    ("A_b==1.0\na-B==1.1\n", ["constraints.txt:2: a-b is pinned twice"]),
    ("a==one\n", ["constraints.txt:1: 'one' is not a version"]),
    ("roundtable==0.1.0\n", ["constraints.txt:1: the lock pins the project itself (roundtable==0.1.0)"]),
])
def test_read_lock(lock: str, expected: list[str]) -> None:
    assert read_lock(lock)[1] == expected


def test_a_dependency_without_its_pin_is_named() -> None:
    roots = _roots("pytest>=9", "pytest-xdist>=3.8", where="[test]")
    assert lock_problems(roots, {"pytest": Version("9.2.0")}, _no_metadata) == [
        "pytest-xdist is not pinned in constraints.txt (needed by pyproject.toml [test]: 'pytest-xdist>=3.8'); "
        "add it (CONTRIBUTING.md, 'Dependencies')"]


def test_a_pin_outside_the_range_is_named() -> None:
    roots = _roots("openai>=3.57,<4", "Discord.py>=2.7")
    pins = {"openai": Version("4.0.1"), "discord-py": Version("2.6.0")}
    assert lock_problems(roots, pins, _no_metadata) == [
        "constraints.txt pins openai==4.0.1, outside pyproject.toml dependencies's 'openai<4,>=3.57'",
        "constraints.txt pins discord-py==2.6.0, outside pyproject.toml dependencies's 'Discord.py>=2.7'"]


def test_markers_are_read_for_python_311_on_linux() -> None:
    roots = _roots("tomli>=2; python_version < '3.11'", "pywin32; sys_platform == 'win32'",
                   "uvloop; os_name == 'posix'")
    assert lock_problems(roots, {}, _no_metadata) == [
        "uvloop is not pinned in constraints.txt (needed by pyproject.toml dependencies: "
        "'uvloop; os_name == \"posix\"'); add it (CONTRIBUTING.md, 'Dependencies')"]


def test_what_the_pinned_packages_need_is_pinned_too_and_nothing_else() -> None:
    packages = {
        "pytest-xdist": (Version("3.8.0"), [Requirement("execnet>=2.1"), Requirement("pytest>=7"),
                                            Requirement("psutil>=3; extra == 'psutil'")]),
        "pytest": (Version("9.2.0"), [Requirement("pluggy<2,>=1.5"), Requirement("colorama; sys_platform == 'win32'")]),
        "pluggy": (Version("1.7.0"), []),
        "execnet": (Version("2.1.1"), []),
        "psutil": (Version("7.0.0"), []),
    }

    def metadata(name: str) -> tuple[Version, list[Requirement]] | None:
        return packages.get(name)

    roots = _roots("pytest-xdist>=3.8", where="[test]")
    pins = {name: v for name, (v, _) in packages.items() if name != "psutil"}
    assert lock_problems(roots, pins, metadata) == []
    missing = {k: v for k, v in pins.items() if k != "execnet"}
    assert lock_problems(roots, missing, metadata) == [
        "execnet is not pinned in constraints.txt (needed by pytest-xdist 3.8.0: 'execnet>=2.1'); "
        "add it (CONTRIBUTING.md, 'Dependencies')"]
    assert lock_problems(roots, {**pins, "pluggy": Version("2.0")}, metadata) == [
        "constraints.txt pins pluggy==2.0, outside pytest 9.2.0's 'pluggy<2,>=1.5'"]
    assert lock_problems(roots, {**pins, "psutil": Version("7.0.0")}, metadata) == [
        "constraints.txt pins psutil==7.0.0, which nothing needs any more"]
    # the extra asked for brings its requirements in
    assert lock_problems(_roots("pytest-xdist[psutil]>=3.8", where="[test]"), pins, metadata) == [
        "psutil is not pinned in constraints.txt (needed by pytest-xdist 3.8.0: 'psutil>=3; extra == \"psutil\"'); "
        "add it (CONTRIBUTING.md, 'Dependencies')"]
    # a package installed at another version than its pin is not read: nothing is called left over
    other = {**packages, "pytest": (Version("8.0.0"), [])}
    assert lock_problems(roots, pins, lambda name: other.get(name)) == []
