"""The how-tos' Python blocks run: each ```python block of docs/howto/*.md and
docs/installation.md is a doctest (``>>>``), which pytest's ``--doctest-glob='*.md'`` executes;
other blocks are marked with their language (bash, ini)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted([*DOCS.glob("howto/*.md"), DOCS / "installation.md"])
_FENCE = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)


def test_the_how_tos_exist() -> None:
    names = {page.name for page in PAGES}
    assert {"connections.md", "operators.md", "deployment-cluster.md", "installation.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_python_blocks_are_doctests_and_other_blocks_name_their_language(page: Path) -> None:
    blocks = _FENCE.findall(page.read_text())
    assert blocks, f"{page.name} has no code block"
    for language, body in blocks:
        assert language, f"{page.name}: a code block without a language:\n{body[:200]}"
        if language == "python":
            assert body.lstrip().startswith(">>>"), f"{page.name}: python not run:\n{body[:200]}"
