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


def _source_text() -> str:
    root = pathlib.Path(__file__).resolve().parent.parent / "tinygrad_attn"
    return " ".join(" ".join(p.read_text().split()) for p in sorted(root.rglob("*.py")))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_quoted_code_matches_the_code(path):
    """In every paragraph that points at the code ("Code:"), each quoted snippet that looks like code is
    in the library's source (whitespace aside), and each `name` in `file.py` is in that file."""
    source = _source_text()
    root = pathlib.Path(__file__).resolve().parent.parent
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    stale = []
    for paragraph in re.split(r"\n\s*\n", text):
        if not re.search(r"Code ?:", paragraph):
            continue
        for snippet in re.findall(r"`([^`]+)`", paragraph):
            quoted = " ".join(snippet.split())
            if re.search(r"[=(\[@]", quoted) and quoted not in source:
                stale.append(quoted)
        for name, file in re.findall(r"`([A-Za-z_][\w.]*)` (?:in|dans) `([\w/]+\.py)`", paragraph):
            tail = file.split("tinygrad_attn/")[-1]
            candidates = [p for p in (root / "tinygrad_attn").rglob("*.py") if str(p).endswith(tail)]
            if not candidates or not any(name.split(".")[-1] in p.read_text() for p in candidates):
                stale.append(f"{name} in {file}")
    assert not stale, f"{path.name} quotes code that is not in the source: {stale}"
