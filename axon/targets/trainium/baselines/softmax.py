"""Hand-written softmax over the last axis: y = exp(x - max(x)) / sum(exp(x - max(x))), x [m, n].

Technique (after AWS's fused-attention tutorial's softmax): rows go in tiles of 128 partitions,
one [128, n] load each (n*2 contiguous bytes per partition). The Vector Engine takes the row
maximum already negated (tensor_reduce(negate=True)); the Scalar Engine computes exp(x - max)
with -max as the free per-row activation bias and sums each row in the same instruction
(activation_reduce); the Vector Engine scales the fp32 exponentials by the reciprocal of the
sums straight into the bf16 output tile. Tiles are processed in groups, one stage at a time
across the group, so the Vector Engine finds the next tile's maximum while the Scalar Engine
exponentiates (each engine runs its instructions in order within a loop iteration). A last partial tile uses fewer
partitions.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

GROUP_BYTES = 96 * 1024  # per partition, for a group's tiles (x bf16 + exp fp32 + y bf16)


def _group(x, out, tiles):
    """Softmax of the row tiles `tiles` = [(first row, rows), ...], stage by stage."""
    xs = [nl.load(x[r0:r0 + P, :]) for r0, P in tiles]
    neg_max = [nisa.tensor_reduce(op=nl.maximum, data=xt, axis=[1], negate=True, keepdims=True,
                                  dtype=nl.float32) for xt in xs]
    sums = [nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf) for _, P in tiles]
    es = [nisa.activation_reduce(op=nl.exp, data=xt, bias=nm, reduce_op=nl.add, reduce_res=s,
                                 dtype=nl.float32) for xt, nm, s in zip(xs, neg_max, sums)]
    for (r0, P), e, s in zip(tiles, es, sums):
        y = nisa.tensor_scalar(e, op0=nl.multiply, operand0=nisa.reciprocal(s), dtype=x.dtype)
        nl.store(out[r0:r0 + P, :], value=y)


@nki.jit
def softmax_kernel(x):
    m, n = x.shape
    P = nl.tile_size.pmax
    G = max(1, min(4, GROUP_BYTES // (n * 8)))  # tiles per group
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    for gb in nl.affine_range(m // (G * P)):
        _group(x, out, [((gb * G + j) * P, P) for j in range(G)])
    rest = m % (G * P)
    if rest:
        base = m - rest
        _group(x, out, [(base + r, min(P, rest - r)) for r in range(0, rest, P)])
    return out
