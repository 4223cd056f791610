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


def _supported_names() -> dict[str, list[str]]:
    """docs/api.md's table of PyTorch names: first column -> the names in backticks of the second."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("## PyTorch names supported here", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") or line.startswith("| this"):
            rows[cells[0].strip("| `")] = re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", cells[1])
    return rows


def test_every_pytorch_name_in_the_table_exists_and_every_public_name_is_listed():
    import types

    import tinygrad_attn as ta
    rows = _supported_names()
    where = {"torch": ta, "torch` dtypes": ta, "torch.autograd": ta.autograd,
             "torch.autograd.functional": ta.autograd.functional,
             "torch.func": ta.func, "torch.amp": ta.amp, "torch.distributed": ta.distributed,
             "torch.nn.attention": ta.nn.attention, "torch.Tensor": ta.ones(2, 2), "torch.nn": ta.nn,
             "torch.nn.init": ta.nn.init, "torch.nn.utils": ta.nn.utils, "torch.nn.functional": ta.nn.functional,
             "torch.optim": ta.optim, "torch.optim.lr_scheduler": ta.optim.lr_scheduler,
             "torch.utils.data": ta.utils.data, "this library's own": ta}
    assert set(rows) == set(where), set(rows) ^ set(where)
    for row, names in rows.items():
        for name in names:
            owner = where[row]
            for part in name.split("."):
                assert hasattr(owner, part), f"{row}: {name} is listed but does not exist"
                owner = getattr(owner, part)
    listed = {n.split(".")[-1] for names in rows.values() for n in names}
    public = {n for n in ta.__all__ if not isinstance(getattr(ta, n), types.ModuleType) or n in ("interop", "viz")}
    public |= {n for n, v in vars(ta.Tensor).items() if not n.startswith("_") and n not in ("astype", "bump_version",
                                                                                          "zero_grad")}
    public -= {"Tensor", "dtypes", "return_types", "debug", "functional", "losses", "nn", "optim", "utils"}
    assert not public - listed, f"public names missing from docs/api.md's table: {sorted(public - listed)}"


def test_every_english_page_has_a_french_twin_and_back():
    """French parity: each page in docs/ links its French twin, which exists, links back, and holds the same
    python blocks' count (the code is the same; prose, comments and strings in French)."""
    docs = ROOT / "docs"
    for page in sorted(docs.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        found = re.search(r"\(\[en français\]\((fr/[^)]+)\)\)", text)
        assert found, f"{page.name} links no French twin"
        twin = docs / found.group(1)
        assert twin.exists(), f"{page.name}: {twin} is missing"
        assert f"(../{page.name})" in twin.read_text(encoding="utf-8"), f"{twin.name} does not link back"
        assert len(BLOCK.findall(text)) == len(BLOCK.findall(twin.read_text(encoding="utf-8"))), twin.name


def test_element_wise_products_are_written_with_a_star_and_no_path_to_the_tutorials():
    """dS = P * (dP - D): juxtaposition means the matrix product everywhere (dQ = dS K), so an element-wise
    product written as "P (dP - D)" reads as P @ (dP - D), which has the right shape and the wrong value. And
    the tutorials are cited by title and author: a path to them opens nothing in a clone."""
    texts = [*FILES, *(ROOT / "docs" / "notebooks").rglob("*.ipynb"), ROOT / "docs" / "notebooks" / "build.py",
             *(ROOT / "exercises").rglob("*.py"), *(ROOT / "tinygrad_attn").rglob("*.py"),
             ROOT / "tinygrad_attn" / "explorer" / "page.html"]
    juxtaposed = re.compile(r"\bP \(dP|rowsum\(dP P\)|\bdP P\)|somme par ligne de dP P\b")
    for path in texts:
        text = path.read_text(encoding="utf-8")
        assert not juxtaposed.search(text), (path, juxtaposed.search(text).group(0))
        assert "shared/seeds" not in text, path
