"""runner.run: kernels as files or source, inputs as arrays/specs/npz, reference checks."""
import numpy as np
import pytest

from axon.errors import InputError
from axon.targets.trainium.runner import InputSpec, check_outputs, parse_input_spec, run

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


def test_output_comparison_tolerates_low_precision_rounding_only():
    import ml_dtypes

    ref = np.linspace(-50, 50, 1000, dtype=np.float32)
    assert check_outputs(ref.astype(ml_dtypes.bfloat16), ref)[0]
    assert not check_outputs((ref + 1.0).astype(ml_dtypes.bfloat16), ref)[0]
    assert not check_outputs(ref + 1e-2, ref)[0]
    with pytest.raises(InputError):
        check_outputs(ref[:10], ref)
