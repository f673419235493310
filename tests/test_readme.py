"""The README's code snippets quote the files they name, line for line.

A ```python block of README.md whose first line is a comment naming a file of the repository
(``# dags/trident_word_count.py``) must appear in that file as one contiguous run of lines
(trailing spaces ignored): the DAG a newcomer copies is the DAG the main job runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
_QUOTE = re.compile(r"#\s+(\S+\.py)\s*$")


def quoted_snippets(readme: str) -> list[tuple[str, list[str]]]:
    """(file, lines) of each python block whose first line names a file."""
    found = []
    for block in _BLOCK.findall(readme):
        first, *rest = block.rstrip("\n").split("\n")
        match = _QUOTE.match(first)
        if match:
            found.append((match.group(1), [line.rstrip() for line in rest]))
    return found


def _contains_run(lines: list[str], run: list[str]) -> bool:
    return any(lines[i : i + len(run)] == run for i in range(len(lines) - len(run) + 1))


SNIPPETS = quoted_snippets((ROOT / "README.md").read_text())


def test_the_readme_quotes_the_dag_file() -> None:
    # Given the README, When its quoting snippets are collected
    # Then the word-count DAG is among them
    assert "dags/trident_word_count.py" in [path for path, _ in SNIPPETS]


@pytest.mark.parametrize(("path", "snippet"), SNIPPETS, ids=[p for p, _ in SNIPPETS])
def test_a_readme_snippet_is_a_run_of_its_files_lines(path: str, snippet: list[str]) -> None:
    # Given a README snippet quoting `path`
    source = [line.rstrip() for line in (ROOT / path).read_text().splitlines()]
    # When it is looked up in the file, Then it is there, line for line
    assert _contains_run(source, snippet), (
        f"README.md's snippet of {path} is not in the file as written:\n" + "\n".join(snippet)
    )


def test_a_changed_line_is_caught() -> None:
    # Given the DAG file's lines and the README's snippet of it with one changed line
    path, snippet = next(s for s in SNIPPETS if s[0] == "dags/trident_word_count.py")
    source = [line.rstrip() for line in (ROOT / path).read_text().splitlines()]
    changed = [line.replace("schedule=None", 'schedule="@hourly"') for line in snippet]
    # When it is looked up, Then it is not found
    assert changed != snippet
    assert not _contains_run(source, changed)
