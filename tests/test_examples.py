"""Each script in examples/ runs and prints what it claims."""

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
EXPECTED = {
    "scaled_dot_product.py": ([], "matches numpy"),
    "multi_head_attention.py": ([], "weights (1, 4, 5, 5)"),
    "masked_attention.py": ([], "positions 0-2 are unchanged"),
    "cross_attention_translation.py": (["150"], "cross-attention (rows"),
    "visualize_heads.py": ([], "8 heads x 4 dims"),
    "custom_function.py": ([], "gradient mismatch"),
    "train_reverse.py": ([], "reverse of 3 1 4 1 5 9 2 6 -> 6 2 9 5 1 4 1 3"),
    "port_from_pytorch.py": ([], "greedy continuation of 3 4 5: [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]"),
    "gpt_trainer.py": ([], "greedy continuation of 1 2 3: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0]"),
    "llama_style.py": ([], "greedy continuation of 'the ': 'the gradient'"),
    "char_transformer.py": ([], "greedy continuation of 'the ': 'the queries,'"),
    "transformer_copy.py": ([], "greedy copy of 1..10: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"),
}


def test_every_example_is_listed():
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name, tmp_path):
    args, expected = EXPECTED[name]
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expected in proc.stdout, proc.stdout[-2000:]
    if name == "visualize_heads.py" and "picture skipped" not in proc.stdout:
        assert (tmp_path / "heads_8.png").stat().st_size > 1000
