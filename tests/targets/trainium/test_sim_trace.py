"""The instruction trace the simulator records for the performance model, and timing-only mode."""
import os
import textwrap

import ml_dtypes
import numpy as np
import pytest

from axon.targets.trainium.simulator import ShapeDtype, load_kernel, simulate, simulate_source
from axon.targets.trainium.trace import Engine, Memory

HERE = os.path.dirname(__file__)
OLD = "from neuronxcc import nki\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"

MATMUL = OLD + textwrap.dedent("""
@nki.jit
def k(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    for kk in nl.affine_range(2):
        ta = nl.load(a[kk * 128:(kk + 1) * 128, :])
        tb = nl.load(b[kk * 128:(kk + 1) * 128, :])
        acc[...] += nisa.nc_matmul(ta, tb)
    nl.store(out, value=nl.copy(acc))
    return out
""")


def test_one_instruction_per_hardware_instruction_with_lines_and_facts():
    a, b = np.ones((256, 128), np.float32), np.ones((256, 512), np.float32)
    r = simulate_source(MATMUL, "k", {"a": a, "b": b})
    np.testing.assert_array_equal(r.outputs, np.full((128, 512), 256.0))
    ops = [(i.opcode, i.line) for i in r.trace]
    assert ops == [("memset", 8), ("dma_copy", 10), ("dma_copy", 11), ("nc_matmul", 12),
                   ("dma_copy", 10), ("dma_copy", 11), ("nc_matmul", 12),
                   ("tensor_copy", 13), ("dma_copy", 13)]
    mm = [i for i in r.trace if i.opcode == "nc_matmul"]
    assert mm[0].engine is Engine.TENSOR
    assert mm[0].extra["stationary_free"] == 128 and mm[0].extra["moving_free"] == 512
    assert mm[0].extra["contraction"] == 128 and mm[0].extra["accumulate"] is True
    # both matmuls write the accumulator (the `+=` moved their write, no extra add was issued)
    acc = r.trace[0].writes[0]
    assert acc.memory is Memory.PSUM and all(m.writes == (acc,) for m in mm)
    assert acc in mm[0].reads
    copy = r.trace[7]
    assert copy.extra["src_psum"] is True and copy.reads == (acc,)
    # loads in different iterations get different buffers; loop facts are recorded
    loads = [i for i in r.trace if i.opcode == "dma_copy" and i.extra["api"] == "nl.load"]
    assert len({i.writes[0].buffer for i in loads}) == 4
    assert [i.extra["loops"][-1][1] for i in loads] == [0, 0, 1, 1]
    assert loads[0].extra["loops"][-1][2] is False  # affine_range: not sequential
    assert loads[0].dma_bytes == 128 * 128 * 4 and loads[0].hbm_bytes == 128 * 128 * 4
    assert r.hbm_bytes == (256 * 128 + 256 * 512 + 128 * 512) * 4


def test_regions_name_partitions_and_bytes():
    src = OLD + textwrap.dedent("""
    @nki.jit
    def k(x):
        t = nl.ndarray((4, nl.par_dim(128), 256), dtype=nl.bfloat16, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            t[i] = nl.load(x[:, i * 256:(i + 1) * 256])
        u = nl.exp(t[2, 64:96, 10:20])
    """)
    r = simulate_source(src, "k", {"x": np.ones((128, 1024), dtype=ml_dtypes.bfloat16)})
    loads = r.trace[:4]
    buf = loads[0].writes[0].buffer
    assert [(w.p_start, w.p_stop, w.b_start, w.b_stop) for w in (l.writes[0] for l in loads)] == \
        [(0, 128, i * 512, (i + 1) * 512) for i in range(4)]
    assert all(l.writes[0].buffer == buf for l in loads)
    hbm = loads[1].reads[0]
    assert hbm.memory is Memory.HBM and (hbm.p_start, hbm.p_stop) == (0, 1)
    assert (hbm.b_start, hbm.b_stop) == (512, 127 * 2048 + 1024)
    act = r.trace[4]
    assert act.opcode == "activation" and act.engine is Engine.SCALAR
    rd = act.reads[0]
    assert (rd.p_start, rd.p_stop, rd.b_start, rd.b_stop) == (64, 96, 2 * 512 + 20, 2 * 512 + 40)
    assert act.partitions == 32 and act.free_elems == 10 and act.dtype == "bfloat16"


def test_psum_tile_in_a_loop_gets_fresh_buffer_per_iteration():
    src = OLD + textwrap.dedent("""
    @nki.jit
    def k(a):
        for i in nl.affine_range(3):
            p = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            p += nisa.nc_matmul(nl.load(a[:, 0:128]), nl.load(a))
    """)
    r = simulate_source(src, "k", {"a": np.ones((128, 512), np.float32)})
    mm = [i for i in r.trace if i.opcode == "nc_matmul"]
    assert len({i.writes[0].buffer for i in mm}) == 3
    assert r.psum_peak_bytes == 2048


def test_timing_only_mode_records_the_same_trace_without_data():
    a, b = np.ones((256, 128), np.float32), np.ones((256, 512), np.float32)
    full = simulate_source(MATMUL, "k", {"a": a, "b": b})
    timed = simulate_source(MATMUL, "k", {"a": ShapeDtype((256, 128), "float32"),
                                          "b": ShapeDtype((256, 512), "float32")}, timing_only=True)
    assert [(i.opcode, i.line, i.reads, i.writes) for i in full.trace] == \
        [(i.opcode, i.line, i.reads, i.writes) for i in timed.trace]
    assert timed.outputs == ShapeDtype((128, 512), "float32")
    assert timed.hbm_bytes == full.hbm_bytes


def test_same_input_gives_identical_trace():
    a, b = np.ones((256, 128), np.float32), np.ones((256, 512), np.float32)
    t1 = simulate_source(MATMUL, "k", {"a": a, "b": b}).trace
    t2 = simulate_source(MATMUL, "k", {"a": a, "b": b}).trace
    assert t1 == t2


def test_simulation_leaves_no_global_state_and_inputs_untouched():
    import sys

    a = np.ones((256, 128), np.float32)
    before = set(sys.modules)
    simulate_source(MATMUL, "k", {"a": a, "b": np.ones((256, 512), np.float32)})
    assert not any(m == "nki" or m.startswith(("nki.", "neuronxcc")) for m in set(sys.modules) - before)
    assert (a == 1).all()


@pytest.mark.slow
def test_large_matmul_timing_only_traces_every_instruction():
    """bf16 [4096, 8192] @ [8192, 8192], blocked like the tutorial's fully optimised kernel:
    ~32k nc_matmul + DMAs, no arithmetic. (Its speed is measured by
    benchmarks/matmul_tutorial_fidelity.py, not here.)"""
    k = load_kernel(os.path.join(HERE, "sim_kernel_matmul_blocked.py"))
    r = simulate(k, {"lhsT": ShapeDtype((8192, 4096), "bfloat16"),
                     "rhs": ShapeDtype((8192, 8192), "bfloat16")}, timing_only=True)
    n_mm = sum(1 for i in r.trace if i.opcode == "nc_matmul")
    assert n_mm == 32768


ACCESS = OLD + textwrap.dedent("""
@nki.jit
def k(x):
    out = nl.ndarray((256, 1024), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[0:128, 0:512])
    s = nisa.tensor_tensor(t[:, 0:256], t[:, 256:512], op=nl.add)
    e = nisa.tensor_tensor(t[:, 0:512:2], t[:, 1:512:2], op=nl.add, dtype=nl.float32)
    nl.store(out[128:256, 512:768], value=s)
    return out
""")


def test_access_facts_for_the_model():
    r = simulate_source(ACCESS, "k", {"x": ShapeDtype((256, 1024), "bfloat16")}, timing_only=True)
    load, plain, strided, store = r.trace
    assert plain.extra["contiguous"] is True and plain.extra["free_stride_bytes"] == 2
    assert plain.extra["out_dtype"] == "bfloat16"
    assert strided.extra["contiguous"] is False and strided.extra["free_stride_bytes"] == 4
    assert strided.extra["out_dtype"] == "float32"
    # HBM tiles of a wider matrix: 128 rows of 512 bytes, 2048 bytes apart
    (dst,) = store.writes
    assert (dst.row_stride, dst.rows, dst.row_bytes) == (2048, 128, 512)
    assert dst.b_start == 128 * 2048 + 1024 and dst.b_stop == dst.b_start + 127 * 2048 + 512
    (src,) = load.reads
    assert (src.row_stride, src.rows, src.row_bytes) == (2048, 128, 1024)


def test_unread_results_names_the_instructions_whose_results_nothing_reads():
    from axon.targets.trainium.perfmodel import unread_results

    r = simulate_source(MATMUL, "k", {"a": np.ones((256, 128), np.float32), "b": np.ones((256, 512), np.float32)})
    assert unread_results(r.trace) == []  # every load feeds a matmul, the accumulator its copy, the copy the store
    dead = MATMUL.replace("    nl.store(out, value=nl.copy(acc))",
                          "    spare = nl.exp(acc)\n    nl.store(out, value=nl.copy(acc))")
    r = simulate_source(dead, "k", {"a": np.ones((256, 128), np.float32), "b": np.ones((256, 512), np.float32)})
    assert [(i.opcode, i.line) for i in unread_results(r.trace)] == [("activation", 13)]
