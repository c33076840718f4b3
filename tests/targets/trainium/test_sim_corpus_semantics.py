"""NKI semantics the public kernels rely on, each checked on a small kernel written here: the
first matmul of an accumulation group in timing-only mode, instructions whose mask is off
everywhere, and the indexing forms of the reference kernels."""
import textwrap

import numpy as np
import pytest

from axon.errors import KernelError
from axon.targets.trainium.simulator import ShapeDtype, simulate_source

NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
OLD = "from neuronxcc import nki\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"

MATMUL_GROUPS = """
    @nki.jit
    def k(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        for kk in nl.affine_range(2):
            at = nl.load(a[kk * 128:(kk + 1) * 128, :])
            bt = nl.load(b[kk * 128:(kk + 1) * 128, :])
            nisa.nc_matmul(dst=acc, stationary=at, moving=bt)
        s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=acc)
        nl.store(out, value=s)
        return out
"""

MATMUL_IADD = """
    @nki.jit
    def k(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        for kk in nl.affine_range(2):
            at = nl.load(a[kk * 128:(kk + 1) * 128, :])
            bt = nl.load(b[kk * 128:(kk + 1) * 128, :])
            acc += nisa.nc_matmul(at, bt)
        nl.store(out, value=nl.copy(acc))
        return out
"""


def _accumulate_flags(source, api, timing_only):
    shapes = {"a": ShapeDtype((256, 128), "float32"), "b": ShapeDtype((256, 512), "float32")}
    rng = np.random.default_rng(0)
    values = {"a": rng.standard_normal((256, 128), dtype=np.float32),
              "b": rng.standard_normal((256, 512), dtype=np.float32)}
    res = simulate_source(api + textwrap.dedent(source), "k", shapes if timing_only else values,
                          target="trn1", timing_only=timing_only)
    flags = [ins.extra["accumulate"] for ins in res.trace if ins.opcode == "nc_matmul"]
    return flags, res, values


def test_first_matmul_overwrites_in_timing_only_mode_as_with_values():
    for source, api in ((MATMUL_GROUPS, NEW), (MATMUL_IADD, OLD)):
        timed, _, _ = _accumulate_flags(source, api, timing_only=True)
        valued, res, v = _accumulate_flags(source, api, timing_only=False)
        assert timed == valued == [False, True]
        np.testing.assert_allclose(res.outputs, v["a"].T @ v["b"], rtol=1e-4, atol=1e-3)


MASKED_OFF_GROUP = """
    @nki.jit
    def k(x):
        out = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        rows = x.shape[0]
        ix, iy = nl.mgrid[0:128, 0:64]
        for g in nl.affine_range(2):
            t = nl.load(x[g * 128 + ix, iy], mask=(g * 128 < rows))
            s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            s[...] = nisa.tensor_reduce(np.add, t, axis=[1], mask=(g * 128 < rows))
            y = nl.multiply(t, s, mask=(g * 128 < rows))
            nl.store(out[g * 128 + ix, iy], value=y, mask=(g * 128 < rows))
        return out
"""


def test_an_instruction_masked_off_everywhere_reads_nothing():
    # the second group lies past the rows: its never-written column tile is not read
    x = np.random.default_rng(1).standard_normal((128, 64), dtype=np.float32)
    res = simulate_source(OLD + "import numpy as np\n" + textwrap.dedent(MASKED_OFF_GROUP), "k",
                          {"x": x}, target="trn1", partial=True)
    np.testing.assert_allclose(res.outputs[:128], x * x.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-4)
    assert np.isnan(res.outputs[128:]).all()


FREE_AXIS_KEPT = """
    from neuronxcc.nki.language import par_dim

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.full((par_dim(128), 4), fill_value=1.0, dtype=nl.float32)
        y = nl.load(x)
        for i in nl.affine_range(4):
            col = acc[:, i]  # a [128, 1] tile
            col[:, 0] = nl.add(col[:, 0], y[:, i])
        nl.store(out, acc)
        return out
"""


def test_an_integer_on_the_last_free_axis_keeps_a_size_one_axis():
    x = np.random.default_rng(2).standard_normal((128, 4), dtype=np.float32)
    res = simulate_source(OLD + textwrap.dedent(FREE_AXIS_KEPT), "k", {"x": x}, target="trn1")
    np.testing.assert_allclose(res.outputs, 1.0 + x, rtol=1e-6)


PLACED_IN_LOOP = """
    import neuronxcc.nki.compiler as ncc

    @nki.jit
    def k(a, b):
        rows = a.shape[1]
        out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:128, 0:512]
        ip, jf = nl.mgrid[0:128, 0:128]
        bt = nl.load(b)
        for g in nl.affine_range(2):
            at = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
            at[...] = nl.load(a[ip, g * 128 + jf], mask=(g * 128 < rows))
            res = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32, buffer=PSUM_PLACE)
            res[...] += nisa.nc_matmul(at, bt, mask=(g * 128 < rows))
            # unmasked: in the group past the end this copies what the first group left there
            o = nl.copy(res)
            nl.store(out[g * 128 + ix, iy], value=o, mask=(g * 128 < rows))
        return out
"""


def _placed(psum_place):
    src = OLD + textwrap.dedent(PLACED_IN_LOOP).replace("PSUM_PLACE", psum_place)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 128), dtype=np.float32)
    b = rng.standard_normal((128, 512), dtype=np.float32)
    return simulate_source(src, "k", {"a": a, "b": b}, target="trn1", partial=True), a, b


def test_a_tensor_placed_over_an_earlier_one_holds_its_data():
    res, a, b = _placed("ncc.psum.mod_alloc(base_bank=0)")
    np.testing.assert_allclose(res.outputs[:128], a.T @ b, rtol=1e-4, atol=1e-3)
    assert np.isnan(res.outputs[128:]).all()


def test_without_a_placement_the_same_read_is_uninitialised():
    with pytest.raises(KernelError, match=r"<kernel>:\d+: nisa.tensor_copy reads uninitialised PSUM"):
        _placed("nl.psum")


GATHER_THROUGH_RESHAPE = """
    @nki.jit
    def k(x, rows):
        out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        flat = x.reshape(shape=(2, 96, 16))  # [b, h * w, c]
        ip = nl.arange(128)[:, None]
        jf = nl.arange(16)[None, :]
        idx = nl.load(rows)  # [128, 1] int32 row offsets into the h * w axis
        got = nl.load(flat[1, idx, jf])
        nl.store(out[ip, jf], value=got)
        return out
"""


def test_an_index_tile_gathers_through_a_reshaped_view():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 8, 12, 16), dtype=np.float32)
    rows = rng.integers(0, 96, size=(128, 1)).astype(np.int32)
    res = simulate_source(OLD + textwrap.dedent(GATHER_THROUGH_RESHAPE), "k", {"x": x, "rows": rows},
                          target="trn1")
    np.testing.assert_array_equal(res.outputs, x.reshape(2, 96, 16)[1, rows[:, 0]])


WINDOW_BROADCASTS = """
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 8, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        w = nl.mgrid[0:128, 0:8, 0:3, 0:3]
        t = nl.load(x)
        top = nl.max(t, axis=[2, 3], keepdims=True)  # [128, 8, 1, 1]
        pos = nisa.iota(3 * w.y + w.z, dtype=nl.uint32)  # [1, 1, 3, 3]: no partition term
        hit = nl.equal(top, t, dtype=nl.float32)
        first = nl.where(hit, pos, 9, dtype=nl.float32)  # a one-partition x
        lt = nl.subtract(pos, top, dtype=nl.float32)  # both operands broadcast
        nl.store(out, value=nl.add(first, lt))
        return out
"""


def test_operands_broadcast_across_partitions_and_free_axes():
    x = np.random.default_rng(5).standard_normal((128, 8, 3, 3), dtype=np.float32)
    res = simulate_source(NEW + textwrap.dedent(WINDOW_BROADCASTS), "k", {"x": x}, target="trn1")
    top = x.max(axis=(2, 3), keepdims=True)
    pos = (3 * np.arange(3)[:, None] + np.arange(3)[None, :]).astype(np.float32)
    want = np.where(x == top, pos, 9.0) + (pos - top)
    np.testing.assert_allclose(res.outputs, want, rtol=1e-6, atol=1e-6)
