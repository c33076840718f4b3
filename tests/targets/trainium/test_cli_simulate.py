"""`axon simulate` as a user runs it: a subprocess, its exit status and what it prints."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
TUTORIAL = ROOT / "examples" / "nki" / "matmul_tutorial"
SMALL = ["--input", "lhsT=256x128:bfloat16", "--input", "rhs=256x512:bfloat16"]


def axon(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "axon", "simulate", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def test_random_inputs_reference_and_json():
    r = axon(TUTORIAL / "tiled.py", *SMALL, "--target", "trn1",
             "--reference", f"{TUTORIAL / 'reference.py'}:matmul", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"latency_ns", "kernel_bound_ns", "engine_busy_ns", "hbm_bytes", "reference_ok", "max_abs_err"} <= set(out)
    assert "roofline_ns" not in out  # a bare kernel has no program, so no program roofline
    assert out["reference_ok"] is True and out["max_abs_err"] < 0.5
    assert set(out["engine_busy_ns"]) == {"tensor", "vector", "scalar", "gpsimd", "dma"}
    assert out["engine_busy_ns"]["tensor"] > 0 and out["hbm_bytes"] >= 2 * (256 * 128 + 256 * 512 + 128 * 512)
    assert 0 < out["kernel_bound_ns"] < out["latency_ns"]
    # every traced instruction scheduled, every matmul FLOP charged
    assert out["scheduled"] == out["instructions"] > 0
    assert out["matmul_flops"] == out["scheduled_matmul_flops"] == 2 * 128 * 256 * 512


def test_text_report_and_perfetto_trace(tmp_path):
    trace = tmp_path / "t.json"
    r = axon(TUTORIAL / "hoist_load.py", *SMALL, "--trace", trace)
    assert r.returncode == 0, r.stderr
    assert "latency" in r.stdout and "kernel's own traffic bound" in r.stdout and "tensor" in r.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "nc_matmul" and e["ph"] == "X" for e in events)


def _tutorial_on_saved_inputs(tmp_path, dtype):
    """The tiled tutorial on inputs saved to an .npz in `dtype`, checked against its reference."""
    rng = np.random.default_rng(1)
    npz = tmp_path / f"in_{np.dtype(dtype).name}.npz"
    np.savez(npz, lhsT=rng.standard_normal((128, 128)).astype(dtype), rhs=rng.standard_normal((128, 512)).astype(dtype))
    ok = axon(TUTORIAL / "tiled.py", "--inputs", npz, "--reference", f"{TUTORIAL / 'reference.py'}:matmul", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["reference_ok"] is True
    return npz


def test_npz_inputs_named_after_parameters_and_a_wrong_reference(tmp_path):
    npz = _tutorial_on_saved_inputs(tmp_path, np.float32)
    bad = tmp_path / "bad.py"
    bad.write_text("def ref(lhsT, rhs):\n    return lhsT.T @ rhs + 1.0\n")
    r = axon(TUTORIAL / "tiled.py", "--inputs", npz, "--reference", f"{bad}:ref")
    assert r.returncode == 1 and "MISMATCH" in r.stdout


def test_npz_bfloat16_inputs_read_back_as_bfloat16(tmp_path):
    """NumPy saves an ml_dtypes bfloat16 array as raw 2-byte data: read back as bfloat16 (the
    tutorial asserts its inputs' dtype), not refused as |V2; a 1-byte one (fp8) is one line."""
    import ml_dtypes

    _tutorial_on_saved_inputs(tmp_path, ml_dtypes.bfloat16)
    fp8 = tmp_path / "fp8.npz"
    np.savez(fp8, lhsT=np.zeros((128, 128), ml_dtypes.float8_e4m3fn), rhs=np.zeros((128, 512), ml_dtypes.float8_e4m3fn))
    r = axon(TUTORIAL / "tiled.py", "--inputs", fp8)
    assert r.returncode != 0 and "1-byte raw data" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_timing_only_needs_no_data():
    r = axon(TUTORIAL / "tiled.py", "--input", "lhsT=1024x256:bfloat16", "--input", "rhs=1024x1024:bfloat16",
             "--timing-only", "--json", "--target", "trn2")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["reference_ok"] is None and out["max_abs_err"] is None and out["latency_ns"] > 0


@pytest.mark.parametrize("args, message", [
    (["--input", "lhsT=256x128"], "NAME=SHAPE:DTYPE"),
    (["--input", "lhsT=256x128:bf17", "--input", "rhs=256x512:bfloat16"], "unknown dtype"),
    (["--input", "lhsT=256x128:bfloat16"], "missing input(s) for kernel parameter(s): rhs"),
    ([*SMALL, "--input", "bias=4:float32"], "not parameters of the kernel"),
    ([*SMALL, "--reference", "nowhere.py:f"], "no such file: nowhere.py"),
    ([*SMALL, "--inputs", "nowhere.npz"], "not found"),
    (["--input", "lhsT=256x128:bfloat16", "--input", "rhs=128x512:bfloat16"], ""),
])
def test_errors_are_one_line(args, message):
    r = axon(TUTORIAL / "tiled.py", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("axon: error:"), r.stderr
    assert message in lines[0]


def test_missing_kernel_file():
    r = axon("no_such_kernel.py", *SMALL)
    assert r.returncode == 2 and "kernel file not found" in r.stderr


def test_a_reference_check_prints_and_reports_its_tolerance():
    r = axon(TUTORIAL / "tiled.py", *SMALL, "--reference", f"{TUTORIAL / 'reference.py'}:matmul",
             "--reduction-length", "256")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("tolerance"))
    assert "longest reduction 256" in line and "out bfloat16" in line and "median bound" in line
    js = axon(TUTORIAL / "tiled.py", *SMALL, "--reference", f"{TUTORIAL / 'reference.py'}:matmul", "--json")
    out = json.loads(js.stdout)
    tol = out["tolerance"]
    assert tol["method"] == "reference" and tol["longest_reduction"] == 512  # the largest input dimension
    assert tol["dtypes"] == {"out": ["bfloat16"], "mid": "bfloat16", "acc": "float32"}
    assert 0 < out["max_err_over_bound"] <= 1 and tol["bound_median"] > 0


EXP_KERNEL = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def exp_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    e = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t)
    nisa.dma_copy(dst=out, src=e)
    return out
'''

EXP_REFERENCE = '''
import axon


@axon.program(x=("m", "n"))
def exp_of(x):
    return axon.exp(x)
'''


def test_a_pass_with_an_infinite_error_says_where_it_is_unchecked(tmp_path):
    """exp(100) overflows float32 (the kernel's inf) but not the float64 reference: those elements
    have no finite bound, and up to 1% may go unchecked. The line said "ok (max abs err inf ...)"."""
    (tmp_path / "k.py").write_text(EXP_KERNEL)
    (tmp_path / "ref.py").write_text(EXP_REFERENCE)
    x = np.random.default_rng(0).standard_normal((128, 512)).astype(np.float32)
    x[0, :5] = 100.0
    np.savez(tmp_path / "in.npz", x=x)
    r = axon(tmp_path / "k.py", "--inputs", tmp_path / "in.npz", "--reference", f"{tmp_path / 'ref.py'}:exp_of")
    assert r.returncode == 0, r.stderr
    line = next(s for s in r.stdout.splitlines() if s.startswith("reference "))
    assert line.startswith("reference ok where it has a bound; elements without one differ") and "inf" in line
    assert "5 element(s) unbounded" in r.stdout
    x[0, :5] = 1.0  # every element bounded: a plain ok
    np.savez(tmp_path / "in.npz", x=x)
    r = axon(tmp_path / "k.py", "--inputs", tmp_path / "in.npz", "--reference", f"{tmp_path / 'ref.py'}:exp_of")
    assert next(s for s in r.stdout.splitlines() if s.startswith("reference ")).startswith("reference ok (max abs err")
