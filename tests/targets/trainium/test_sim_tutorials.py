"""Tutorial-style kernels (written for these tests, in the styles of the public NKI tutorials)
run end to end in both API generations and checked against NumPy."""
import os
import textwrap

import ml_dtypes
import numpy as np
import pytest

from axon.targets.trainium.simulator import load_kernel, simulate, simulate_source

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(1)
HERE = os.path.dirname(__file__)
EXAMPLES = os.path.join(HERE, "..", "..", "..", "examples", "nki")
OLD = "from neuronxcc import nki\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\nimport math\n"
NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\nimport math\n"


def run(body, api=OLD, fn="k", **inputs):
    return simulate_source(api + textwrap.dedent(body), fn, inputs).outputs


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


def test_tensor_add_example_beta1_and_current():
    a, b = rand(256, 1024), rand(256, 1024)
    k = load_kernel(os.path.join(EXAMPLES, "tensor_add_beta1.py"))
    np.testing.assert_array_equal(simulate(k, {"a_input": a, "b_input": b}).outputs, a + b)
    a, b = rand(384, 200), rand(384, 200)
    k = load_kernel(os.path.join(EXAMPLES, "tensor_add_nki.py"))
    np.testing.assert_array_equal(simulate(k, {"a": a, "b": b}).outputs, a + b)


def test_transpose_through_tensor_engine():
    x = rand(256, 384)
    body = """
    @nki.jit
    def k(x):
        rows, cols = x.shape
        out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(rows // 128):
            for j in nl.affine_range(cols // 128):
                t = nl.load(x[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128])
                tp = nl.transpose(t)
                nl.store(out[j * 128:(j + 1) * 128, i * 128:(i + 1) * 128], value=nl.copy(tp))
        return out
    """
    np.testing.assert_array_equal(run(body, x=x), x.T)


def test_transpose_by_index_swap_and_load_transpose2d():
    x = rand(128, 64)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
        out2 = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load_transpose2d(x)
        nl.store(out, value=t)
        ip = nl.arange(64)[:, None]
        jf = nl.arange(128)[None, :]
        u = nl.load(x[jf, ip])  # out[p, f] = x[f, p]
        nl.store(out2, value=u)
        return out, out2
    """
    o1, o2 = run(body, x=x)
    np.testing.assert_array_equal(o1, x.T)
    np.testing.assert_array_equal(o2, x.T)


def test_matmul_single_tile_both_matmul_forms():
    lhsT, rhs, lhs = rand(128, 64), rand(128, 512), rand(64, 128)
    body = """
    @nki.jit
    def k(lhsT, rhs, lhs):
        out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        a, b, c = nl.load(lhsT), nl.load(rhs), nl.load(lhs)
        nl.store(out, value=nl.copy(nl.matmul(a, b, transpose_x=True)))
        nl.store(out2, value=nl.copy(nl.matmul(c, b)))
        return out, out2
    """
    o1, o2 = run(body, lhsT=lhsT, rhs=rhs, lhs=lhs)
    np.testing.assert_allclose(o1, lhsT.T @ rhs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(o2, lhs @ rhs, rtol=1e-5, atol=1e-5)


MATMUL_TILED = """
@nki.jit
def k(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TM, TK, TN = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(K // TK):
                a = nl.load(lhsT[kk * TK:(kk + 1) * TK, m * TM:(m + 1) * TM])
                b = nl.load(rhs[kk * TK:(kk + 1) * TK, n * TN:(n + 1) * TN])
                acc += nl.matmul(a, b, transpose_x=True)
            res = nl.copy(acc, dtype=out.dtype)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=res)
    return out
"""

MATMUL_HOISTED_BLOCKED = """
@nki.jit
def k(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TM, TK, TN = 128, 128, 512
    BM = 2  # two stationary tiles share each loaded moving block
    for m in nl.affine_range(M // (TM * BM)):
        lhs_tiles = nl.ndarray((K // TK, BM, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for kk in nl.affine_range(K // TK):
            for bm in nl.affine_range(BM):
                lhs_tiles[kk, bm] = nl.load(lhsT[kk * TK:(kk + 1) * TK, (m * BM + bm) * TM:(m * BM + bm + 1) * TM])
        for n in nl.affine_range(N // TN):
            rhs_tiles = nl.ndarray((K // TK, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for kk in nl.affine_range(K // TK):
                rhs_tiles[kk] = nl.load(rhs[kk * TK:(kk + 1) * TK, n * TN:(n + 1) * TN])
            for bm in nl.affine_range(BM):
                acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                for kk in nl.affine_range(K // TK):
                    acc += nisa.nc_matmul(lhs_tiles[kk, bm], rhs_tiles[kk])
                res = nl.copy(acc, dtype=out.dtype)
                nl.store(out[(m * BM + bm) * TM:(m * BM + bm + 1) * TM, n * TN:(n + 1) * TN], value=res)
    return out
"""


@pytest.mark.parametrize("body", [MATMUL_TILED, MATMUL_HOISTED_BLOCKED], ids=["tiled", "hoisted_blocked"])
def test_matmul_optimisation_steps_bf16(body):
    lhsT, rhs = rand(256, 256, dtype=BF16), rand(256, 1024, dtype=BF16)
    got = run(body, lhsT=lhsT, rhs=rhs)
    want = (lhsT.astype(np.float32).T @ rhs.astype(np.float32)).astype(BF16)
    assert got.dtype == BF16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_matmul_fully_blocked_kernel():
    k = load_kernel(os.path.join(HERE, "sim_kernel_matmul_blocked.py"))
    lhsT, rhs = rand(512, 512, dtype=BF16), rand(512, 2048, dtype=BF16)
    got = simulate(k, {"lhsT": lhsT, "rhs": rhs, "BM": 2, "BN": 2, "BK": 4}).outputs
    want = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    # the kernel accumulates K blocks into a bf16 SBUF tile: bf16-level agreement
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=0.02, atol=0.1)


def test_rmsnorm_example_with_edge_tile():
    k = load_kernel(os.path.join(EXAMPLES, "rmsnorm_beta1.py"))
    a, g = rand(300, 256), rand(256)
    got = simulate(k, {"a_tensor": a, "g_tensor": g}).outputs
    want = a / np.sqrt((a * a).mean(axis=1, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_layernorm_beta1_edge_tile():
    x, gamma, beta = rand(200, 384), rand(384), rand(384)
    body = """
    @nki.jit
    def k(x, gamma, beta):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        rows, cols = x.shape
        ip = nl.arange(128)[:, None]
        iy = nl.arange(cols)[None, :]
        i0 = nl.arange(1)[:, None]
        g = nl.load(gamma.reshape((1, cols))[i0, iy]).broadcast_to((128, cols))
        b = nl.load(beta.reshape((1, cols))[i0, iy]).broadcast_to((128, cols))
        for t in nl.affine_range(math.ceil(rows / 128)):
            live = t * 128 + ip < rows
            xt = nl.load(x[t * 128 + ip, iy], mask=live)
            mean = nl.mean(xt, axis=[1], keepdims=True, mask=live)
            centred = nisa.tensor_scalar(xt, nl.subtract, mean, mask=live)
            var = nl.mean(nl.square(centred, mask=live), axis=1, keepdims=True, mask=live)
            rstd = nl.rsqrt(var + 1e-5, mask=live)
            y = nisa.tensor_scalar(centred, nl.multiply, rstd, mask=live)
            y = nl.add(nl.multiply(y, g, mask=live), b, mask=live)
            nl.store(out[t * 128 + ip, iy], value=y, mask=live)
        return out
    """
    mu = x.mean(axis=1, keepdims=True)
    want = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(run(body, x=x, gamma=gamma, beta=beta), want, rtol=1e-4, atol=1e-5)


SOFTMAX_OLD = """
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    ip = nl.arange(128)[:, None]
    iy = nl.arange(cols)[None, :]
    for t in nl.affine_range(math.ceil(rows / 128)):
        live = t * 128 + ip < rows
        xt = nl.load(x[t * 128 + ip, iy], mask=live)
        neg_max = nl.negative(nl.max(xt, axis=1, keepdims=True, mask=live), mask=live)
        total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        e = nisa.activation_reduce(op=nl.exp, data=xt, bias=neg_max, reduce_op=nl.add,
                                   reduce_res=total, mask=live)
        y = nl.multiply(e, nl.reciprocal(total, mask=live), mask=live)
        nl.store(out[t * 128 + ip, iy], value=y, mask=live)
    return out
"""

SOFTMAX_NEW = """
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    for t in nl.affine_range(rows // 128):
        xt = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[t * 128:(t + 1) * 128, :])
        mx = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=mx, op=nl.maximum, data=xt, axis=1, negate=True, keepdims=True)
        e = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=xt, bias=mx, reduce_op=nl.add, reduce_res=s,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=s)
        y = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=y)
    return out
"""


@pytest.mark.parametrize("api,body,rows", [(OLD, SOFTMAX_OLD, 300), (NEW, SOFTMAX_NEW, 256)], ids=["beta1", "current"])
def test_softmax(api, body, rows):
    x = rand(rows, 200) * 5
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(run(body, api, x=x), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_rope_beta1():
    x, cos, sin = rand(128, 256), rand(128, 128), rand(128, 128)
    body = """
    @nki.jit
    def k(x, cos, sin):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        half = x.shape[1] // 2
        x1 = nl.load(x[:, 0:half])
        x2 = nl.load(x[:, half:2 * half])
        c, s = nl.load(cos), nl.load(sin)
        res = nl.ndarray((128, 2 * half), dtype=x.dtype, buffer=nl.sbuf)
        res[:, 0:half] = nl.subtract(nl.multiply(x1, c), nl.multiply(x2, s))
        res[:, half:2 * half] = nl.add(nl.multiply(x2, c), nl.multiply(x1, s))
        nl.store(out, value=res)
        return out
    """
    x1, x2 = x[:, :128], x[:, 128:]
    want = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=1)
    np.testing.assert_allclose(run(body, x=x, cos=cos, sin=sin), want, rtol=1e-5, atol=1e-6)


def test_cumsum_scan_with_carry_across_tiles():
    x = rand(100, 1000)
    body = """
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        rows, cols = x.shape
        F = 250
        ones = nl.ones((rows, F), dtype=nl.float32, buffer=nl.sbuf)
        carry = nl.zeros((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.sequential_range(cols // F):
            xt = nl.load(x[:, j * F:(j + 1) * F])
            c = nisa.tensor_tensor_scan(ones, xt, initial=carry, op0=nl.multiply, op1=nl.add)
            carry[...] = nl.copy(c[:, F - 1:F])
            nl.store(out[:, j * F:(j + 1) * F], value=c)
        return out
    """
    np.testing.assert_allclose(run(body, x=x), np.cumsum(x, axis=1), rtol=1e-4, atol=1e-4)
