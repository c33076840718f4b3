import nki
import nki.isa as nisa
import nki.language as nl


def _on(tile):
    """nc_matmul's tiling-mode arguments for tile ((row, col), (rows, cols)); none for the whole array."""
    return {} if tile is None else {"tile_position": tuple(tile[0]), "tile_size": tuple(tile[1])}


@nki.jit
def two_chains(a, b, steps=1, left=None, right=None):
    """The two column halves of the stationary a [K, 128] against b [K, 512], `steps` times each,
    interleaved: the first on PE tile `left`, the second on `right` (None: the whole array)."""
    K, N = b.shape
    out = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    p = nl.ndarray((64, N), dtype=nl.float32, buffer=nl.psum)
    q = nl.ndarray((64, N), dtype=nl.float32, buffer=nl.psum)
    for i in nl.sequential_range(steps):
        nisa.nc_matmul(dst=p, stationary=ta[:, 0:64], moving=tb, **_on(left))
        nisa.nc_matmul(dst=q, stationary=ta[:, 64:128], moving=tb, **_on(right))
    r = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r[0:64, :], src=p)
    nisa.tensor_copy(dst=r[64:128, :], src=q)
    nisa.dma_copy(dst=out, src=r)
    return out
