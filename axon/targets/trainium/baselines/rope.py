"""Hand-written RoPE (even/odd pairs): x [m, 2h], cos, sin [m, h] ->
(even * cos - odd * sin, odd * cos + even * sin) with even = x[:, 0::2], odd = x[:, 1::2].

Technique: RoPE is element-wise over the m*h (even, odd) pairs, so when 128 divides m*h all five
tensors are viewed (free HBM reshapes, no data movement) as 128 partitions of m*h/128 consecutive
pairs: every DMA is wide and contiguous whatever h is (h = 64 would otherwise give 128-byte rows).
Otherwise rows go in tiles of 128 partitions. The free axis goes in chunks of up to 2048 pairs
(4-8 KiB per partition per DMA; chunks pipeline when there are several). The even and odd lanes
are read in place as stride-2 views of the loaded x tile (a 4-byte stride, under the 16-byte limit
beyond which access bandwidth halves), so there is no de-interleaving pass. The Vector Engine
computes the first output (two multiplies, one subtract) and the GpSimd Engine the second (two
multiplies, one add), in parallel. The products are kept in fp32: rounding them to bf16 before
the subtraction would cost up to a bf16 ulp of the products, not of the (possibly much smaller)
difference.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

CHUNK = 2048  # (even, odd) pairs per partition per chunk


def _chunk(x, cos, sin, out_e, out_o, r0, P, c0, C):
    """Rows [r0, r0 + P) and pairs [c0, c0 + C) of the [rows, 2F] / [rows, F] views."""
    xt = nl.load(x[r0:r0 + P, 2 * c0:2 * (c0 + C)])
    ct = nl.load(cos[r0:r0 + P, c0:c0 + C])
    st = nl.load(sin[r0:r0 + P, c0:c0 + C])
    even, odd = xt[:, 0:2 * C:2], xt[:, 1:2 * C:2]
    v, g = nisa.engine.vector, nisa.engine.gpsimd
    a = nisa.tensor_tensor(even, ct, op=nl.multiply, engine=v, dtype=nl.float32)
    b = nisa.tensor_tensor(odd, st, op=nl.multiply, engine=v, dtype=nl.float32)
    ye = nisa.tensor_tensor(a, b, op=nl.subtract, engine=v, dtype=x.dtype)
    c = nisa.tensor_tensor(odd, ct, op=nl.multiply, engine=g, dtype=nl.float32)
    d = nisa.tensor_tensor(even, st, op=nl.multiply, engine=g, dtype=nl.float32)
    yo = nisa.tensor_tensor(c, d, op=nl.add, engine=g, dtype=x.dtype)
    nl.store(out_e[r0:r0 + P, c0:c0 + C], value=ye)
    nl.store(out_o[r0:r0 + P, c0:c0 + C], value=yo)


def _rotate(x, cos, sin, out_e, out_o, r0, P):
    F = cos.shape[1]
    for j in nl.affine_range(F // CHUNK):
        _chunk(x, cos, sin, out_e, out_o, r0, P, j * CHUNK, CHUNK)
    if F % CHUNK:
        _chunk(x, cos, sin, out_e, out_o, r0, P, F - F % CHUNK, F % CHUNK)


@nki.jit
def rope_kernel(x, cos, sin):
    m, h = cos.shape
    P = nl.tile_size.pmax
    out_e = nl.ndarray((m, h), dtype=x.dtype, buffer=nl.shared_hbm)
    out_o = nl.ndarray((m, h), dtype=x.dtype, buffer=nl.shared_hbm)
    if (m * h) % P == 0:  # 128 partitions of F consecutive pairs each
        F = m * h // P
        _rotate(x.reshape((P, 2 * F)), cos.reshape((P, F)), sin.reshape((P, F)),
                out_e.reshape((P, F)), out_o.reshape((P, F)), 0, P)
    else:
        for t in nl.affine_range(m // P):
            _rotate(x, cos, sin, out_e, out_o, t * P, P)
        if m % P:
            _rotate(x, cos, sin, out_e, out_o, (m // P) * P, m % P)
    return out_e, out_o
