"""runner.run: kernels as files or source, inputs as arrays/specs/npz, reference checks."""
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import axon
import axon.frontend.functions as F
from axon.errors import InputError
from axon.targets.trainium.runner import (InputSpec, load_reference, numpy_dtype, parse_input_spec,
                                          reference_check, run)

SOURCE = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def scale(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.multiply(t, 2.0))
    return out
'''


def test_source_text_with_arrays_and_a_callable_reference():
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    report = run(SOURCE, {"x": x}, target="trn2", reference=lambda x: 2 * x)
    assert report.reference_ok is True and report.max_abs_err == 0.0
    assert report.estimate.hbm_bytes == 2 * x.nbytes
    assert report.to_json()["latency_ns"] == report.estimate.latency_ns
    wrong = run(SOURCE, {"x": x}, target="trn2", reference=lambda x: 3 * x)
    assert wrong.reference_ok is False and wrong.max_abs_err == pytest.approx(x.max())


def test_source_text_leaves_no_file_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the forked run inherits it
    x = np.ones((128, 8), np.float32)
    assert run(SOURCE, {"x": x}, target="trn2", reference=lambda x: 2 * x).reference_ok
    assert list(tmp_path.iterdir()) == []


def test_same_inputs_same_report(tmp_path):
    specs = {"x": InputSpec((128, 512), "bfloat16")}
    a = run(SOURCE, specs, target="trn1", reference=lambda x: 2 * x, seed=7)
    b = run(SOURCE, specs, target="trn1", reference=lambda x: 2 * x, seed=7)
    assert a.to_json() == b.to_json()
    npz = tmp_path / "x.npz"
    np.savez(npz, x=np.ones((128, 8), np.float32))
    assert run(SOURCE, {}, target="trn1", npz=npz, reference=lambda x: 2 * x).reference_ok


def test_input_spec_syntax():
    assert parse_input_spec("a=4096x8192:bfloat16") == ("a", InputSpec((4096, 8192), "bfloat16"))
    assert parse_input_spec("v=7:float32") == ("v", InputSpec((7,), "float32"))
    for bad in ("a=4096*8192:bfloat16", "a=:float32", "=4:float32", "a=0x4:float32", "a=4:complex64"):
        with pytest.raises(InputError):
            parse_input_spec(bad)


TUTORIAL = Path(__file__).resolve().parents[3] / "examples" / "nki" / "matmul_tutorial"

ACTIVATION = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def act(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.FUNC(nl.load(x)))
    return out
"""

ROWSUM = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def rowsum(x):
    out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[:, 0:COLS])
    nl.store(out, value=nl.sum(t, axis=1, keepdims=True))
    return out
"""


@axon.program(lhsT=("k", "m"), rhs=("k", "n"))
def tutorial_matmul(lhsT, rhs):
    return lhsT.T @ rhs


def test_an_fp32_matmul_off_by_1e_4_relative_at_one_element_fails():
    rng = np.random.default_rng(0)
    args = {"lhsT": rng.standard_normal((128, 128), dtype=np.float32),
            "rhs": rng.standard_normal((128, 512), dtype=np.float32)}
    report = run(str(TUTORIAL / "tiled.py"), args, reference=tutorial_matmul)
    assert report.reference_ok and report.max_err_over_bound < 0.1  # the real kernel passes, with room
    ref = args["lhsT"].astype(np.float64).T @ args["rhs"]
    order = np.argsort(np.abs(ref), axis=None)
    for at in (order[ref.size // 2], order[-1]):  # an element of median magnitude, and the largest
        bad = report.outputs.copy()
        idx = np.unravel_index(at, ref.shape)
        bad[idx] = ref[idx] * (1 + 1e-4)
        check = reference_check(tutorial_matmul, args, bad)
        assert not check.ok and check.failed == 1 and check.worst == (0, tuple(int(i) for i in idx))
        # optimize's old tolerance, 1e-4 (|ref| + max|ref|) at every element, let it through
        assert np.all(np.abs(bad - ref) <= 1e-4 * (np.abs(ref) + np.abs(ref).max()))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_off_by_one_reduction_fails_and_the_full_one_passes(dtype):
    @axon.program(x=("m", "n"))
    def rowsum(x):
        return x.sum(axis=-1, keepdims=True)

    x = np.random.default_rng(1).standard_normal((128, 4096), dtype=np.float32).astype(numpy_dtype(dtype))
    ok = run(ROWSUM.replace("COLS", "4096"), {"x": x}, reference=rowsum)
    assert ok.reference_ok and ok.tolerance["longest_reduction"] == 4096
    short = run(ROWSUM.replace("COLS", "4095"), {"x": x}, reference=rowsum)
    assert short.reference_ok is False and short.max_err_over_bound > 1


def test_erf_gelu_for_the_tanh_gelu_fails_in_float32():
    @axon.program(x=("m", "n"))
    def gelu(x):
        return F.gelu(x)  # Axon's gelu is the tanh approximation

    x = (2 * np.random.default_rng(2).standard_normal((128, 512))).astype(np.float32)
    tanh = run(ACTIVATION.replace("FUNC", "gelu_apprx_tanh"), {"x": x}, reference=gelu)
    assert tanh.reference_ok and tanh.max_abs_err < 1e-5
    erf = run(ACTIVATION.replace("FUNC", "gelu"), {"x": x}, reference=gelu)
    assert erf.reference_ok is False and 3e-4 < erf.max_abs_err < 1e-3  # 4.7e-4 at |x| ~ 1-2


def test_a_numpy_reference_gets_magnitudes_from_absolute_inputs_and_a_reduction_length():
    rng = np.random.default_rng(3)
    args = {"lhsT": rng.standard_normal((128, 128), dtype=np.float32),
            "rhs": rng.standard_normal((128, 512), dtype=np.float32)}
    out = run(str(TUTORIAL / "tiled.py"), args).outputs
    matmul = load_reference(f"{TUTORIAL / 'reference.py'}:matmul")  # returns float32: its own rounding counts
    default = reference_check(matmul, args, out)
    assert default.ok and default.tolerance["longest_reduction"] == 512  # the largest input dimension
    assert reference_check(matmul, args, out, reduction_length=128).tolerance["bound_median"] < \
        default.tolerance["bound_median"]
    ref = args["lhsT"].astype(np.float64).T @ args["rhs"]
    at = np.unravel_index(np.argmax(np.abs(ref)), ref.shape)
    bad = out.copy()
    bad[at] = ref[at] * (1 + 1e-4)
    assert not reference_check(matmul, args, bad, reduction_length=128).ok


def test_bf16_outputs_tolerate_their_rounding_only():
    x = np.linspace(-50, 50, 128 * 64, dtype=np.float32).reshape(128, 64)
    xb = x.astype(ml_dtypes.bfloat16)
    ok = run(SOURCE, {"x": xb}, reference=lambda x: 2 * x)
    assert ok.reference_ok and ok.tolerance["dtypes"]["out"] == ["bfloat16"]
    bad = reference_check(lambda x: 2 * x + 0.25, {"x": xb}, ok.outputs)
    assert not bad.ok
    with pytest.raises(InputError):
        reference_check(lambda x: (2 * x)[:10], {"x": xb}, ok.outputs)
