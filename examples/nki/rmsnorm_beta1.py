"""RMSNorm over the rows of a [N, D] tensor (beta-1 API), edge tiles handled with masks."""
import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def rmsnorm(a_tensor, g_tensor):
    out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    rows, cols = a_tensor.shape
    ip = nl.arange(128)[:, None]
    iw = nl.arange(1)[:, None]
    iy = nl.arange(cols)[None, :]
    # the weight as one row, broadcast across the partitions once
    g_row = nl.load(g_tensor.reshape((1, cols))[iw, iy])
    g_all = g_row.broadcast_to((128, cols))
    for t in nl.affine_range(math.ceil(rows / 128)):
        live = t * 128 + ip < rows
        x = nl.load(a_tensor[t * 128 + ip, iy], mask=live)
        sq = nl.square(x, mask=live)
        ssum = nl.sum(sq, axis=[1], mask=live)
        mean = nl.multiply(ssum, 1.0 / cols, mask=live)
        inv = nl.rsqrt(nl.add(mean, 1e-6, mask=live), mask=live)
        y = nl.multiply(x, inv, mask=live)
        y = nl.multiply(y, g_all, mask=live)
        nl.store(out[t * 128 + ip, iy], value=y, mask=live)
    return out
