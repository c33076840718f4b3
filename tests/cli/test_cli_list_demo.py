"""The CLI as a user runs it: a subprocess, its exit status and what it prints."""
import json
import subprocess
import sys


def axon(*args):
    return subprocess.run([sys.executable, "-m", "axon", *args], capture_output=True, text=True, timeout=120)


def test_list_json_has_the_benchmarks_with_cases():
    result = axon("list", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 24  # the paper's 20, HF RoPE, a fused-weight SwiGLU, scaled and causal attention
    by_name = {r["name"]: r for r in rows}
    assert by_name["matmul"]["dims"] == ["m", "k", "n"]
    assert by_name["matmul"]["cases"]["small"] == {"m": 128, "k": 256, "n": 512}
    assert by_name["cumsum"]["cases"]["llama3_vocab"]["n"] == 128256
    for row in rows:
        assert {"name", "dims", "cases"} <= set(row)
        assert all(set(sizes) == set(row["dims"]) for sizes in row["cases"].values())


def test_list_table():
    result = axon("list")
    assert result.returncode == 0
    assert "rmsnorm_matmul(x(m, k), w(k, n)) -> (m, n)" in result.stdout


def test_demo_runs_the_pipeline_on_the_default_example(tmp_path):
    result = axon("demo", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "(c / d) @ b = (c @ b) / d" in result.stdout  # the RMSNorm+MatMul move, proved
    assert "speedup" in result.stdout and "checked:  full size" in result.stdout
    kernel = (tmp_path / "rmsnorm_matmul_trn2.py").read_text()
    assert "nki.jit" in kernel and "nisa.nc_matmul" in kernel


def test_unknown_benchmark_is_one_line_error():
    result = axon("demo", "no_such_bench")
    assert result.returncode == 2
    assert result.stderr.startswith("axon: error: no benchmark named 'no_such_bench'")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
