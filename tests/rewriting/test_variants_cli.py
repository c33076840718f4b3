"""`axon variants` as a user runs it: the transformations the issue asks for, on the four programs."""
import json
import subprocess
import sys
import textwrap


def axon(*args):
    return subprocess.run([sys.executable, "-m", "axon", *args], capture_output=True, text=True, timeout=120)


def test_rmsnorm_matmul_shows_the_normalisation_after_the_matmul():
    result = axon("variants", "rmsnorm_matmul", "--quiet")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "(c / d) @ b = (c @ b) / d" in out and "for c(m, k), d(m, 1), b(k, n)" in out
    assert "variant 1: the program as written" in out and "via P" in out
    assert "0 unsound" in out and result.stderr == ""


def test_softmax_matmul_and_gqa_show_the_normalisation_after_the_matmul():
    for name, operands in [("softmax_matmul", "c(m, k), d(m, 1), b(k, n)"),
                           ("gqa", "c(kv, g, s, t), d(kv, g, s, 1), b(kv, 1, t, d)")]:
        result = axon("variants", name)
        assert result.returncode == 0, result.stderr
        assert "(c / d) @ b = (c @ b) / d" in result.stdout and operands in result.stdout
        assert "variants: 2" in result.stdout
        assert "axon variants: round" in result.stderr  # progress goes to stderr


def test_gated_mlp_shows_one_variant_and_what_was_refuted():
    result = axon("variants", "gated_mlp")
    assert result.returncode == 0, result.stderr
    assert "9 e-classes, 9 e-nodes" in result.stdout and "variants: 1" in result.stdout
    assert "5 refuted by counterexample" in result.stdout


def test_json_lists_proofs_and_variants():
    result = axon("variants", "matmul_transpose", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["eclasses"] == 6 and len(data["variants"]) == 2
    (proof,) = [p for p in data["proofs"] if p["status"] == "PROVED"]
    assert proof["lhs"] == "(b @ c).T" and proof["rhs"] == "c.T @ b.T" and "reordered" in proof["rewrite"]
    assert data["variants"][1]["rewrites"] == [proof["id"]]


def test_a_program_from_a_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent("""
        import axon

        @axon.program(x=("m", "k"), y=("m", "k"), w=("k", "n"))
        def f(x, y, w):
            return (x + y) @ w
    """))
    result = axon("variants", f"{path}:f", "--limit", "5")
    assert result.returncode == 0, result.stderr
    assert "(c + d) @ b = (c @ b) + (d @ b)" in result.stdout


def test_errors_are_one_line():
    for args in (["nope"], ["missing.py:f"], ["rmsnorm_matmul", "--limit", "0"]):
        result = axon("variants", *args)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.startswith("axon: error: ") and result.stderr.count("\n") == 1, result.stderr
