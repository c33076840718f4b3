"""Hand-written rmsnorm_matmul: out = (x * rsqrt(mean(x^2, last axis) + 1e-6)) @ w, x [m, k], w [k, n].

Technique: matmul.py with the normalisation fused in. The row scale commutes with the product,
rms(x) @ w = diag(rstd) (x @ w), so x is multiplied as loaded and each row's rstd is applied for
free as the Scalar Engine's activation scale when a finished [128, 512] PSUM tile is copied out
(fp32 accumulation, one rounding to bf16). The sum of squares is one Scalar-Engine
activation_reduce over each 128-row tile of x while it is in SBUF for its transposes: the norm
adds no HBM traffic and ~k Scalar cycles per 128 rows. Matmul part as in matmul.py: x row tiles
loaded whole and transposed on the Tensor Engine (4 per PSUM bank, copied back by the Vector
Engine here, as the Scalar Engine does the copy-outs), an x^T row strip resident for its whole k
extent, one w column strip [k, BN] loaded per strip, k accumulated in one PSUM bank per output
tile, BN-wide output rows stored as one DMA.
Needs m % 128 == 0, k % 128 == 0, n % 512 == 0.
"""
import math

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

EPS = 1e-6
X_STRIP_BYTES = 64 * 1024  # per partition: the x^T strip kept on chip
SBUF_BYTES = 160 * 1024  # per partition, the part of SBUF the strips may use (trn1 has ~176 KiB)
TRANSPOSES_PER_BANK = 4  # 128x128 bf16 transposes gathered in one PSUM tile per copy-out


def _block(total, unit, limit):
    """The largest multiple of `unit` that divides `total` and is at most `limit` (>= unit)."""
    best, size = unit, unit
    while size <= min(total, limit):
        if total % size == 0:
            best = size
        size += unit
    return best


@nki.jit
def rmsnorm_matmul_kernel(x, w):
    M, K = x.shape
    K2, N = w.shape
    TP = nl.tile_size.pmax  # rows per tile and contraction per matmul
    TN = nl.tile_size.gemm_moving_fmax  # output columns per PSUM bank
    assert K == K2, "x and w must share the contraction dimension"
    assert M % TP == 0 and K % TP == 0 and N % TN == 0, "needs m, k % 128 == 0 and n % 512 == 0"
    KT = K // TP
    BM = _block(M, TP, X_STRIP_BYTES // (KT * 2))
    # w strips get what the x strip leaves, halved so the next strip can load during this one,
    # and at most 2048 wide (4 KiB runs already saturate DMA; narrower strips pipeline better)
    BN = _block(N, TN, min(4 * TN, (SBUF_BYTES - KT * BM * 2) // 2 // (KT * 2)))
    RT, CT = BM // TP, BN // TN
    G = TRANSPOSES_PER_BANK if KT % TRANSPOSES_PER_BANK == 0 else 1
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    eps = nl.full((TP, 1), EPS, dtype=nl.float32, buffer=nl.sbuf)

    for mb in nl.affine_range(M // BM):
        # lhsT tile (r, kt) of the strip sits at columns [(r*KT + kt)*TP, +TP)
        xT = nl.ndarray((TP, RT * KT * TP), dtype=x.dtype, buffer=nl.sbuf)
        ssq = nl.ndarray((TP, RT), dtype=nl.float32, buffer=nl.sbuf)  # column r: rows of tile r
        for r in nl.affine_range(RT):
            xr = nl.load(x[mb * BM + r * TP:mb * BM + (r + 1) * TP, :])
            for kg in nl.affine_range(KT // G):
                pt = nl.ndarray((TP, G * TP), dtype=x.dtype, buffer=nl.psum)
                for j in nl.affine_range(G):
                    k0 = (kg * G + j) * TP
                    pt[:, j * TP:(j + 1) * TP] = nisa.nc_transpose(xr[:, k0:k0 + TP])
                col = (r * KT + kg * G) * TP
                xT[:, col:col + G * TP] = nisa.tensor_copy(pt, dtype=x.dtype)
            # mean(x^2) of the tile's rows: sum((x / sqrt(k))^2); the squares themselves are dropped
            nisa.activation_reduce(op=nl.square, data=xr, reduce_op=nl.add, reduce_res=ssq[:, r:r + 1],
                                   scale=1.0 / math.sqrt(K), dtype=nl.bfloat16)
        rstd = nisa.activation(op=nl.rsqrt, data=ssq, bias=eps)

        for nb in nl.affine_range(N // BN):
            wb = nl.ndarray((TP, KT * BN), dtype=w.dtype, buffer=nl.sbuf)
            for kt in nl.affine_range(KT):
                wb[:, kt * BN:(kt + 1) * BN] = nl.load(w[kt * TP:(kt + 1) * TP, nb * BN:(nb + 1) * BN])
            for r in nl.affine_range(RT):
                res = nl.ndarray((TP, BN), dtype=x.dtype, buffer=nl.sbuf)
                for c in nl.affine_range(CT):
                    acc = nl.zeros((TP, TN), dtype=nl.float32, buffer=nl.psum)
                    for kt in nl.affine_range(KT):
                        a0, b0 = (r * KT + kt) * TP, kt * BN + c * TN
                        acc += nisa.nc_matmul(xT[:, a0:a0 + TP], wb[:, b0:b0 + TN])
                    res[:, c * TN:(c + 1) * TN] = nisa.activation(op=nl.copy, data=acc, scale=rstd[:, r:r + 1],
                                                                  dtype=x.dtype)
                row0 = mb * BM + r * TP
                nl.store(out[row0:row0 + TP, nb * BN:(nb + 1) * BN], value=res)
    return out
