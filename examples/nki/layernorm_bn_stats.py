"""LayerNorm over the rows of a [rows, cols] tensor, in the style of the public NKI LayerNorm
tutorial (version 2): mean and variance come from nisa.bn_stats on bn_stats_fmax-wide chunks of
each row, merged by one nisa.bn_aggr; a two-operator nisa.tensor_scalar shifts and scales.

    out = (x - mean(x)) / sqrt(var(x) + epsilon) * gamma + beta      (per row)

Row counts and column counts need not be multiples of 128 or 512: the last row tile and the
last bn_stats chunk are masked.
"""
import math

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def layernorm_bn_stats(input_tensor, gamma_vector, beta_vector, epsilon=1e-5):
    output_tensor = nl.ndarray(input_tensor.shape, dtype=input_tensor.dtype, buffer=nl.shared_hbm)
    num_rows, num_cols = input_tensor.shape
    assert num_cols == gamma_vector.shape[0] == beta_vector.shape[0]

    i_p_io, i_f_io, i_p_param = nl.mgrid[0:nl.tile_size.pmax, 0:num_cols, 0:1]

    # gamma and beta are loaded once and broadcast across the partitions
    gamma_sb = nl.load(gamma_vector.reshape((1, num_cols))[i_p_param, i_f_io])
    beta_sb = nl.load(beta_vector.reshape((1, num_cols))[i_p_param, i_f_io])
    gamma_bcast = gamma_sb.broadcast_to((nl.tile_size.pmax, num_cols))
    beta_bcast = beta_sb.broadcast_to((nl.tile_size.pmax, num_cols))

    for i in nl.affine_range(math.ceil(num_rows / nl.tile_size.pmax)):
        rows = i * nl.tile_size.pmax + i_p_io
        x = nl.load(input_tensor[rows, i_f_io], mask=(rows < num_rows))

        # bn_stats reads at most bn_stats_fmax elements per partition: one call per chunk,
        # each writing its 6 statistics at its own offset of one SBUF tile
        i_f_bn, i_f_stats = nl.mgrid[0:nl.tile_size.bn_stats_fmax, 0:6]
        num_chunks = math.ceil(num_cols / nl.tile_size.bn_stats_fmax)
        stats = nl.ndarray((nl.tile_size.pmax, 6 * num_chunks), dtype=np.float32)
        for j in nl.affine_range(num_chunks):
            cols = j * nl.tile_size.bn_stats_fmax + i_f_bn
            stats[i_p_io, j * 6 + i_f_stats] = nisa.bn_stats(x[i_p_io, cols], mask=(cols < num_cols),
                                                             dtype=np.float32)

        # merge the chunks: mean in column 0, variance in column 1
        mean_var = nisa.bn_aggr(stats[i_p_io, nl.arange(6 * num_chunks)[None, :]])
        mean = mean_var[i_p_io, 0]
        var = mean_var[i_p_io, 1]
        inv_std = nl.rsqrt(var + epsilon)

        # (x - mean) * inv_std as one instruction with two operators
        normed = nisa.tensor_scalar(data=x, op0=np.subtract, operand0=mean,
                                    op1=np.multiply, operand1=inv_std)
        out = normed * gamma_bcast + beta_bcast
        nl.store(output_tensor[rows, i_f_io], value=out, mask=(rows < num_rows))

    return output_tensor
