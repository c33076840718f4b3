"""Every simulator instruction against a NumPy statement of its documented semantics, in the
current API (dst-first) and the beta-1 API (returns a tile), with edge tiles (partition and
free sizes that are not multiples of 128), masks, and bf16 rounding."""
import textwrap

import ml_dtypes
import numpy as np
import pytest

from axon.errors import KernelError
from axon.targets.trainium.simulator import simulate_source

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(0)

NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
OLD = "from neuronxcc import nki\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"


def run(body: str, api=NEW, **inputs):
    src = api + textwrap.dedent(body)
    return simulate_source(src, "k", inputs).outputs


def rand(*shape, dtype=np.float32, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def f32(a):
    return np.asarray(a).astype(np.float32)


# A one-input, one-output kernel in each API: `CALL` computes r from t.
def unary_kernel(call_new: str, call_old: str, out_shape="x.shape", out_dtype="x.dtype"):
    new = f"""
    @nki.jit
    def k(x):
        out = nl.ndarray({out_shape}, dtype={out_dtype}, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        r = nl.ndarray({out_shape}, dtype={out_dtype}, buffer=nl.sbuf)
        {call_new}
        nisa.dma_copy(dst=out, src=r)
        return out
    """
    old = f"""
    @nki.jit
    def k(x):
        out = nl.ndarray({out_shape}, dtype={out_dtype}, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = {call_old}
        nl.store(out, value=r)
        return out
    """
    return new, old


SHAPES = [(128, 512), (100, 300), (7, 33)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("api", ["new", "old"])
def test_activation_scale_bias(shape, api):
    x = rand(*shape)
    s = rand(shape[0], 1)
    body = f"""
    @nki.jit
    def k(x, s):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        st = nl.load(s)
        {'r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)' if api == 'new' else ''}
        {'nisa.activation(dst=r, op=nl.exp, data=t, scale=st, bias=st)' if api == 'new'
         else 'r = nisa.activation(op=nl.exp, data=t, scale=st, bias=st)'}
        nl.store(out, value=r)
        return out
    """
    got = run(body, NEW if api == "new" else OLD, x=x, s=s)
    np.testing.assert_allclose(got, np.exp(x * s + s), rtol=1e-6)


def test_activation_bf16_rounds_result():
    x = rand(64, 200).astype(BF16)
    new, _ = unary_kernel("nisa.activation(dst=r, op=nl.tanh, data=t, scale=0.5)", "")
    got = run(new, x=x)
    want = np.tanh(f32(x) * np.float32(0.5)).astype(BF16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(f32(got), f32(want))


@pytest.mark.parametrize("fn,ref", [("nl.sigmoid", lambda x: 1 / (1 + np.exp(-x))),
                                    ("nl.relu", lambda x: np.maximum(x, 0)),
                                    ("nl.square", np.square),
                                    ("nl.copy", lambda x: x),
                                    ("nl.silu", lambda x: x / (1 + np.exp(-x)))])
def test_activation_functions(fn, ref):
    x = rand(100, 300)
    _, old = unary_kernel("", f"nisa.activation(op={fn}, data=t)")
    np.testing.assert_allclose(run(old, OLD, x=x), ref(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn,ref", [("nl.silu", lambda x: x / (1 + np.exp(-x))),
                                    ("nl.sigmoid", lambda x: 1 / (1 + np.exp(-x))),
                                    ("nl.softplus", lambda x: np.logaddexp(0, x)),
                                    ("nl.gelu_apprx_sigmoid", lambda x: x / (1 + np.exp(-1.702 * x)))])
def test_an_activation_is_one_rounding_of_its_value_where_its_float32_steps_would_overflow(fn, ref):
    # silu(-90) = -7.4e-38 is a normal float32, but exp(90) in 1 / (1 + exp(-x)) is not: the
    # instruction's value is the function's, rounded once (what the numerical check bounds)
    x = np.array([[-100.0, -90.0, -89.0, -20.0, 0.0, 20.0, 89.0, 100.0]], np.float32)
    new, _ = unary_kernel(f"nisa.activation(dst=r, op={fn}, data=t)", "")
    want = ref(x.astype(np.float64))
    np.testing.assert_allclose(run(new, x=x), want, rtol=2 ** -23, atol=float(np.finfo(np.float32).smallest_subnormal))


@pytest.mark.parametrize("api", ["new", "old"])
def test_activation_reduce(api):
    x = rand(100, 300)
    body = f"""
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        s = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        {'r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)' if api == 'new' else ''}
        {'nisa.activation_reduce(dst=r, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=s, scale=0.5)'
         if api == 'new' else
         'r = nisa.activation_reduce(op=nl.exp, data=t, reduce_op=nl.add, reduce_res=s, scale=0.5)'}
        nl.store(out, value=r)
        nl.store(red, value=s)
        return out, red
    """
    r, s = run(body, NEW if api == "new" else OLD, x=x)
    np.testing.assert_allclose(r, np.exp(0.5 * x), rtol=1e-6)
    np.testing.assert_allclose(s[:, 0], np.exp(0.5 * x).sum(axis=1), rtol=1e-5)


def test_activation_mask_leaves_other_elements():
    x = rand(128, 64)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None]
        jf = nl.arange(64)[None, :]
        t = nl.load(x)
        r = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        r[ip, jf] = nisa.activation(op=nl.exp, data=t, mask=(ip < 100) & (jf >= 10))
        nl.store(out, value=r)
        return out
    """
    got = run(body, OLD, x=x)
    m = (np.arange(128)[:, None] < 100) & (np.arange(64)[None, :] >= 10)
    np.testing.assert_allclose(got, np.where(m, np.exp(x), 0.0), rtol=1e-6)


@pytest.mark.parametrize("op,ref", [("nl.add", np.add), ("nl.subtract", np.subtract),
                                    ("nl.multiply", np.multiply), ("nl.maximum", np.maximum),
                                    ("nl.divide", np.divide), ("np.minimum", np.minimum)])
@pytest.mark.parametrize("shape", SHAPES)
def test_tensor_tensor(op, ref, shape):
    a, b = rand(*shape), rand(*shape, lo=0.5, hi=2.0)
    body = f"""
    import numpy as np
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a)
        nisa.dma_copy(dst=tb, src=b)
        r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=r, data1=ta, data2=tb, op={op})
        nisa.dma_copy(dst=out, src=r)
        return out
    """
    np.testing.assert_allclose(run(body, a=a, b=b), ref(a, b), rtol=1e-6)


def test_tensor_tensor_bf16_output_and_mask():
    a, b = rand(100, 300, dtype=BF16), rand(100, 300, dtype=BF16)
    body = """
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.mgrid[0:100, 0:300]
        ta, tb = nl.load(a), nl.load(b)
        r = nl.zeros((100, 300), dtype=a.dtype, buffer=nl.sbuf)
        r[i.p, i.x] = nisa.tensor_tensor(ta, tb, op=nl.multiply, mask=(i.x < 150))
        nl.store(out, value=r)
        return out
    """
    got = run(body, OLD, a=a, b=b)
    want = np.where(np.arange(300)[None, :] < 150, (f32(a) * f32(b)).astype(BF16), BF16(0))
    np.testing.assert_array_equal(f32(got), f32(want))


@pytest.mark.parametrize("shape", SHAPES)
def test_tensor_scalar_two_ops_and_reverse(shape):
    x = rand(*shape)
    c = rand(shape[0], 1, lo=0.5, hi=1.5)
    body = """
    @nki.jit
    def k(x, c):
        out1 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t, ct = nl.load(x), nl.load(c)
        r1 = nisa.tensor_scalar(t, nl.subtract, ct, op1=nl.multiply, operand1=3.0)
        r2 = nisa.tensor_scalar(t, nl.subtract, 1.0, reverse0=True, op1=nl.divide, operand1=ct, reverse1=True)
        nl.store(out1, value=r1)
        nl.store(out2, value=r2)
        return out1, out2
    """
    r1, r2 = run(body, OLD, x=x, c=c)
    np.testing.assert_allclose(r1, (x - c) * 3.0, rtol=1e-6)
    np.testing.assert_allclose(r2, c / (1.0 - x), rtol=1e-5)


def test_scalar_tensor_tensor():
    x, y = rand(100, 300), rand(100, 300)
    c = rand(100, 1)
    body = """
    @nki.jit
    def k(x, y, c):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tx, ty, tc = nl.load(x), nl.load(y), nl.load(c)
        r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=r, data=tx, op0=nl.multiply, operand0=tc, op1=nl.add, operand1=ty)
        nl.store(out, value=r)
        return out
    """
    np.testing.assert_allclose(run(body, x=x, y=y, c=c), x * c + y, rtol=1e-6)


@pytest.mark.parametrize("op,ref", [("nl.add", np.sum), ("nl.max", np.max), ("nl.min", np.min)])
def test_tensor_reduce_keepdims_negate(op, ref):
    x = rand(100, 300)
    body = f"""
    @nki.jit
    def k(x):
        out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = nisa.tensor_reduce(op={op}, data=t, axis=[1], negate=True, keepdims=True)
        nl.store(out, value=r)
        return out
    """
    np.testing.assert_allclose(run(body, OLD, x=x)[:, 0], -ref(x, axis=1), rtol=1e-5)


def test_tensor_reduce_3d_last_axes():
    x = rand(64, 6, 40)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray((64, 6), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        r = nl.ndarray((64, 6), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r, op=nl.add, data=t, axis=2)
        nisa.dma_copy(dst=out, src=r)
        return out
    """
    np.testing.assert_allclose(run(body, x=x), x.sum(axis=2), rtol=1e-5)


@pytest.mark.parametrize("op,ref", [("nl.add", np.sum), ("nl.maximum", np.max)])
def test_tensor_partition_reduce(op, ref):
    x = rand(100, 30)
    body = f"""
    @nki.jit
    def k(x):
        out = nl.ndarray((1, 30), dtype=x.dtype, buffer=nl.shared_hbm)
        r = nisa.tensor_partition_reduce({op}, nl.load(x))
        nl.store(out, value=r)
        return out
    """
    np.testing.assert_allclose(run(body, OLD, x=x)[0], ref(x, axis=0), rtol=1e-5)


def test_tensor_tensor_scan_documented_loop():
    d0, d1 = rand(100, 50, lo=0.5, hi=1.0), rand(100, 50)
    init = rand(100, 1)
    body = """
    @nki.jit
    def k(d0, d1, init):
        out = nl.ndarray(d0.shape, dtype=d0.dtype, buffer=nl.shared_hbm)
        a, b, i0 = nl.load(d0), nl.load(d1), nl.load(init)
        r = nl.ndarray(d0.shape, dtype=d0.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=r, data0=a, data1=b, initial=i0, op0=nl.multiply, op1=nl.add)
        nl.store(out, value=r)
        return out
    """
    want = np.empty_like(d0)
    prev = init[:, 0]
    for i in range(d0.shape[1]):  # result[:, i] = op1(op0(data0[:, i], result[:, i-1]), data1[:, i])
        prev = d0[:, i] * prev + d1[:, i]
        want[:, i] = prev
    np.testing.assert_allclose(run(body, d0=d0, d1=d1, init=init), want, rtol=1e-5)


def test_tensor_scalar_cumulative_cumsum_and_carry():
    x = rand(100, 40)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray((100, 80), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = nl.ndarray((100, 80), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=r[:, 0:40], src=t, op0=nl.multiply, op1=nl.add, imm0=2.0)
        nisa.tensor_scalar_cumulative(dst=r[:, 40:80], src=t, op0=nl.multiply, op1=nl.add, imm0=1.0,
                                      reduce_cmd=nisa.reduce_cmd.reduce)
        nl.store(out, value=r)
        return out
    """
    got = run(body, x=x)
    first = np.cumsum(2 * x, axis=1)
    np.testing.assert_allclose(got[:, :40], first, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 40:], first[:, -1:] + np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)


def test_tensor_copy_casts_to_bf16():
    x = rand(100, 300)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=t)
        nl.store(out, value=r)
        return out
    """
    got = run(body, x=x)
    np.testing.assert_array_equal(f32(got), f32(x.astype(BF16)))


def test_reciprocal():
    x = rand(100, 300, lo=0.5, hi=3.0)
    _, old = unary_kernel("", "nisa.reciprocal(t)")
    np.testing.assert_allclose(run(old, OLD, x=x), 1.0 / x, rtol=1e-6)


def test_iota_beta1_expression_and_current_pattern():
    body_old = """
    @nki.jit
    def k():
        out = nl.ndarray((100, 300), dtype=nl.int32, buffer=nl.shared_hbm)
        i = nl.mgrid[0:100, 0:300]
        r = nisa.iota(i.p * 1000 + i.x * 2, dtype=nl.int32)
        nl.store(out, value=r)
        return out
    """
    got = run(body_old, OLD)
    np.testing.assert_array_equal(got, np.arange(100)[:, None] * 1000 + np.arange(300)[None, :] * 2)
    body_new = """
    @nki.jit
    def k():
        out = nl.ndarray((64, 4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        r = nl.ndarray((64, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(dst=r, pattern=[[100, 4], [1, 8]], offset=5, channel_multiplier=-1)
        nisa.dma_copy(dst=out, src=r)
        return out
    """
    got = run(body_new)
    p, a, b = np.meshgrid(np.arange(64), np.arange(4), np.arange(8), indexing="ij")
    np.testing.assert_array_equal(got, 5 - p + 100 * a + b)


def test_memset_both_apis():
    body = """
    @nki.jit
    def k():
        out = nl.ndarray((100, 30), dtype=nl.float32, buffer=nl.shared_hbm)
        r = nisa.memset((100, 30), 2.5, nl.float32)
        nl.store(out, value=r)
        return out
    """
    np.testing.assert_array_equal(run(body, OLD), np.full((100, 30), 2.5, np.float32))
    body = """
    @nki.jit
    def k():
        out = nl.ndarray((100, 30), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        r = nl.ndarray((100, 30), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(dst=r, value=1.1)
        nisa.dma_copy(dst=out, src=r)
        return out
    """
    np.testing.assert_array_equal(f32(run(body)), np.full((100, 30), BF16(1.1), np.float32))


@pytest.mark.parametrize("K,M,N", [(128, 128, 512), (100, 70, 300), (128, 3, 1)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_nc_matmul_stationary_T_moving(K, M, N, dtype):
    st, mv = rand(K, M, dtype=dtype), rand(K, N, dtype=dtype)
    body = """
    @nki.jit
    def k(st, mv):
        out = nl.ndarray((st.shape[1], mv.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        a, b = nl.load(st), nl.load(mv)
        p = nisa.nc_matmul(a, b)
        r = nl.copy(p)
        nl.store(out, value=r)
        return out
    """
    want = f32(st).T @ f32(mv)  # fp32 accumulation of exact bf16 products
    np.testing.assert_allclose(run(body, OLD, st=st, mv=mv), want, rtol=1e-5, atol=1e-4)


def test_nc_matmul_accumulates_in_psum_both_apis():
    a, b = rand(256, 96), rand(256, 200)
    old = """
    @nki.jit
    def k(a, b):
        out = nl.ndarray((96, 200), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((96, 200), dtype=nl.float32, buffer=nl.psum)
        for kk in nl.affine_range(2):
            acc += nisa.nc_matmul(nl.load(a[kk * 128:(kk + 1) * 128, :]), nl.load(b[kk * 128:(kk + 1) * 128, :]))
        nl.store(out, value=nl.copy(acc))
        return out
    """
    new = """
    @nki.jit
    def k(a, b):
        out = nl.ndarray((96, 200), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((96, 200), dtype=nl.float32, buffer=nl.psum)
        for kk in nl.affine_range(2):
            ta = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
            tb = nl.ndarray((128, 200), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=ta, src=a[kk * 128:(kk + 1) * 128, :])
            nisa.dma_copy(dst=tb, src=b[kk * 128:(kk + 1) * 128, :])
            nisa.nc_matmul(dst=acc, stationary=ta, moving=tb)
        r = nl.ndarray((96, 200), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=acc)
        nisa.dma_copy(dst=out, src=r)
        return out
    """
    for body, api in ((old, OLD), (new, NEW)):
        np.testing.assert_allclose(run(body, api, a=a, b=b), a.T @ b, rtol=1e-5, atol=1e-4)


def test_nc_matmul_in_tiling_mode_computes_the_same_product_and_records_its_pe_tile():
    """The stationary's two halves on the two column halves of the PE array (column tiling)."""
    from pathlib import Path

    from axon.targets.trainium.simulator import load_kernel, simulate

    a, b = rand(64, 128), rand(64, 512)  # [K, M], [K, N]
    kernel = load_kernel(str(Path(__file__).with_name("sim_kernel_pe_tiles.py")), "two_chains")
    res = simulate(kernel, {"a": a, "b": b, "left": ((0, 0), (64, 64)), "right": ((0, 64), (64, 64))}, target="trn2")
    np.testing.assert_allclose(res.outputs, a.T @ b, rtol=1e-5, atol=1e-4)
    assert [i.extra.get("pe_tile") for i in res.trace if i.opcode == "nc_matmul"] == [(0, 0, 64, 64), (0, 64, 64, 64)]


def test_nc_transpose_tensor_and_vector_engine():
    x = rand(100, 120)
    y = rand(20, 30)
    body = """
    @nki.jit
    def k(x, y):
        o1 = nl.ndarray((120, 100), dtype=x.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((30, 20), dtype=x.dtype, buffer=nl.shared_hbm)
        p = nisa.nc_transpose(nl.load(x))
        nl.store(o1, value=nl.copy(p))
        v = nisa.nc_transpose(nl.load(y), engine=nisa.engine.vector)
        nl.store(o2, value=v)
        return o1, o2
    """
    o1, o2 = run(body, OLD, x=x, y=y)
    np.testing.assert_array_equal(o1, x.T)
    np.testing.assert_array_equal(o2, y.T)


def test_dma_copy_masked_edge_and_dma_transpose():
    x = rand(300, 70)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray((300, 70), dtype=x.dtype, buffer=nl.shared_hbm)
        outT = nl.ndarray((70, 100), dtype=x.dtype, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None]
        jf = nl.arange(70)[None, :]
        for t in nl.affine_range(3):
            tile = nl.ndarray((128, 70), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile[ip, jf], src=x[t * 128 + ip, jf], mask=(t * 128 + ip < 300))
            nisa.dma_copy(dst=out[t * 128 + ip, jf], src=tile[ip, jf], mask=(t * 128 + ip < 300))
        tt = nl.ndarray((70, 100), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=tt, src=x[0:100, :])
        nisa.dma_copy(dst=outT, src=tt)
        return out, outT
    """
    out, outT = run(body, x=x)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(outT, x[:100].T)


def test_exponential_needs_neuroncore_v4():
    from dataclasses import replace

    from axon.targets.trainium.hardware import TRN2

    x = rand(64, 100)
    body = NEW + textwrap.dedent("""
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        s = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        m = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=m, op=nl.maximum, data=t, axis=1, keepdims=True)
        r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        rs = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=r, src=t, max_value=m, reduce_res=rs, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nl.store(out, value=r)
        nl.store(s, value=rs)
        return out, s
    """)
    with pytest.raises(KernelError, match=r"<kernel>:\d+: nisa.exponential needs NeuronCore-v4"):
        simulate_source(body, "k", {"x": x}, target="trn2")
    v4 = replace(TRN2, name="trn3", core="NeuronCore-v4")
    r, s = simulate_source(body, "k", {"x": x}, target=v4).outputs
    want = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(r, want, rtol=1e-6)
    np.testing.assert_allclose(s[:, 0], want.sum(axis=1), rtol=1e-5)


PREDICATED = """
@nki.jit
def k(c, a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ct = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.sbuf)
    at = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    r = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ct, src=c)
    nisa.dma_copy(dst=at, src=a)
    nisa.dma_copy(dst=r, src=b)
    p = nl.ndarray(c.shape, dtype=PRED, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=p, data=ct, op0=nl.not_equal, operand0=0.0)
    nisa.tensor_copy_predicated(dst=r, src=SRC, predicate=p, reverse_pred=REVERSE)
    nisa.dma_copy(dst=out, src=r)
    return out
"""


@pytest.mark.parametrize("src, reverse", [("at", False), ("at", True), ("2.5", False)])
def test_tensor_copy_predicated_keeps_dst_where_the_predicate_is_not_set(src, reverse):
    c = rand(100, 48) * (rand(100, 48) > 0)  # zero on about half the elements
    a, b = rand(100, 48), rand(100, 48)
    body = PREDICATED.replace("PRED", "nl.uint8").replace("SRC", src).replace("REVERSE", str(reverse))
    out = run(body, c=c, a=a, b=b)
    taken = (c != 0) != reverse
    np.testing.assert_array_equal(out, np.where(taken, a if src == "at" else np.float32(2.5), b))


@pytest.mark.parametrize("pred, a_dtype, words", [
    ("nl.float32", np.float32, "predicate must be uint8, uint16, uint32, got float32"),
    ("nl.uint8", BF16, "src (bfloat16) and dst (float32) must share the same data type"),
])
def test_tensor_copy_predicated_checks_its_operands_as_the_isa_states(pred, a_dtype, words):
    body = PREDICATED.replace("PRED", pred).replace("SRC", "at").replace("REVERSE", "False")
    body = body.replace("out = nl.ndarray(a.shape, dtype=a.dtype", "out = nl.ndarray(a.shape, dtype=b.dtype")
    with pytest.raises(KernelError, match=words.replace("(", r"\(").replace(")", r"\)")):
        run(body, c=rand(4, 8), a=rand(4, 8).astype(a_dtype), b=rand(4, 8))


def test_integers_keep_every_bit_through_bitvec_operators_and_moves():
    """float32 holds integers exactly only up to 2^24: bitvec operators read bit patterns and a
    copy to the same dtype is bit-accurate [isa tensor_copy], so neither may pass through it."""
    body = """
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        moved = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=t, op0=nl.bitwise_and, operand0=0x7FFFFFFF, op1=nl.bitwise_xor, operand1=5)
        nisa.dma_copy(dst=out, src=r)
        c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=t, engine=nisa.vector_engine)
        s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=s, src=c, shuffle_mask=list(range(32)))
        nisa.dma_copy(dst=moved, src=s)
        return out, moved
    """
    a = RNG.integers(-2**31, 2**31 - 1, size=(32, 16), dtype=np.int64).astype(np.int32)
    out, moved = run(body, a=a)
    np.testing.assert_array_equal(out, (a & 0x7FFFFFFF) ^ 5)
    np.testing.assert_array_equal(moved, a)


@pytest.mark.parametrize("api", [NEW, OLD])
def test_select_reduce_selects_and_takes_the_row_maximum(api):
    new = """
    @nki.jit
    def k(c, a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        peak = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        ct = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.sbuf)
        at = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ct, src=c)
        nisa.dma_copy(dst=at, src=a)
        p = nl.ndarray(c.shape, dtype=nl.uint8, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=p, data=ct, op0=nl.not_equal, operand0=0.0)
        r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=r, predicate=p, on_true=at, on_false=-30000.0, reduce_res=m, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.dma_copy(dst=out, src=r)
        nisa.dma_copy(dst=peak, src=m)
        return out, peak
    """
    old = """
    @nki.jit
    def k(c, a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        peak = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        ct = nl.load(c)
        p = nl.not_equal(ct, 0.0, dtype=nl.uint8)
        m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.select_reduce(dst=r, predicate=p, on_true=nl.load(a), on_false=-30000.0, reduce_res=m)
        nl.store(out, r)
        nl.store(peak, m)
        return out, peak
    """
    c = rand(100, 48) * (rand(100, 48) > 0)
    a = rand(100, 48)
    out, peak = run(new if api is NEW else old, api=api, c=c, a=a)
    want = np.where(c != 0, a, np.float32(-30000.0))
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(peak.reshape(-1), want.max(axis=1))
