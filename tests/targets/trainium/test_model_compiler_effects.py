"""What the Neuron compiler does to a kernel, as the simulator and model reproduce it for the
calibration rows (benchmarks/calibrate.py): gathered accesses touch only their bounding box,
spills evict the unit used furthest ahead, lazily zeroed PSUM blocks fold into their matmuls block
by block, an activation and the add-reduction of its output fuse, DMA payload efficiency saturates
at 4 KiB of contiguous HBM bytes, and the engines chosen for operations left to the compiler.
Kernels are written for these tests in the public styles; no fetched code."""
import textwrap

import numpy as np
import pytest

from axon.targets.trainium.hardware import TRN1
from axon.targets.trainium.perfmodel import estimate
from axon.targets.trainium.simulator import ShapeDtype, simulate_source
from axon.targets.trainium.trace import Engine

BETA1 = "import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nimport neuronxcc.nki.isa as nisa\n"
NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n"

# 16 blocks of 32 KB per partition (512 KB: more than SBUF), each filled by a 3-D-index load
# (8 rows of 1024 side by side in one block) and used once
GATHER_BLOCKS = BETA1 + textwrap.dedent("""
@nki.jit
def k(x):
    out = nl.ndarray((16, 128, 8192), dtype=np.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray((8, 2, nl.par_dim(128), 8192), dtype=np.float32, buffer=nl.sbuf)
    for i in nl.affine_range(8):
        for j in nl.affine_range(2):
            buf[i, j, nl.arange(128)[:, None, None], 1024 * nl.arange(8)[None, :, None] + nl.arange(1024)[None, None, :]] = nl.load(x[i, nl.arange(128)[:, None, None], 8 * j + nl.arange(8)[None, :, None], nl.arange(1024)[None, None, :]])
            nl.store(out[2 * i + j], value=buf[i, j])
    return out
""")

# trn2 holds three 64 KB tiles. When t needs room, `a` was used more recently than `b`, but `b`
# is needed next and `a` only at the end: evicting `a` costs one reload, evicting `b` (least
# recently used) two.
FURTHEST = NEW + textwrap.dedent("""
@nki.jit
def k(x):
    out = nl.ndarray((128, 16384), dtype=x.dtype, buffer=nl.shared_hbm)
    b = nl.load(x[1])
    a = nl.load(x[0])
    c = nl.load(x[2])
    t = nl.tanh(c)
    u = nl.add(b, t)
    v = nl.add(u, a)
    nl.store(out, value=v)
    return out
""")

# four lazily zeroed PSUM blocks, each overwritten by a matmul and read in its own iteration
LAZY_OVERWRITE = NEW + textwrap.dedent("""
@nki.jit
def k(a, b):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    sa = nl.load(a)
    sb = nl.load(b)
    acc = nl.zeros((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum, lazy_initialization=True)
    for i in nl.affine_range(4):
        acc[i] = nisa.nc_matmul(sa, sb)
        res = nl.copy(acc[i])
        nl.store(out[i], value=res)
    return out
""")

# the same four blocks, each zeroed by the kernel's own nisa.memset before its matmul accumulates
EXPLICIT_ZEROING = NEW + textwrap.dedent("""
@nki.jit
def k(a, b):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    sa = nl.load(a)
    sb = nl.load(b)
    for i in nl.affine_range(4):
        acc = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=acc, value=0.0)
        nisa.nc_matmul(dst=acc, stationary=sa, moving=sb, accumulate=True)
        res = nl.copy(acc)
        nl.store(out[i], value=res)
    return out
""")

# rmsnorm's sum of squares: a ScalarE square, then a VectorE sum of exactly its output
SUM_OF_SQUARES = NEW + textwrap.dedent("""
@nki.jit
def k(x):
    out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        sq = nisa.activation(op=nl.square, data=t)
        s = nl.sum(sq, axis=[1])
        nl.store(out[i * 128:(i + 1) * 128, :], value=s)
    return out
""")

# engines left to the compiler: a scaled PSUM evacuation, a bitvec op on PSUM-free data, a
# tensor_scalar on SBUF, a copy to another partition base
PLACEMENT = BETA1 + textwrap.dedent("""
@nki.jit
def k(a, b):
    out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    sa = nl.load(a)
    sb = nl.load(b)
    ps = nisa.nc_matmul(sa, sb)
    scaled = nisa.tensor_scalar(data=ps, op0=nl.multiply, operand0=0.5, engine=nki.isa.unknown_engine)
    plus = nisa.tensor_scalar(data=scaled, op0=nl.add, operand0=1.0, engine=nki.isa.unknown_engine)
    lower = nl.copy(plus[64:128, :])
    same = nl.copy(plus[0:64, :])
    both = nl.add(lower, same)
    nl.store(out[0:64, :], value=both)
    nl.store(out[64:128, :], value=plus[64:128, :])
    return out
""")


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_a_gather_into_one_block_keeps_only_that_block_live():
    x = _x(8, 128, 16, 1024)
    r = simulate_source(GATHER_BLOCKS, "k", {"x": x}, target="trn1", strict_capacity=True)
    assert r.spills == 0 and r.sbuf_peak_bytes <= 2 * 32768
    loads = [i for i in r.trace if i.opcode == "dma_copy" and i.writes[0].memory.value == "sbuf"]
    assert [(w.b_start, w.b_stop) for w in (i.writes[0] for i in loads[:2])] == [(0, 32768), (32768, 65536)]
    want = x.reshape(8, 128, 2, 8, 1024).transpose(0, 2, 1, 3, 4).reshape(16, 128, 8192)
    np.testing.assert_array_equal(r.outputs, want)


def test_spills_evict_the_unit_needed_furthest_ahead():
    x = _x(3, 128, 16384)
    r = simulate_source(FURTHEST, "k", {"x": x})
    unit = 128 * 16384 * 4
    assert (r.spills, r.reloads, r.reload_bytes) == (1, 1, unit)
    reload = next(i for i in r.trace if i.extra.get("api") == "spill reload")
    assert reload.line == 13  # `a`, reloaded for its last use (v = u + a)
    np.testing.assert_allclose(r.outputs, x[1] + np.tanh(x[2]) + x[0], rtol=1e-5, atol=1e-5)


def test_each_lazily_zeroed_block_folds_into_its_own_matmul():
    a, b = ShapeDtype((128, 128), "float32"), ShapeDtype((128, 512), "float32")
    r = simulate_source(LAZY_OVERWRITE, "k", {"a": a, "b": b}, target="trn1", timing_only=True)
    memsets = [i for i in r.trace if i.opcode == "memset"]
    est = estimate(r.trace, TRN1)
    assert len(memsets) == 4 and est.folded == 4
    assert est.engine_busy_ns["vector"] == 0.0  # the zeroing was VectorE's only work


def test_an_explicit_memset_is_kept_and_its_matmul_waits_for_it():
    """nisa.memset is an ISA instruction the compiler emits as written: unlike nl.zeros it is
    never folded, it takes VectorE time, and the matmul that accumulates onto it starts after it."""
    a, b = ShapeDtype((128, 128), "float32"), ShapeDtype((128, 512), "float32")
    r = simulate_source(EXPLICIT_ZEROING, "k", {"a": a, "b": b}, target="trn1", timing_only=True)
    est = estimate(r.trace, TRN1, keep_schedule=True)
    memsets = [n for n, i in enumerate(r.trace) if i.opcode == "memset"]
    assert len(memsets) == 4 and est.folded == 0
    assert est.engine_busy_ns["vector"] > 0.0
    span = {row[5]: (row[1], row[2]) for row in est.schedule.rows}
    matmuls = [n for n, i in enumerate(r.trace) if i.opcode == "nc_matmul"]
    for zero, mm in zip(memsets, matmuls):
        assert span[mm][0] >= span[zero][1]


def test_activation_and_the_sum_of_its_output_fuse_into_activation_reduce():
    r = simulate_source(SUM_OF_SQUARES, "k", {"x": ShapeDtype((512, 1024), "float32")}, target="trn1",
                        timing_only=True)
    est = estimate(r.trace, TRN1, keep_schedule=True)
    assert est.fused == 4 and est.engine_busy_ns["vector"] == 0.0
    assert {row[3] for row in est.schedule.rows if row[0] == 2} == {"activation_reduce"}  # ScalarE
    # MIN_II more than the activation alone, plus its access start, at ScalarE's clock
    assert est.engine_busy_ns["scalar"] == pytest.approx(4 * (1024 + 64 + 60) / 1.4)
    # the store of each sum still waits for its (fused) producer
    assert est.instructions == len(r.trace) - 4


def test_dma_efficiency_saturates_at_4_kib_of_contiguous_hbm_bytes():
    dma = TRN1.dma
    assert dma.efficiency(4096) == dma.efficiency(65536) == 1.0
    assert dma.efficiency(256) < dma.efficiency(1024) < dma.efficiency(2048) < 1.0
    src = NEW + textwrap.dedent("""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x[0:128, 0:64])
        nl.store(out, value=t)
        return out
    """)

    def load_ns(cols):
        r = simulate_source(src, "k", {"x": ShapeDtype((128, cols), "float32")}, target="trn1", timing_only=True)
        load = [i for i in r.trace if i.opcode == "dma_copy"][:1]
        return estimate(load, TRN1).latency_ns
    contiguous, strided = load_ns(64), load_ns(1024)  # rows of 256 B one after another, or 4 KiB apart
    assert contiguous == pytest.approx(1300 + 128 * 256 / 272)
    assert strided == pytest.approx(1300 + 128 * 256 / (272 * dma.efficiency(256)))


def test_engines_the_compiler_chooses():
    r = simulate_source(PLACEMENT, "k", {"a": ShapeDtype((128, 128), "float32"),
                                         "b": ShapeDtype((128, 512), "float32")}, target="trn1", timing_only=True)
    by_line = {(i.line, i.opcode): i.engine for i in r.trace}
    first = PLACEMENT.splitlines().index("    scaled = nisa.tensor_scalar(data=ps, op0=nl.multiply, operand0=0.5, engine=nki.isa.unknown_engine)") + 1
    assert by_line[(first, "tensor_scalar")] is Engine.SCALAR  # scales a PSUM accumulator on the way out
    assert by_line[(first + 1, "tensor_scalar")] is Engine.VECTOR  # SBUF in, SBUF out
    assert by_line[(first + 2, "tensor_copy")] is Engine.SCALAR  # partitions 64..127 to 0..63
    assert by_line[(first + 3, "tensor_copy")] is Engine.VECTOR  # same partitions
