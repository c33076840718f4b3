"""Element-wise addition in the beta-1 API (`neuronxcc.nki`): 128 x 512 tiles addressed with
nl.arange index expressions."""
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def tensor_add(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(512)[None, :]
    for m in nl.affine_range(a_input.shape[0] // 128):
        for n in nl.affine_range(a_input.shape[1] // 512):
            a = nl.load(a_input[m * 128 + ix, n * 512 + iy])
            b = nl.load(b_input[m * 128 + ix, n * 512 + iy])
            c = nl.add(a, b)
            nl.store(c_output[m * 128 + ix, n * 512 + iy], value=c)
    return c_output
