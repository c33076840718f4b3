"""Matmul tutorial, step 2: loads hoisted out of the innermost loop.

Same product as tiled.py. The K/128 tiles of one 128-column strip of lhsT are loaded once per
output row-block and reused for every output column-block; the K/128 tiles of one 512-column
strip of rhs are loaded once per output tile, before its accumulation loop. Strips live in SBUF
as 2-D tiles whose free axis holds the K/128 tiles side by side.
Written for Axon from the description in AWS's NKI matrix-multiplication tutorial.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def matmul_hoist_load(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, "lhsT and rhs must share the contraction dimension"
    TM = nl.tile_size.gemm_stationary_fmax
    TK = nl.tile_size.pmax
    TN = nl.tile_size.gemm_moving_fmax
    KT = K // TK
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for mi in nl.affine_range(M // TM):
        a_strip = nl.ndarray((TK, KT * TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for ki in nl.affine_range(KT):
            a_strip[:, ki * TM:(ki + 1) * TM] = nl.load(lhsT[ki * TK:(ki + 1) * TK, mi * TM:(mi + 1) * TM])

        for ni in nl.affine_range(N // TN):
            b_strip = nl.ndarray((TK, KT * TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for ki in nl.affine_range(KT):
                b_strip[:, ki * TN:(ki + 1) * TN] = nl.load(rhs[ki * TK:(ki + 1) * TK, ni * TN:(ni + 1) * TN])

            acc = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(KT):
                acc += nl.matmul(a_strip[:, ki * TM:(ki + 1) * TM], b_strip[:, ki * TN:(ki + 1) * TN],
                                 transpose_x=True)
            out = nl.copy(acc, dtype=result.dtype)
            nl.store(result[mi * TM:(mi + 1) * TM, ni * TN:(ni + 1) * TN], value=out)
    return result
