"""Row softmax written plainly: one 128-row tile per affine_range iteration, stages in order (the
hand-written baseline groups tiles stage by stage instead). The model should schedule both alike."""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def softmax_plain(x):
    m, n = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(m // P):
        xt = nl.load(x[i * P:(i + 1) * P, :])
        neg_max = nisa.tensor_reduce(op=nl.maximum, data=xt, axis=[1], negate=True, keepdims=True,
                                     dtype=nl.float32)
        s = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        e = nisa.activation_reduce(op=nl.exp, data=xt, bias=neg_max, reduce_op=nl.add, reduce_res=s,
                                   dtype=nl.float32)
        y = nisa.tensor_scalar(e, op0=nl.multiply, operand0=nisa.reciprocal(s), dtype=x.dtype)
        nl.store(out[i * P:(i + 1) * P, :], value=y)
    return out
