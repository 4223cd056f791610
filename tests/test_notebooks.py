"""Every notebook in docs/notebooks (French and English) runs from top to bottom without an error."""

import pathlib

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "docs" / "notebooks").rglob("*.ipynb"))


def test_french_and_english_notebooks_pair_up():
    fr = [p for p in NOTEBOOKS if p.parent.name == "fr"]
    en = [p for p in NOTEBOOKS if p.parent.name == "en"]
    assert len(fr) == len(en) == 5
    assert [p.name[:2] for p in fr] == [p.name[:2] for p in en]
    for a, b in zip(fr, en):  # the same code, the text in two languages
        code = [[c.source for c in nbformat.read(p, 4).cells if c.cell_type == "code"] for p in (a, b)]
        assert code[0] == code[1], (a.name, b.name)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_runs(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not any(o.get("output_type") == "error" for o in outputs)
