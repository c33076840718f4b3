"""Hand-written LayerNorm over the last axis: y = (x - mean) / sqrt(var + 1e-6) * g + b, x [m, n].

Technique (after AWS's LayerNorm tutorial): rows go in tiles of 128 partitions, one [128, n] load
each; g and b are loaded once and broadcast across the partitions. The tutorial's statistics
instructions (bn_stats / bn_aggr) are not in Axon's simulator, so the statistics come from two
Scalar-Engine activation_reduce passes with the 1/n folded into the scale: mean = sum(x/n), then
var = sum(((x - mean)/sqrt(n))^2) with the shift as the free activation bias (an exact two-pass
variance, fp32), and rstd = rsqrt(var + eps): all on the Scalar Engine. The Vector Engine
normalises with one two-op tensor_scalar ((x - mean) * rstd), the GpSimd Engine adds b, and the
multiply by g alternates between the two, so the three engines share the per-element work about
evenly. Tiles are processed in groups, stage by stage, so the Scalar Engine computes the next
tile's statistics while the others finish this one (engines run their instructions in order).
A last partial tile uses fewer partitions.
"""
import math

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

EPS = 1e-6
GROUP_BYTES = 64 * 1024  # per partition, for a group's tiles (x, x_hat, y in bf16)


def _group(x, out, g_all, b_all, eps, tiles):
    n = x.shape[1]
    xs = [nl.load(x[r0:r0 + P, :]) for r0, P in tiles]
    means, rstds = [], []
    for (_, P), xt in zip(tiles, xs):  # statistics: Scalar Engine only, fp32
        mean = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        var = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(op=nl.copy, data=xt, reduce_op=nl.add, reduce_res=mean,
                               scale=1.0 / n, dtype=nl.bfloat16)
        # sum(((x - mean) / sqrt(n))^2) = var: the shift is the activation's free bias
        shift = nisa.activation(op=nl.copy, data=mean, scale=-1.0 / math.sqrt(n))
        nisa.activation_reduce(op=nl.square, data=xt, bias=shift, scale=1.0 / math.sqrt(n),
                               reduce_op=nl.add, reduce_res=var, dtype=nl.bfloat16)
        means.append(mean)
        rstds.append(nisa.activation(op=nl.rsqrt, data=var, bias=eps[:P]))
    for j, ((r0, P), xt, mean, rstd) in enumerate(zip(tiles, xs, means, rstds)):
        xhat = nisa.tensor_scalar(xt, op0=nl.subtract, operand0=mean, op1=nl.multiply, operand1=rstd,
                                  dtype=x.dtype)
        # the multiply by g alternates between the Vector and GpSimd engines
        mul_engine = nisa.engine.vector if j % 2 == 0 else nisa.engine.gpsimd
        scaled = nisa.tensor_tensor(xhat, g_all[:P], op=nl.multiply, engine=mul_engine, dtype=x.dtype)
        y = nisa.tensor_tensor(scaled, b_all[:P], op=nl.add, engine=nisa.engine.gpsimd, dtype=x.dtype)
        nl.store(out[r0:r0 + P, :], value=y)


@nki.jit
def layernorm_kernel(x, g, b):
    m, n = x.shape
    P = nl.tile_size.pmax
    G = max(1, min(4, GROUP_BYTES // (n * 6)))  # tiles per group
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    g_all = nl.load(g.reshape((1, n))).broadcast_to((P, n))
    b_all = nl.load(b.reshape((1, n))).broadcast_to((P, n))
    eps = nl.full((P, 1), EPS, dtype=nl.float32, buffer=nl.sbuf)
    for gb in nl.affine_range(m // (G * P)):
        _group(x, out, g_all, b_all, eps, [((gb * G + j) * P, P) for j in range(G)])
    rest = m % (G * P)
    if rest:
        base = m - rest
        _group(x, out, g_all, b_all, eps, [(base + r, min(P, rest - r)) for r in range(0, rest, P)])
    return out
