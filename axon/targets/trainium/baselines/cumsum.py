"""Hand-written cumulative sum over the last axis: y[:, j] = sum(x[:, :j+1]), x [m, n].

Technique (the tensor_tensor_scan technique of AWS's NKI documentation): rows go in tiles of 128
partitions and the row in column chunks of up to 4096 (8 KiB contiguous per partition per DMA,
and within the Vector Engine's free-size limit, so the vocabulary-sized cases fit). One Vector
Engine tensor_tensor_scan per chunk computes y[i] = y[i-1] * 1 + x[i] in fp32, seeded with the
last fp32 column of the previous chunk (so the carry is never rounded to bf16); the Scalar Engine
converts each finished chunk to bf16 while the Vector Engine scans the next. A last partial row
tile uses fewer partitions and a last partial chunk is narrower.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

CHUNK = 4096  # columns per scan


def _rows(x, out, ones, r0, P):
    n = x.shape[1]
    carry = 0.0
    for c0 in nl.static_range(0, n, CHUNK):  # the carry makes the chunks sequential
        C = min(CHUNK, n - c0)
        xt = nl.load(x[r0:r0 + P, c0:c0 + C])
        acc = nisa.tensor_tensor_scan(ones[:P, :C], xt, initial=carry, op0=nl.multiply, op1=nl.add,
                                      dtype=nl.float32)
        y = nisa.activation(op=nl.copy, data=acc, dtype=x.dtype)
        nl.store(out[r0:r0 + P, c0:c0 + C], value=y)
        carry = acc[:, C - 1:C]


@nki.jit
def cumsum_kernel(x):
    m, n = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    ones = nl.full((P, min(CHUNK, n)), 1.0, dtype=x.dtype, buffer=nl.sbuf)
    for t in nl.affine_range(m // P):
        _rows(x, out, ones, t * P, P)
    if m % P:
        _rows(x, out, ones, (m // P) * P, m % P)
    return out
