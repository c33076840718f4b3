"""bn_stats, bn_aggr, tensor_scalar_reduce and affine_select against NumPy statements of their
documented semantics (nki.isa docstrings), in both APIs, with edge tiles, masks and bf16; their
trace records; the LayerNorm example; and the nki.isa namespace the loader builds."""
import os
import textwrap

import ml_dtypes
import numpy as np
import pytest

from axon.errors import KernelError
from axon.targets.trainium.hardware import COSTS, TRN2
from axon.targets.trainium.simulator import load_kernel, simulate, simulate_source
from axon.targets.trainium.simulator.context import SimContext
from axon.targets.trainium.simulator.loader import build_modules
from axon.targets.trainium.trace import Engine

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(2)
NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\nimport numpy as np\n"
OLD = ("from neuronxcc import nki\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"
       "import numpy as np\n")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "nki")


def sim(body, api=NEW, **inputs):
    return simulate_source(api + textwrap.dedent(body), "k", inputs)


def rand(*shape, dtype=np.float32, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def f32(a):
    return np.asarray(a).astype(np.float32)


def bn_stats_ref(x):
    """[count, mean, var*count] of the even elements, then of the odd ones, per row."""
    out = []
    for part in (x[:, 0::2], x[:, 1::2]):
        n = part.shape[1]
        mean = part.mean(axis=1) if n else np.zeros(len(x))
        out += [np.full(len(x), n), mean, ((part - mean[:, None]) ** 2).sum(axis=1)]
    return np.stack(out, axis=1).astype(np.float32)


# ----- bn_stats / bn_aggr ----------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(128, 512), (100, 300), (7, 33), (3, 1)])
@pytest.mark.parametrize("api", ["new", "old"])
def test_bn_stats_layout(shape, api):
    x = rand(*shape)
    call = ("s = nl.ndarray((x.shape[0], 6), dtype=nl.float32, buffer=nl.sbuf)\n"
            "        nisa.bn_stats(dst=s, data=t)" if api == "new" else "s = nisa.bn_stats(t)")
    body = f"""
    @nki.jit
    def k(x):
        out = nl.ndarray((x.shape[0], 6), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        {call}
        nl.store(out, value=s)
        return out
    """
    got = sim(body, NEW if api == "new" else OLD, x=x).outputs
    np.testing.assert_allclose(got, bn_stats_ref(x), rtol=1e-5, atol=1e-5)


def test_bn_stats_masked_tail_chunk_reads_past_the_tile_end():
    x = rand(64, 700)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray((64, 12), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        ip = nl.arange(64)[:, None]
        jf = nl.arange(512)[None, :]
        js = nl.arange(6)[None, :]
        st = nl.ndarray((64, 12), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(2):
            st[ip, j * 6 + js] = nisa.bn_stats(t[ip, j * 512 + jf], mask=(j * 512 + jf < 700))
        nl.store(out, value=st)
        return out
    """
    got = sim(body, OLD, x=x).outputs
    np.testing.assert_allclose(got[:, :6], bn_stats_ref(x[:, :512]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 6:], bn_stats_ref(x[:, 512:]), rtol=1e-5, atol=1e-5)
    assert got[0, 6] == 94 and got[0, 9] == 94  # 188 active elements, split even / odd


@pytest.mark.parametrize("chunks", [1, 3])
@pytest.mark.parametrize("api", ["new", "old"])
def test_bn_aggr_merges_chunks_into_mean_and_variance(chunks, api):
    x = rand(100, 200 * chunks, lo=-1.0, hi=3.0)
    if api == "new":
        body = f"""
        @nki.jit
        def k(x):
            out = nl.ndarray((100, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            st = nl.ndarray((100, {6 * chunks}), dtype=nl.float32, buffer=nl.sbuf)
            for j in nl.affine_range({chunks}):
                nisa.bn_stats(dst=st[:, j * 6:(j + 1) * 6], data=t[:, j * 200:(j + 1) * 200])
            mv = nl.ndarray((100, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.bn_aggr(dst=mv, data=st)
            nl.store(out, value=mv)
            return out
        """
    else:
        body = f"""
        @nki.jit
        def k(x):
            out = nl.ndarray((100, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            st = nl.ndarray((100, {6 * chunks}), dtype=nl.float32, buffer=nl.sbuf)
            for j in nl.affine_range({chunks}):
                st[:, j * 6:(j + 1) * 6] = nisa.bn_stats(t[:, j * 200:(j + 1) * 200])
            nl.store(out, value=nisa.bn_aggr(st))
            return out
        """
    got = sim(body, NEW if api == "new" else OLD, x=x).outputs
    np.testing.assert_allclose(got[:, 0], x.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 1], x.var(axis=1), rtol=1e-4)


def test_bn_stats_and_aggr_bf16_round_their_outputs():
    x = rand(32, 100, dtype=BF16)
    body = """
    @nki.jit
    def k(x):
        o1 = nl.ndarray((32, 6), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        o2 = nl.ndarray((32, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        s16 = nisa.bn_stats(t)
        s32 = nisa.bn_stats(t, dtype=nl.float32)
        nl.store(o1, value=s16)
        nl.store(o2, value=nisa.bn_aggr(s32))
        return o1, o2
    """
    o1, o2 = sim(body, OLD, x=x).outputs
    assert o1.dtype == BF16
    np.testing.assert_array_equal(f32(o1), f32(bn_stats_ref(f32(x)).astype(BF16)))
    np.testing.assert_allclose(o2[:, 0], f32(x).mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o2[:, 1], f32(x).var(axis=1), rtol=1e-4)


@pytest.mark.parametrize("body,match", [
    ("s = nisa.bn_stats(nl.load(x))", "more than bn_stats_fmax = 512"),
    ("s = nisa.bn_aggr(nl.load(x[:, 0:5]))", "multiple of 3"),
])
def test_bn_rules(body, match):
    src = f"""
    @nki.jit
    def k(x):
        {body}
        return x
    """
    with pytest.raises(KernelError, match=match):
        sim(src, OLD, x=rand(16, 600))


# ----- tensor_scalar_reduce ------------------------------------------------------------------

@pytest.mark.parametrize("rop,ref", [("nl.add", np.sum), ("nl.maximum", np.max), ("nl.minimum", np.min),
                                     ("nl.multiply", np.prod)])
@pytest.mark.parametrize("shape", [(128, 64), (100, 30), (7, 33)])
def test_tensor_scalar_reduce(rop, ref, shape):
    x = rand(*shape, lo=0.5, hi=1.5)
    c = rand(shape[0], 1, lo=0.5, hi=1.5)
    body = f"""
    @nki.jit
    def k(x, c):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t, ct = nl.load(x), nl.load(c)
        r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        s = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=r, data=t, op0=nl.multiply, operand0=ct, reduce_op={rop}, reduce_res=s)
        nl.store(out, value=r)
        nl.store(red, value=s)
        return out, red
    """
    r, s = sim(body, x=x, c=c).outputs
    np.testing.assert_allclose(r, x * c, rtol=1e-6)
    np.testing.assert_allclose(s[:, 0], ref(x * c, axis=1), rtol=1e-4)


def test_tensor_scalar_reduce_beta1_reverse_mask_bf16():
    x = rand(100, 300, dtype=BF16, lo=0.5, hi=2.0)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray((100, 300), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        red = nl.ndarray((100, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        i = nl.mgrid[0:100, 0:300]
        t = nl.load(x)
        s = nl.zeros((100, 1), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.zeros((100, 300), dtype=nl.bfloat16, buffer=nl.sbuf)
        r[i.p, i.x] = nisa.tensor_scalar_reduce(data=t, op0=nl.subtract, operand0=1.0, reverse0=True,
                                                reduce_op=nl.add, reduce_res=s, mask=(i.x < 200))
        nl.store(out, value=r)
        nl.store(red, value=s)
        return out, red
    """
    r, s = sim(body, OLD, x=x).outputs
    full = np.float32(1.0) - f32(x)
    want = np.where(np.arange(300)[None, :] < 200, full.astype(BF16), BF16(0))
    np.testing.assert_array_equal(f32(r), f32(want))
    np.testing.assert_allclose(s[:, 0], full[:, :200].sum(axis=1), rtol=1e-4, atol=1e-4)  # fp32, pre-rounding


def test_tensor_scalar_reduce_accumulates_through_reduce_cmd_and_negates():
    x = rand(64, 40)
    body = """
    @nki.jit
    def k(x):
        red = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = nl.ndarray((64, 40), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=r, data=t, op0=nl.add, operand0=1.0, reduce_op=nl.maximum,
                                  reduce_res=s[:, 0:1], reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.tensor_scalar_reduce(dst=r, data=t, op0=nl.add, operand0=5.0, reduce_op=nl.maximum,
                                  reduce_res=s[:, 1:2], reduce_cmd=nisa.reduce_cmd.reduce,
                                  reduce_res_negate=True)
        nl.store(red, value=s)
        return red
    """
    s = sim(body, x=x).outputs
    np.testing.assert_allclose(s[:, 0], x.max(axis=1) + 1, rtol=1e-6)
    np.testing.assert_allclose(s[:, 1], -(x.max(axis=1) + 5), rtol=1e-6)


@pytest.mark.parametrize("call,match", [
    ("nisa.tensor_scalar_reduce(data=t, op0=nl.bitwise_and, operand0=1, reduce_op=nl.add, reduce_res=s)",
     "arithmetic operator"),
    ("nisa.tensor_scalar_reduce(data=t, op0=nl.add, operand0=1.0, reduce_op=nl.subtract, reduce_res=s)",
     "reduce_op must be"),
    ("nisa.tensor_scalar_reduce(data=t, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=t)",
     r"reduce_res must have shape \[16, 1\]"),
])
def test_tensor_scalar_reduce_rules(call, match):
    body = f"""
    @nki.jit
    def k(x):
        t = nl.load(x)
        s = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
        {call}
        return x
    """
    with pytest.raises(KernelError, match=match):
        sim(body, OLD, x=rand(16, 8))


# ----- affine_select -----------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(128, 128), (100, 300)])
def test_affine_select_beta1_causal_mask(shape):
    x = rand(*shape)
    body = f"""
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_q, i_k = nl.mgrid[0:{shape[0]}, 0:{shape[1]}]
        r = nisa.affine_select(pred=(i_q >= i_k), on_true_tile=nl.load(x), on_false_value=-9984.0)
        nl.store(out, value=r)
        return out
    """
    got = sim(body, OLD, x=x).outputs
    q, kk = np.indices(shape)
    np.testing.assert_array_equal(got, np.where(q >= kk, x, np.float32(-9984.0)))


def test_affine_select_current_pattern_form_bf16():
    x = rand(64, 4, 8, dtype=BF16)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.affine_select(r, [[-8, 4], [-1, 8]], 3, 1, t, -1.5, cmp_op=nl.greater_equal)
        nisa.dma_copy(dst=out, src=r)
        return out
    """
    got = sim(body, x=x).outputs
    p, a, b = np.meshgrid(np.arange(64), np.arange(4), np.arange(8), indexing="ij")
    want = np.where(3 + p - 8 * a - b >= 0, f32(x), np.float32(-1.5)).astype(BF16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(f32(got), f32(want))


def test_affine_select_rejects_a_combined_predicate():
    body = """
    @nki.jit
    def k(x):
        i_q, i_k = nl.mgrid[0:16, 0:16]
        r = nisa.affine_select((i_q >= i_k) & (i_k > 2), nl.load(x), 0.0)
        return x
    """
    with pytest.raises(KernelError, match="not several combined"):
        sim(body, OLD, x=rand(16, 16))


# ----- trace records, costs, namespace ------------------------------------------------------

def test_new_instructions_trace_records():
    body = """
    @nki.jit
    def k(x):
        t = nl.load(x)
        st = nisa.bn_stats(t)
        mv = nisa.bn_aggr(st)
        s = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
        r = nisa.tensor_scalar_reduce(data=t, op0=nl.multiply, operand0=2.0, reduce_op=nl.add, reduce_res=s)
        i_q, i_k = nl.mgrid[0:64, 0:100]
        a = nisa.affine_select(i_q >= i_k, r, 0.0, dtype=nl.bfloat16)
        out = nl.ndarray((64, 100), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, value=a)
        return out
    """
    trace = sim(body, OLD, x=rand(64, 100)).trace
    by = {ins.opcode: ins for ins in trace}
    expect = {"bn_stats": (Engine.VECTOR, 100), "bn_aggr": (Engine.VECTOR, 6),
              "tensor_scalar_reduce": (Engine.VECTOR, 100), "affine_select": (Engine.GPSIMD, 100)}
    for opc, (eng, free) in expect.items():
        ins = by[opc]
        assert (ins.engine, ins.partitions, ins.free_elems) == (eng, 64, free), opc
        assert ins.extra["contiguous"] and "out_dtype" in ins.extra, opc
        assert opc in COSTS
    assert by["tensor_scalar_reduce"].extra["reduce_op"] == "add"
    assert len(by["tensor_scalar_reduce"].writes) == 2  # dst and reduce_res
    assert by["affine_select"].extra["out_dtype"] == "bfloat16"


def test_isa_namespace():
    ctx = SimContext(TRN2, "<k>", True, 0)
    mods = build_modules(ctx)
    names = {n for n in vars(mods["nki.isa"]) if not n.startswith("__")}
    assert names == {
        "nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_tensor", "tensor_scalar",
        "scalar_tensor_tensor", "tensor_reduce", "tensor_partition_reduce", "tensor_tensor_scan",
        "tensor_scalar_cumulative", "tensor_copy", "reciprocal", "exponential", "iota", "memset",
        "dma_copy", "dma_transpose", "dma_compute", "tensor_scalar_reduce", "bn_stats", "bn_aggr", "tensor_copy_predicated",
        "select_reduce",
        "affine_select", "nc_stream_shuffle", "core_barrier", "max8", "nc_find_index8", "nc_match_replace8", "nc_n_gather", "reduce_cmd", "engine", "dge_mode", "nc_version",
        "get_nc_version", "constants", "register_alloc", "register_move", "register_load",
        "VirtualRegister",
        # the deprecated engine constants and the enums public kernels name
        "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "unknown_engine",
        "oob_mode", "matmul_perf_mode"}
    assert vars(mods["neuronxcc.nki.isa"]).keys() == vars(mods["nki.isa"]).keys()


# ----- the LayerNorm example ----------------------------------------------------------------

@pytest.mark.parametrize("rows,cols", [(200, 1000), (128, 512), (5, 7)])
def test_layernorm_bn_stats_example(rows, cols):
    k = load_kernel(os.path.join(EXAMPLES, "layernorm_bn_stats.py"))
    x = (RNG.normal(size=(rows, cols)) * 3 + 1).astype(np.float32)
    g, b = rand(cols), rand(cols)
    r = simulate(k, {"input_tensor": x, "gamma_vector": g, "beta_vector": b})
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(r.outputs, want, rtol=1e-4, atol=1e-4)
    n_bn = sum(ins.opcode == "bn_stats" for ins in r.trace)
    assert n_bn == -(-rows // 128) * -(-cols // 512)


def test_mod_takes_the_divisors_sign_and_fmod_the_dividends():
    """nl.mod is numpy.mod (the divisor's sign), nl.fmod numpy.fmod (the dividend's) [nl.mod, nl.fmod];
    nisa.tensor_tensor with op=nl.mod means the same."""
    x = np.array([[-7.0, 7.0, -5.5, 5.5]] * 4, np.float32)
    y = np.array([[3.0, -3.0, 2.0, -2.0]] * 4, np.float32)
    body = """
    @nki.jit
    def k(x, y):
        a, b = nl.load(x), nl.load(y)
        m = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=m, data1=a, data2=b, op=nl.mod)
        outs = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm) for _ in range(3)]
        nl.store(outs[0], nl.mod(a, b))
        nl.store(outs[1], nl.fmod(a, b))
        nl.store(outs[2], m)
        return outs[0], outs[1], outs[2]
    """
    mod, fmod, isa_mod = sim(body, x=x, y=y).outputs
    np.testing.assert_array_equal(mod, np.mod(x, y))
    np.testing.assert_array_equal(fmod, np.fmod(x, y))
    np.testing.assert_array_equal(isa_mod, np.mod(x, y))
    assert (np.mod(x, y) != np.fmod(x, y)).any()  # the case tells them apart


def test_activation_idle_reads_the_registers_out_unchanged():
    """reduce_cmd=idle does not modify reduce_regs; with reduce_res it reads them out [isa activation]:
    the sum of the first half, accumulated by the call before, not of the second half."""
    x = rand(128, 64)
    body = """
    @nki.jit
    def k(x):
        t = nl.load(x)
        e = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.copy, data=t[:, 0:32], reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        e2 = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e2, op=nl.copy, data=t[:, 32:64], reduce_op=nl.add, reduce_res=s)
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, s)
        return out
    """
    np.testing.assert_allclose(sim(body, x=x).outputs[:, 0], x[:, :32].sum(axis=1), rtol=1e-5, atol=1e-5)


def one_instruction(call: str, shape, dtype: str = "nl.float32", buffer: str = "nl.sbuf", stored: str = "r") -> str:
    """A kernel that loads x as t, runs `call` into r (`shape`, `dtype`, on `buffer`) and returns
    `stored` (r, or an expression of it) from HBM."""
    return f"""
    @nki.jit
    def k(x):
        t = nl.load(x)
        r = nl.ndarray({shape!r}, dtype={dtype}, buffer={buffer})
        {call}
        out = nl.ndarray({shape!r}, dtype={dtype}, buffer=nl.shared_hbm)
        nl.store(out, {stored})
        return out
    """


def test_nc_transpose_flattens_several_free_axes():
    """"If the data tile has more than one free axis, this API implicitly flattens all free axes into
    one axis and then performs a 2D transpose" [isa nc_transpose]."""
    x = rand(64, 4, 8)
    body = one_instruction("nisa.nc_transpose(dst=r, data=t)", (32, 64), "x.dtype", "nl.psum", "nl.copy(r)")
    np.testing.assert_array_equal(sim(body, x=x).outputs, x.reshape(64, 32).T)


def test_partition_reduce_mean_and_nl_mean_elsewhere():
    """tensor_partition_reduce takes nl.mean [isa]; an instruction that has no mean says so rather
    than summing."""
    x = rand(96, 40)
    body = one_instruction("nisa.tensor_partition_reduce(dst=r, op=nl.mean, data=t)", (1, 40))
    np.testing.assert_allclose(sim(body, x=x).outputs, x.mean(axis=0, keepdims=True), rtol=1e-5, atol=1e-6)
    bad = """
    @nki.jit
    def k(x):
        t = nl.load(x)
        r = nl.ndarray((96, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r, op=nl.mean, data=t, axis=1, keepdims=True)
        return x
    """
    with pytest.raises(KernelError, match="unsupported operator nl.mean"):
        sim(bad, x=x)
