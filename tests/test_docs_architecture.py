"""What docs/architecture.md and docs/extending.md cite exists in the code.

The pages name the code in backticks. Each citation of one of these shapes must resolve:

- ``path.py::Name`` or ``path.py::Class.member``: the file exists and defines ``Name`` at its top
  level (a class, a function, an assignment or an import it hands on), ``member`` in ``Class``
  (a method, a class attribute, a field, a ``self.member`` set in a method, or inherited);
- a path ``batch/steps.py``, ``airflow_trident/dag.py``, ``bench/commit.py``, ``runtime/spark/``:
  the file or folder exists (relative to ``airflow_trident/`` or to the repository; a bare file
  name such as ``steps.py`` must exist somewhere in the package);
- a dotted name ``airflow_trident.x.y``, ``runtime.spark.session.remote_session`` (its first part
  a module or package of ``airflow_trident``): a module, then names inside it;
- ``Class.member`` where ``Class`` is a class of ours: the member exists; ``module.name`` where
  ``module`` is the stem of a file of the package (``routes.process_by``): a file of that stem
  defines it;
- a bare name in CamelCase (``BatchSteps``) or snake_case (``commit_in_turn``, ``keep_txids``):
  the package's code has it (defines it, refers to it, or has it in a string: a config option, a
  table) or ``pyproject.toml`` does.

Files and folders are read with ``ast``, nothing is imported but a class with a base from outside
the package (``BaseOperator``, ``Exception``), whose inherited members are asked of the class
itself. The check runs on any page: ``TRIDENT_DOCS_PAGES=/tmp/arch_old.md`` adds one (e.g. the
page of an older commit: ``git show COMMIT:docs/architecture.md > /tmp/arch_old.md``).
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "airflow_trident"
PAGES = [ROOT / "docs" / "architecture.md", ROOT / "docs" / "extending.md"]
EXTRA = [Path(p) for p in os.environ.get("TRIDENT_DOCS_PAGES", "").split(os.pathsep) if p]

_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_SPAN = re.compile(r"`([^`]+)`")
_PATH = re.compile(r"(?<![\w./<>-])((?:[\w*-]+/)*[\w*-]+\.py)(?:::([A-Za-z_][\w.]*))?(?![\w/])")
_FOLDER = re.compile(r"^((?:[\w-]+/)+)$")
# first parts of a dotted name that are other projects' (Spark's session ``spark``, Airflow...)
_EXTERNAL = {"spark", "pyspark", "airflow", "kazoo", "pyiceberg", "deltalake", "sqlalchemy"}
_BARE = re.compile(r"^([A-Z][a-z0-9]+[A-Z]\w*|[a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?:\(.*\))?$", re.S)
_DOTTED = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?$")


@dataclass
class ClassInfo:
    module: str
    members: set[str] = field(default_factory=set)
    bases: list[str] = field(default_factory=list)


@dataclass
class ModuleInfo:
    names: set[str]
    classes: dict[str, ClassInfo]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _class_info(node: ast.ClassDef, module: str) -> ClassInfo:
    info = ClassInfo(module, bases=[ast.unparse(b).split("[")[0] for b in node.bases])
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            info.members.add(item.name)
        elif isinstance(item, ast.Assign):
            info.members.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            info.members.add(item.target.id)
    for sub in ast.walk(node):  # self.x = ... in its methods
        targets = []
        if isinstance(sub, ast.Assign):
            targets = sub.targets
        elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
            targets = [sub.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                info.members.add(target.attr)
    return info


@cache
def module_info(path: Path) -> ModuleInfo:
    """The top-level names and the classes of one Python file, read with ``ast``."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    classes: dict[str, ClassInfo] = {}
    module = _module_name(path)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            classes[node.name] = _class_info(node, module)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return ModuleInfo(names, classes)


@cache
def all_classes() -> dict[str, list[ClassInfo]]:
    """Every class of the package by name (a name may be defined in more than one module)."""
    found: dict[str, list[ClassInfo]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, info in module_info(path).classes.items():
            found.setdefault(name, []).append(info)
    return found


def _has_member(cls: ClassInfo, member: str, seen: frozenset[str] = frozenset()) -> bool:
    if member in cls.members:
        return True
    for base in cls.bases:
        short = base.split(".")[-1]
        ours = all_classes().get(short)
        if ours:
            if short not in seen and any(_has_member(b, member, seen | {short}) for b in ours):
                return True
        elif short not in {"object", "Protocol", "Generic"}:
            # A base from outside the package: ask the class itself.
            try:
                klass = getattr(importlib.import_module(cls.module), _class_name(cls))
            except Exception:  # an unimportable module: the member is missing
                return False
            return hasattr(klass, member)
    return False


def _class_name(cls: ClassInfo) -> str:
    return next(name for name, infos in all_classes().items() if cls in infos)


def _resolve_file(text: str) -> list[Path]:
    """The files a cited path means: under the package, under the repository, or by bare name."""
    if text.startswith("airflow_trident/"):
        candidates = [ROOT / text]
    elif "/" in text:
        candidates = [PACKAGE / text, ROOT / text]
    else:
        candidates = [PACKAGE / text, ROOT / text, *PACKAGE.rglob(text)]
    found: list[Path] = []
    for candidate in candidates:
        if "*" in candidate.name:
            found.extend(candidate.parent.glob(candidate.name))
        elif candidate.is_file():
            found.append(candidate)
    return found


def _names_in_module(path: Path, chain: list[str]) -> bool:
    """``chain`` (Name, or Class.member...) is defined in the file at ``path``."""
    info = module_info(path)
    first, rest = chain[0], chain[1:]
    if first not in info.names:
        return False
    if not rest:
        return True
    cls = info.classes.get(first)
    if cls is None:  # an imported class handed on, or a module: look it up where it is defined
        ours = all_classes().get(first)
        return bool(ours) and any(_has_member(c, rest[0]) for c in ours) and len(rest) == 1
    return _has_member(cls, rest[0]) and len(rest) == 1


def _module_file(parts: list[str]) -> tuple[Path, int] | None:
    """The longest prefix of ``parts`` (below ``airflow_trident``) that is a module or package."""
    for end in range(len(parts), 0, -1):
        base = PACKAGE.joinpath(*parts[:end])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate, end
    return None


def _top_level_parts() -> set[str]:
    return {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}


@cache
def known_names() -> frozenset[str]:
    """Every identifier the package's code defines or refers to, and every word of its strings
    and of ``pyproject.toml``."""
    names: set[str] = set()
    words = re.compile(r"[A-Za-z_]\w*")
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.update(words.findall(node.asname or node.name))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.update(words.findall(node.value))
    names.update(words.findall((ROOT / "pyproject.toml").read_text()))
    return frozenset(names)


def check_span(span: str) -> list[str]:
    """Why each citation in one backticked span does not resolve (empty: all resolve)."""
    problems: list[str] = []
    span = span.strip()
    for path_text, name in _PATH.findall(span):
        files = _resolve_file(path_text)
        if not files:
            problems.append(f"{path_text}: no such file")
        elif name and not any(_names_in_module(f, name.split(".")) for f in files):
            problems.append(f"{path_text}::{name}: no such name in {path_text}")
    if _PATH.search(span):
        return problems
    folder = _FOLDER.match(span)
    if folder:
        text = folder.group(1).removeprefix("airflow_trident/")
        if not ((PACKAGE / text).is_dir() or (ROOT / folder.group(1)).is_dir()):
            problems.append(f"{span}: no such folder")
        return problems
    bare = _BARE.match(span)
    if bare:
        if bare.group(1) not in known_names():
            problems.append(f"{span}: the code has no {bare.group(1)}")
        return problems
    dotted = _DOTTED.match(span)
    if not dotted:
        return problems
    parts = dotted.group(1).split(".")
    if parts[0] in _EXTERNAL:
        return problems
    if parts[0] == "airflow_trident":
        parts = parts[1:]
        if not parts:
            return problems
    elif parts[0] not in _top_level_parts():
        classes = all_classes().get(parts[0])
        if classes:
            if len(parts) != 2 or not any(_has_member(c, parts[1]) for c in classes):
                problems.append(f"{span}: {parts[0]} has no {'.'.join(parts[1:])}")
            return problems
        modules = sorted(PACKAGE.rglob(f"{parts[0]}.py"))  # a module named from its folder
        if modules and not any(_names_in_module(m, parts[1:]) for m in modules):
            problems.append(f"{span}: {'.'.join(parts[1:])} not in any {parts[0]}.py")
        return problems
    module = _module_file(parts)
    if module is None:
        problems.append(f"{span}: no such module")
        return problems
    path, used = module
    rest = parts[used:]
    if rest and not _names_in_module(path, rest):
        problems.append(f"{span}: {'.'.join(rest)} not in {_module_name(path)}")
    return problems


def stale_citations(page: str) -> list[str]:
    """Every citation of ``page`` (markdown text) that does not resolve, in page order."""
    text = _FENCE.sub("", page)
    return [problem for span in _SPAN.findall(text) for problem in check_span(span)]


def citations(page: str) -> list[str]:
    """The spans the check reads as citations (paths, dotted names)."""
    text = _FENCE.sub("", page)
    return [
        s
        for s in _SPAN.findall(text)
        if _PATH.search(s) or _FOLDER.match(s) or _BARE.match(s) or _DOTTED.match(s)
    ]


@pytest.mark.parametrize(
    "page", [*PAGES, *EXTRA], ids=[p.name for p in PAGES] + [str(p) for p in EXTRA]
)
def test_every_citation_of_the_page_exists(page: Path) -> None:
    # Given a page naming the code, When each citation is looked up, Then it is there
    text = page.read_text()
    assert len(citations(text)) > 20, f"{page} cites little code: is it the page?"
    assert stale_citations(text) == []


@pytest.mark.parametrize(
    ("span", "stale"),
    [
        ("batch/steps.py::BatchSteps", False),
        ("batch/steps.py::no_such_step", True),
        ("batch/nowhere.py", True),
        ("coordination/store.py::CoordinatorStore.no_such_call", True),
        ("airflow_trident.batch.steps.BatchSteps", False),
        ("airflow_trident.batch.no_such_module", True),
        ("runtime.spark.session.remote_session", False),
        ("runtime.spark.session.no_such_function", True),
        ("BatchSteps.no_such_method", True),
        ("routes.process_by(route, ...)", False),
        ("routes.no_such_route", True),
        ("bench/commit.py", False),
        ("runtime/spark/", False),
        ("commit_in_turn", False),
        ("keep_txids", False),
        ("commit_on_connect", True),
        ("NoSuchApplier", True),
        ("runtime/nowhere/", True),
        ("spark.connect.session.manager.defaultSessionTimeout", False),
    ],
)
def test_the_check_tells_a_stale_citation_from_a_live_one(span: str, stale: bool) -> None:
    # Given one citation, When it is checked, Then it is stale exactly when the code lacks it
    assert bool(check_span(span)) is stale, check_span(span)


def test_the_page_before_its_check_had_stale_citations() -> None:
    # Given docs/architecture.md as it was before this check (commit f2f86d0)
    try:
        old = subprocess.run(
            ["git", "show", "f2f86d0:docs/architecture.md"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout with that commit")
    # When it is checked against today's code, Then what it cited and the code lost is found
    stale = stale_citations(old)
    assert stale, "the old page resolves: the check finds nothing"
