"""`axon bench --corpus DIR`: AWS's kernels as a baseline column, with a corpus this test writes.

The kernels here are small ones written for the test in the style of AWS's public tutorials (the
public checkouts are never part of the repository); they sit where AWS_KERNELS expects the real
files, so the table's adapters, the simulator run, the numerical check and the report are what is
tested. A kernel that computes something else, fails in the simulator, or is given sizes it does
not accept must give no number and a reason.
"""
import json

import pytest

import axon.bench as bench
from axon import suite
from axon.bench import aws, run_bench
from axon.bench.report import markdown

HEADER = "import math\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n"

SOFTMAX = HEADER + '''@nki.jit
def nki_softmax_kernel(a_tensor):
  out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
  ix = nl.arange(128)[:, None]
  iy = nl.arange(a_tensor.shape[1])[None, :]
  for i in nl.affine_range(math.ceil(a_tensor.shape[0] / 128)):
    tile = nl.load(a_tensor[i * 128 + ix, iy])
    shifted = nl.subtract(tile, nl.max(tile, axis=[1], keepdims=True))
    num = nl.exp(shifted)
    nl.store(out_tensor[i * 128 + ix, iy], value=num / nl.sum(num, axis=[1], keepdims=True))
  return out_tensor
'''

# the same meaning with a redundant second pass over each tile: slower
SOFTMAX_TWICE = '''@nki.jit
def nki_softmax_kernel_twice(a_tensor):
  out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
  ix = nl.arange(128)[:, None]
  iy = nl.arange(a_tensor.shape[1])[None, :]
  for i in nl.affine_range(math.ceil(a_tensor.shape[0] / 128)):
    tile = nl.load(a_tensor[i * 128 + ix, iy])
    shifted = nl.subtract(tile, nl.max(tile, axis=[1], keepdims=True))
    num = nl.exp(shifted)
    again = nl.exp(nl.subtract(tile, nl.max(tile, axis=[1], keepdims=True)))
    nl.store(out_tensor[i * 128 + ix, iy], value=again / nl.sum(num, axis=[1], keepdims=True))
  return out_tensor
'''

# forgets the learned scale g: runs, but is not the benchmark's rmsnorm
RMSNORM_WITHOUT_SCALE = HEADER + '''@nki.jit
def nki_rmsnorm_kernel(a_tensor, g_tensor):
  out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
  ix = nl.arange(128)[:, None]
  iy = nl.arange(a_tensor.shape[1])[None, :]
  for i in nl.affine_range(math.ceil(a_tensor.shape[0] / 128)):
    tile = nl.load(a_tensor[i * 128 + ix, iy])
    mean = nl.sum(nl.square(tile), axis=[1]) / a_tensor.shape[1]
    nl.store(out_tensor[i * 128 + ix, iy], value=nl.multiply(tile, nl.rsqrt(mean)))
  return out_tensor
'''

# reads a row past the end of its input: the simulator refuses it
LAYERNORM_OUT_OF_BOUNDS = HEADER + '''@nki.jit
def nki_layernorm_kernel_v2(input_tensor, epsilon, gamma_vector, beta_vector):
  out = nl.ndarray(input_tensor.shape, dtype=input_tensor.dtype, buffer=nl.shared_hbm)
  ix = nl.arange(128)[:, None]
  iy = nl.arange(input_tensor.shape[1])[None, :]
  tile = nl.load(input_tensor[input_tensor.shape[0] + ix, iy])
  nl.store(out[ix, iy], value=tile)
  return out
'''

MATMUL = HEADER + '''@nki.jit
def nki_matmul_fully_optimized_(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
  K, M = lhsT.shape
  K_, N = rhs.shape
  assert K == K_
  assert M % (128 * TILES_IN_BLOCK_M) == 0 and N % (512 * TILES_IN_BLOCK_N) == 0
  result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
  for m in nl.affine_range(M // 128):
    for n in nl.affine_range(N // 512):
      acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
      for k in nl.sequential_range(K // 128):
        a = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
        b = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
        acc += nl.matmul(a, b, transpose_x=True)
      nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=result.dtype))
  return result
'''

# nki-library style: the current `nki` API, one scan per 128-row tile
CUMSUM = '''import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def cumsum(x, axis=-1):
    B, H = x.shape
    y = nl.ndarray((B, H), dtype=x.dtype, buffer=nl.shared_hbm)
    ones = nl.full((128, H), 1.0, dtype=x.dtype, buffer=nl.sbuf)
    for t in nl.affine_range(B // 128):
        xt = nl.load(x[t * 128:(t + 1) * 128, 0:H])
        acc = nisa.tensor_tensor_scan(ones, xt, initial=0.0, op0=nl.multiply, op1=nl.add, dtype=nl.float32)
        nl.store(y[t * 128:(t + 1) * 128, 0:H], value=nisa.activation(op=nl.copy, data=acc, dtype=x.dtype))
    return y
'''

# an NKIBench-style pair: a shape-specialised float32 kernel and its NumPy module
NKIBENCH_SILU = HEADER + '''@nki.jit
def kernel(v1):
  v2 = nl.ndarray((2, 128, 256), dtype=v1.dtype, buffer=nl.shared_hbm)
  for i in nl.affine_range(2):
    t = nl.load(v1[i, nl.arange(128)[:, None], nl.arange(256)[None, :]])
    nl.store(v2[i, nl.arange(128)[:, None], nl.arange(256)[None, :]], value=nl.silu(t))
  return v2
'''
NKIBENCH_SILU_MODULE = '''import numpy as np
M = 256
N = 256
def forward(x):
  return x / (1 + np.exp(-x))
def transform_to_nki_inputs(inputs):
  return [np.reshape(inputs[0], (2, 128, 256))]
'''


# one head of attention in the tutorial's layout: q, k, v as [d, s], the output [s, d]
ATTENTION_ONE_HEAD = HEADER + '''@nki.jit
def attn_fwd_v1(q, k, v):
  d, s = q.shape
  out = nl.ndarray((s, d), dtype=q.dtype, buffer=nl.shared_hbm)
  scores = nl.matmul(nl.load(q), nl.load(k), transpose_x=True)
  e = nl.exp(nl.subtract(scores, nl.max(scores, axis=1)))
  p = nl.divide(e, nl.sum(e, axis=1))
  nl.store(out, value=nl.matmul(p, nl.transpose(nl.load(v)), transpose_x=False))
  return out
'''


def _corpus(tmp_path):
    root = tmp_path / "corpus"
    files = {aws.TUTORIALS + "softmax/softmax_nki_kernels.py": SOFTMAX + "\n\n" + SOFTMAX_TWICE,
             aws.TUTORIALS + "rmsnorm/rmsnorm_nki_kernels.py": RMSNORM_WITHOUT_SCALE,
             aws.TUTORIALS + "layernorm/layernorm_nki_kernel.py": LAYERNORM_OUT_OF_BOUNDS,
             aws.TUTORIALS + "matrix_multiplication/matrix_multiplication_nki_kernels.py": MATMUL,
             aws.TUTORIALS + "attention_fwd_performance/attention_kernels.py": ATTENTION_ONE_HEAD}
    for path, text in files.items():
        (root / aws.SAMPLES / path).parent.mkdir(parents=True, exist_ok=True)
        (root / aws.SAMPLES / path).write_text(text)
    lib = root / aws.LIBRARY / aws.AWS_KERNELS["cumsum"][0].path
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_text(CUMSUM)
    nkb = root / aws.NKIBENCH / "NKIBench"
    for folder, name, text in (("kernels", "silu_M256_N256_0.py", NKIBENCH_SILU),
                               ("reference", "silu_M256_N256_numpy_0.py", NKIBENCH_SILU_MODULE)):
        (nkb / folder).mkdir(parents=True, exist_ok=True)
        (nkb / folder / name).write_text(text)
    return root


def _measure(corpus, name, sizes, dtype="bfloat16"):
    return aws.measure(name, sizes, "trn2", dtype, corpus, bench.DATA_CHECK_WORK)


def test_a_matching_kernel_is_timed_and_checked(tmp_path):
    corpus = _corpus(tmp_path)
    e = _measure(corpus, "softmax", {"m": 256, "n": 512})
    assert e["ns"] > 0 and e["reference_ok"] and e["checked"] == "case size"
    assert 0 < e["max_err_over_bound"] <= 1
    assert e["kernel"] == "softmax_nki_kernels.py:nki_softmax_kernel" and e["source"] == "AWS nki-samples tutorial"
    e = _measure(corpus, "cumsum", {"m": 256, "n": 512})
    assert e["ns"] > 0 and e["reference_ok"] and e["source"] == "AWS nki-library"


@pytest.mark.parametrize("name, sizes", [("matmul", {"m": 128, "k": 256, "n": 512}),
                                         ("transpose_matmul", {"m": 128, "k": 256, "n": 512}),
                                         ("matmul_transpose", {"m": 512, "k": 128, "n": 256})])
def test_matmul_layouts_reach_the_lhsT_kernel(tmp_path, name, sizes):
    """x @ w, x^T @ w and (x @ w)^T each become one lhsT-layout matmul (the entry's note says how)."""
    e = _measure(_corpus(tmp_path), name, sizes)
    assert e["ns"] > 0 and e["reference_ok"], e.get("why")
    assert "lhsT" in e["note"]


def test_the_fastest_kernel_that_passes_fills_the_column(tmp_path, monkeypatch):
    import dataclasses

    corpus = _corpus(tmp_path)
    (real,) = aws.AWS_KERNELS["softmax"]
    twice = dataclasses.replace(real, function="nki_softmax_kernel_twice")
    absent = dataclasses.replace(real, path="elsewhere/softmax.py")
    monkeypatch.setitem(aws.AWS_KERNELS, "softmax", (absent, twice, real))
    e = _measure(corpus, "softmax", {"m": 256, "n": 512})
    assert e["kernel"].endswith(":nki_softmax_kernel") and e["ns"] > 0
    assert len(e["tried"]) == 3 and [o["kernel"] for o in e["others"]] == [
        "softmax.py:nki_softmax_kernel", "softmax_nki_kernels.py:nki_softmax_kernel_twice"]
    assert "not in the corpus" in e["others"][0]["why"] and e["others"][1]["ns"] > e["ns"]
    monkeypatch.setitem(aws.AWS_KERNELS, "softmax", (absent, dataclasses.replace(absent, path="gone.py")))
    e = _measure(corpus, "softmax", {"m": 256, "n": 512})
    assert e["ns"] is None and e["why"].count("is not in the corpus") == 2


def test_a_kernel_of_another_meaning_gets_no_number(tmp_path):
    e = _measure(_corpus(tmp_path), "rmsnorm", {"m": 128, "n": 512})
    assert e["ns"] is None and e["reference_ok"] is False
    assert "fails the numerical check" in e["why"] and e["latency_ns_unchecked"] > 0


def test_a_simulator_failure_is_the_reason(tmp_path):
    e = _measure(_corpus(tmp_path), "layernorm", {"m": 128, "n": 512})
    assert e["ns"] is None
    assert e["why"].startswith("fails in the simulator: ") and "layernorm_nki_kernel.py:" in e["why"]
    assert str(tmp_path) not in e["why"]  # corpus paths are given relative to the corpus


def test_sizes_the_kernel_does_not_take_and_missing_kernels(tmp_path):
    corpus = _corpus(tmp_path)
    e = _measure(corpus, "matmul_transpose", {"m": 128, "k": 256, "n": 512})  # m is the kernel's N
    assert e["ns"] is None and "m % 512 == 0" in e["why"]
    assert _measure(corpus, "relu", {"m": 128, "n": 512}) == {
        "kernel": None, "ns": None, "tried": [], "why": "no kernel in the corpus computes this benchmark"}
    e = _measure(corpus, "gqa", suite.get("gqa").sizes("small"))
    assert e["ns"] is None and "not in the corpus" in e["why"]


def test_the_attention_tutorial_computes_one_head_of_gqa_in_its_own_layout(tmp_path):
    """q, k, v of gqa at one head become the tutorial's [d, s] tensors, its [s, d] output gqa's; the
    toy versions take s = t = 128 only, the later ones whole 512-row tiles; several heads are not
    its meaning."""
    corpus = _corpus(tmp_path)
    one_head = suite.get("gqa").sizes("one_head_s128")
    v1 = next(k for k in aws.AWS_KERNELS["gqa"] if k.function == "attn_fwd_v1")
    e = aws.measure_kernel(v1, one_head, "trn2", "bfloat16", corpus, bench.DATA_CHECK_WORK)
    assert e["ns"] > 0 and e["reference_ok"] and e["checked"] == "case size"
    v3 = next(k for k in aws.AWS_KERNELS["gqa"] if k.function == "attn_fwd_v3")
    assert "whole 512-row tiles" in v3.refuses(one_head, "bfloat16")
    assert v3.refuses(suite.get("gqa").sizes("one_head_s4096"), "bfloat16") is None
    assert "one head" in v1.refuses(suite.get("gqa").sizes("quick"), "bfloat16")


def test_nkibench_kernels_take_their_own_shape_and_dtype_only(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path)
    k = aws._nkibench("silu", "silu_M256_N256", {"M": "m", "N": "n"}, ("x",), "x")
    monkeypatch.setitem(aws.AWS_KERNELS, "silu", (k,))
    e = _measure(corpus, "silu", {"m": 256, "n": 256}, dtype="float32")
    assert e["ns"] > 0 and e["reference_ok"] and e["source"].startswith("NKIBench (AccelOpt")
    assert "m=256,n=256 only" in _measure(corpus, "silu", {"m": 128, "n": 256}, dtype="float32")["why"]
    assert "float32 only" in _measure(corpus, "silu", {"m": 256, "n": 256})["why"]


def _kept_report(path, names):
    """A report whose cases were measured without a corpus (only the fields the AWS column reads)."""
    cases = []
    for n in names:
        b = suite.get(n)
        cases.append({"benchmark": n, "family": b.family, "case": "small", "sizes": b.sizes("small"),
                      "target": "trn2", "dtype": "bfloat16", "model": bench.model_fingerprint("trn2"),
                      "axon_ns": 1000.0, "roofline_ns": 500.0, "roofline_fraction": 0.5,
                      "baselines": {"direct": 2000.0, "hand": None, "no_algebra": 1000.0, "no_fusion": 1000.0},
                      "speedup": {"direct": 2.0, "hand": None, "no_algebra": 1.0, "no_fusion": 1.0},
                      "search_s": 1.0, "fusion": "fused", "rewrites": [], "candidates": {"generated": 1, "evaluated": 1},
                      "proofs": {"proved": 0}})
    path.write_text(json.dumps({"grid": "small", "target": "trn2", "dtype": "bfloat16", "cases": cases}))


def test_bench_with_a_corpus_adds_the_column_to_kept_cases(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path)
    path = tmp_path / "r.json"
    _kept_report(path, ["softmax", "rmsnorm", "relu"])

    def must_not_run(*a, **k):
        raise AssertionError("a case already in the report was measured again")

    monkeypatch.setattr(bench, "measure_case", must_not_run)
    without = run_bench(grid="small", benchmarks=["softmax", "rmsnorm", "relu"], json_path=path)
    assert "aws" not in without["geomean"]["single"] and "AWS" not in markdown(without)
    doc = run_bench(grid="small", benchmarks=["softmax", "rmsnorm", "relu"], json_path=path, corpus=corpus)
    relu, softmax, rmsnorm = doc["cases"]  # in the suite's order
    assert softmax["baselines"]["aws"] == softmax["aws"]["ns"] > 0
    assert softmax["speedup"]["aws"] == pytest.approx(softmax["aws"]["ns"] / 1000.0)
    assert rmsnorm["baselines"]["aws"] is None and relu["baselines"]["aws"] is None
    assert doc["geomean"]["single"]["aws_cases"] == 1
    md = markdown(doc)
    assert "| AWS kernel | AWS µs | × AWS |" in md and "× Axon hand" in md
    assert f"| `nki_softmax_kernel` | {softmax['aws']['ns'] / 1e3:.1f} |" in md
    assert "| — | — [1] | — |" in md and "| `nki_rmsnorm_kernel` | — [2] | — |" in md
    assert "1. relu (small): no kernel in the corpus computes this benchmark" in md
    assert "2. rmsnorm (small): fails the numerical check" in md
    assert "`nki-samples-fc5c69f/src/nki_samples/tutorials/softmax/softmax_nki_kernels.py:nki_softmax_kernel`" in md

    # a row measured with another table of kernels gets its AWS column again, nothing else
    data = json.loads(path.read_text())
    data["cases"][1]["aws"] = {**data["cases"][1]["aws"], "tried": [{"kernel": "older/k.py:f", "note": ""}], "ns": 1.0}
    path.write_text(json.dumps(data))
    again = run_bench(grid="small", benchmarks=["softmax", "rmsnorm", "relu"], json_path=path, corpus=corpus)
    assert again["cases"][1]["aws"]["kernel"] == "softmax_nki_kernels.py:nki_softmax_kernel"
    assert again["cases"][1]["baselines"]["aws"] == softmax["aws"]["ns"]


def test_plots_draw_the_aws_bars(tmp_path):
    pytest.importorskip("matplotlib")
    from axon.bench.report import plots

    path = tmp_path / "r.json"
    _kept_report(path, ["softmax", "relu"])
    doc = run_bench(grid="small", benchmarks=["softmax", "relu"], json_path=path, corpus=_corpus(tmp_path))
    written = plots(doc, tmp_path / "plots")
    assert [p.name for p in written] == ["speedup.png", "roofline.png", "search_time.png"]
    assert (tmp_path / "plots" / "speedup.png").read_bytes()[:4] == b"\x89PNG"


def test_the_looser_rule_for_running_sums_in_the_output_dtype():
    """The matmul tutorial adds each K block into a bf16 tile: Axon's bound (sums in float32) rejects
    that, the stated allowance of u_out sum|a||b| per block accepts it, and a wrong sum still fails."""
    import ml_dtypes
    import numpy as np

    program = suite.get("matmul").program
    x = program.random_inputs({"m": 128, "k": 4096, "n": 512}, dtype="bfloat16", seed=0)
    a, w = x["x"].astype(np.float32), x["w"].astype(np.float32)
    acc = np.zeros((128, 512), ml_dtypes.bfloat16)
    for j in range(4):  # four K blocks of 1024, each PSUM result added into the bf16 tile
        block = a[:, j * 1024:(j + 1) * 1024] @ w[j * 1024:(j + 1) * 1024]
        acc = (acc.astype(np.float32) + block).astype(ml_dtypes.bfloat16)
    assert not aws.check(program, x, [acc]).ok
    assert aws.check(program, x, [acc], narrow_sums=4).ok
    three_blocks = (a[:, 1024:] @ w[1024:]).astype(ml_dtypes.bfloat16)
    assert not aws.check(program, x, [three_blocks], narrow_sums=4).ok


def test_the_kernels_listed_leave_out_those_that_take_other_sizes_only():
    """The report lists, per benchmark, the column's kernel and the others tried that ran or failed;
    one that only takes other sizes (a one-head tutorial beside a 32-head case) is left out."""
    from axon.bench.report import _aws_section

    def entry(kernel, ns, why=None):
        return {"kernel": f"f.py:{kernel}", "file": "f.py", "source": "AWS", "note": "as is", "ns": ns, "why": why}
    best = {**entry("fast", 10.0), "others": [entry("slow", 20.0), entry("broken", None, "fails in the simulator: x"),
                                              entry("one_head", None, "the kernel computes one head (case ...)")]}
    lines = "\n".join(_aws_section([{"benchmark": "gqa", "case": "quick", bench.AWS: best}], []))
    assert "`f.py:fast`" in lines and "`f.py:slow`" in lines and "`f.py:broken`" in lines
    assert "one_head" not in lines
