"""The documentation stands alone: no Markdown file or module docstring sends the reader to
a file outside the repository (a clone holds nothing else), and every relative Markdown
link and every `*.md` a docstring names exists in the repository."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[1]
# Not the project's own text: installed packages, servers' state, build output.
SKIPPED_DIRS = {".git", ".venv", ".state", "target", "dbt_packages", "node_modules", "logs",
                "__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist"}
OUTSIDE = re.compile(r"\.\./(?:\.\./)*shared\b|\.\./shared/|DESIGN\.md")
# [text](target) and [text]: target; images too. Targets with a scheme are not files.
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
                           r"|^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
# A dbt docs block (`{% docs name %}`) is shown on the docs site, whose root holds the dbt
# project's asset-paths: its links start at the dbt project folder.
DBT_DOCS_BLOCK = re.compile(r"\{%-?\s*docs\s")
DBT_PROJECT = PROJECT_DIR / "dbt"
MD_NAME = re.compile(r"(?<![\w/.-])((?:\.{1,2}/)?[\w./-]*[\w-]\.md)\b")


def _files(suffix: str) -> list[Path]:
    return sorted(p for p in PROJECT_DIR.rglob(f"*{suffix}")
                  if not SKIPPED_DIRS & set(p.relative_to(PROJECT_DIR).parts[:-1]))


def _inside(target: Path) -> bool:
    return target.resolve().is_relative_to(PROJECT_DIR)


def _link_problem(source: Path, target: str, base: Path | None = None) -> str | None:
    """Why a link of `source` to `target` (relative ones from `base`, by default the
    source's folder) is broken (None: fine or not a file link)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
        return None  # http:, mailto:, an anchor in the same page
    path = target.split("#", 1)[0].split("?", 1)[0]
    base = base or source.parent
    resolved = (PROJECT_DIR / path.lstrip("/")) if path.startswith("/") else base / path
    if not _inside(resolved):
        return f"{target}: outside the repository"
    if not resolved.exists():
        return f"{target}: no such file in the repository"
    return None


def markdown_problems(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    problems = [f"mentions {m.group(0)!r}" for m in OUTSIDE.finditer(text)]
    base = DBT_PROJECT if DBT_DOCS_BLOCK.search(text) else path.parent
    for match in MARKDOWN_LINK.finditer(text):
        problem = _link_problem(path, match.group(1) or match.group(2), base)
        if problem:
            problems.append(problem)
    return problems


def docstring_problems(path: Path) -> list[str]:
    """The module docstring (what `help()` and readers of the file see first) and every
    comment-free docstring of its functions and classes."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    problems = []
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(
        n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    for node in nodes:
        docstring = ast.get_docstring(node)
        if not docstring:
            continue
        problems += [f"docstring mentions {m.group(0)!r}" for m in OUTSIDE.finditer(docstring)]
        for match in MD_NAME.finditer(docstring):
            name = match.group(1)
            candidates = [path.parent / name, PROJECT_DIR / name]
            if not any(_inside(c) and c.exists() for c in candidates):
                problems.append(f"docstring names {name}, which is not in the repository")
    return problems


def test_the_walk_finds_the_documentation() -> None:
    names = {p.relative_to(PROJECT_DIR).as_posix() for p in _files(".md")}
    assert {"README.md", "docs/architecture.md"} <= names


@pytest.mark.parametrize("path", _files(".md"),
                         ids=lambda p: p.relative_to(PROJECT_DIR).as_posix())
def test_markdown_stays_inside_the_repository(path: Path) -> None:
    assert markdown_problems(path) == []


def test_docstrings_stay_inside_the_repository() -> None:
    found = {p.relative_to(PROJECT_DIR).as_posix(): docstring_problems(p)
             for p in _files(".py")}
    assert {name: problems for name, problems in found.items() if problems} == {}


def test_no_source_file_points_outside() -> None:
    """Comments too: a path outside the repository in a comment leads nowhere either."""
    here = Path(__file__).resolve()
    found = [f"{p.relative_to(PROJECT_DIR)}: {m.group(0)}" for p in _files(".py")
             if p.resolve() != here for m in OUTSIDE.finditer(p.read_text(encoding="utf-8"))]
    assert found == []


def test_the_checker_catches_a_link_outside(tmp_path: Path) -> None:
    """The checks themselves: a page pointing outside the repository is reported."""
    page = PROJECT_DIR / "docs" / "architecture.md"
    assert _link_problem(page, "../../shared/DESIGN.md") == ("../../shared/DESIGN.md: outside "
                                                             "the repository")
    assert _link_problem(page, "missing.md") == "missing.md: no such file in the repository"
    assert _link_problem(page, "../README.md#the-two-commands") is None
    assert _link_problem(page, "https://delta.io") is None
    module = tmp_path / "module.py"
    module.write_text('"""See ../shared/DESIGN.md for why."""\n')
    assert docstring_problems(module)
