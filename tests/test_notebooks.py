"""Every notebook in docs/notebooks (French and English) runs from top to bottom without an error."""

import io
import pathlib
import tokenize

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "docs" / "notebooks").rglob("*.ipynb"))


def test_french_and_english_notebooks_pair_up():
    fr = [p for p in NOTEBOOKS if p.parent.name == "fr"]
    en = [p for p in NOTEBOOKS if p.parent.name == "en"]
    assert len(fr) == len(en) == 6  # one per source tutorial, and the step-through notebook
    assert [p.name[:2] for p in fr] == [p.name[:2] for p in en]
    for a, b in zip(fr, en):  # the same code; prose, comments and strings in two languages
        code = [[_skeleton(c.source) for c in nbformat.read(p, 4).cells if c.cell_type == "code"] for p in (a, b)]
        assert code[0] == code[1], (a.name, b.name)


def _skeleton(source: str) -> list[str]:
    """The code's tokens with comments dropped and every string literal the same: what both languages share."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    keep = []
    for tok in tokens:
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        keep.append("STRING" if tok.type == tokenize.STRING or tok.type >= getattr(tokenize, "FSTRING_START", 999)
                    else tok.string)
    return keep


def _printed(notebook) -> list[str]:
    """What each code cell printed (however the kernel cut it into messages); empty cells left out."""
    cells = ["".join("".join(o.get("text", "")) for o in c.get("outputs", []) if o.get("output_type") == "stream")
             for c in notebook.cells if c.cell_type == "code"]
    return cells if any(cells) else []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_runs(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    saved = _printed(notebook)
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not any(o.get("output_type") == "error" for o in outputs)
    if saved:  # a notebook saved with its outputs prints the same again: its shapes and numbers are the code's
        assert _printed(notebook) == saved
