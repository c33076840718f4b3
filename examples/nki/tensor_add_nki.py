"""Element-wise addition in the current NKI API (`import nki`, dst-taking ISA calls)."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def tensor_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows, cols = a.shape
    for i in nl.affine_range(rows // 128):
        ta = nl.ndarray((128, cols), dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray((128, cols), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=tb, src=b[i * 128:(i + 1) * 128, :])
        tc = nl.ndarray((128, cols), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=tc, data1=ta, data2=tb, op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=tc)
    return out
