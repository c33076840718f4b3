"""Hand-written matmul: out = x @ w, x [m, k], w [k, n], bf16 in, fp32 PSUM accumulation, bf16 out.

Technique (AWS's matmul tutorial, fully-optimised step, adapted to x in row-major layout):
x arrives [m, k], so each 128-row tile of x is loaded whole (k*2 contiguous bytes per partition)
and turned into lhsT tiles on the Tensor Engine (nc_transpose, 4 per PSUM bank, one Scalar-Engine
copy per bank back to SBUF): no host-side transpose. A row strip of BM rows of x^T stays in SBUF
for its whole k extent; for each column strip of BN columns the w strip [k, BN] is loaded once
(one DMA per 128-deep k tile), and every [128, 512] output tile accumulates all k/128 matmuls in
one PSUM bank before the Vector Engine copies it out; the BN-wide output rows are stored as one
DMA. BM and BN are the largest block sizes dividing m and n within the SBUF budgets below (BN at
most 2048), so at m <= 1024 (k = 4096) w is read from HBM exactly once.
Needs m % 128 == 0, k % 128 == 0, n % 512 == 0.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

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
def matmul_kernel(x, w):
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

    for mb in nl.affine_range(M // BM):
        # lhsT tile (r, kt) of the strip sits at columns [(r*KT + kt)*TP, +TP)
        xT = nl.ndarray((TP, RT * KT * TP), dtype=x.dtype, buffer=nl.sbuf)
        for r in nl.affine_range(RT):
            xr = nl.load(x[mb * BM + r * TP:mb * BM + (r + 1) * TP, :])
            for kg in nl.affine_range(KT // G):
                pt = nl.ndarray((TP, G * TP), dtype=x.dtype, buffer=nl.psum)
                for j in nl.affine_range(G):
                    k0 = (kg * G + j) * TP
                    pt[:, j * TP:(j + 1) * TP] = nisa.nc_transpose(xr[:, k0:k0 + TP])
                col = (r * KT + kg * G) * TP
                xT[:, col:col + G * TP] = nisa.activation(op=nl.copy, data=pt, dtype=x.dtype)

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
                    res[:, c * TN:(c + 1) * TN] = nisa.tensor_copy(acc, dtype=x.dtype)
                row0 = mb * BM + r * TP
                nl.store(out[row0:row0 + TP, nb * BN:(nb + 1) * BN], value=res)
    return out
