"""Read-after-write dependencies of the performance model (perfmodel._dependencies), and the
results no instruction reads (perfmodel.unread_results, in `axon simulate`'s report)."""
import ml_dtypes
import numpy as np

from axon.search.candidates import Counts, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.optimize import get_target
from axon.suite import SUITE
from axon.targets.trainium import perfmodel
from axon.targets.trainium.hardware import TRN1
from axon.targets.trainium.runner import run

# a float32 weight tile [128, 512] and the PSUM tile it accumulates into span the same bytes of
# their own buffers: the same region key, in different buffers
MATMUL = '''
import nki
import nki.isa as nisa
import nki.language as nl

@nki.jit
def mm(xT, w):
    out = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 128), dtype=xT.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=xT)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        b = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=w[nl.ds(k * 128, 128), 0:512])
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    o = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=acc)
    nisa.dma_copy(dst=out, src=o)
    return out
'''

DEAD_COPY = '''
import nki
import nki.isa as nisa
import nki.language as nl

@nki.jit
def twice(x):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    spare = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=spare, src=t)
    o = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=o, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=o)
    return out
'''


def _line(source: str, text: str) -> int:
    """The kernel line (1-based, as the simulator counts) holding `text`."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def _trace(source, inputs, tmp_path):
    from axon.targets.trainium.simulator import load_kernel, simulate

    path = tmp_path / "kernel.py"
    path.write_text(source)
    return simulate(load_kernel(str(path)), inputs, target="trn1", timing_only=True).trace


def test_a_matmul_waits_for_its_operands_whatever_their_byte_range(tmp_path):
    """A matmul's read of its moving operand was taken for its own PSUM accumulation where the two
    regions had the same byte range (float32 [128, 512] in SBUF and in PSUM), so it did not wait for
    the operand's load: a float32 kernel timed its matmuls ahead of their weights."""
    trace = _trace(MATMUL, {"xT": np.zeros((128, 128), np.float32), "w": np.zeros((256, 512), np.float32)}, tmp_path)
    _, raws = perfmodel._dependencies(trace, set())
    loads = [i for i, ins in enumerate(trace) if ins.line == _line(MATMUL, "dst=b,")]
    matmuls = [i for i, ins in enumerate(trace) if ins.opcode == "nc_matmul"]
    assert len(loads) == len(matmuls) == 2
    for load, mm in zip(loads, matmuls):
        assert load in raws[mm]
    schedule = perfmodel.estimate(trace, TRN1, keep_schedule=True).schedule
    start = {i: s for _, s, _, _, _, i in schedule.rows}
    end = {i: e for _, _, e, _, _, i in schedule.rows}
    assert all(start[mm] >= end[load] for load, mm in zip(loads, matmuls))


def test_a_result_nothing_reads_is_reported_with_its_line(tmp_path):
    report = run(DEAD_COPY, {"x": np.ones((128, 512), np.float32)}, target="trn2")
    line = _line(DEAD_COPY, "dst=spare")
    assert report.unread == ((line, "tensor_copy", 1),)
    assert report.to_json()["unread_results"] == [{"line": line, "opcode": "tensor_copy", "instructions": 1}]
    np.testing.assert_array_equal(report.outputs, 2 * np.ones((128, 512), np.float32))


def test_axon_kernels_leave_no_result_unread():
    """Every candidate of a fused attention and of a gated MLP reads what it computes (an
    accumulation group counts as read where its last matmul is)."""
    tgt = get_target("trn2")
    for name in ("gqa", "gated_mlp"):
        b = SUITE[name]
        sizes = b.sizes("small")
        shapes = {k: np.zeros(tuple(v.shape), ml_dtypes.bfloat16)
                  for k, v in b.program.input_shapes(sizes, "bfloat16").items()}
        cands = enumerate_candidates(name, [(b.program.graph, ())], sizes, tgt, "bfloat16", Lowerer(tgt), Counts())
        for c in cands[:: max(1, len(cands) // 12)]:
            assert run(c.source, shapes, target="trn2", timing_only=True).unread == (), c.describe()
