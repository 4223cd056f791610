"""Every ```python block in README.md and docs/ runs, so the examples cannot go stale.

The blocks of one file run in order in one namespace, as a reader would run them.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    namespace: dict = {"__name__": "__docs__"}
    for number, block in enumerate(BLOCK.findall(path.read_text(encoding="utf-8")), start=1):
        exec(compile(block, f"{path.name}, block {number}", "exec"), namespace)


def test_every_doc_page_is_checked():
    assert {p.name for p in FILES} >= {"README.md", "index.md", "autograd.md", "backprop-through-attention.md",
                                        "retropropagation-attention.md", "api.md", "performance.md", "tasks.md"}
