"""Matmul tutorial, step 1: tiled.

result[M, N] = lhsT[K, M].T @ rhs[K, N]. The left operand arrives transposed so that the
contraction dimension K lies on the partition axis, as the Tensor Engine wants. Each output tile
of 128 x 512 accumulates K/128 matmuls in one PSUM bank; both operand tiles are loaded from HBM
right before the matmul that uses them, so every tile is fetched once per use.
Written for Axon from the description in AWS's NKI matrix-multiplication tutorial.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, "lhsT and rhs must share the contraction dimension"
    TM = nl.tile_size.gemm_stationary_fmax  # 128 output rows per matmul
    TK = nl.tile_size.pmax  # 128: contraction per matmul
    TN = nl.tile_size.gemm_moving_fmax  # 512 output columns per matmul
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for mi in nl.affine_range(M // TM):
        for ni in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(K // TK):
                a = nl.load(lhsT[ki * TK:(ki + 1) * TK, mi * TM:(mi + 1) * TM])
                b = nl.load(rhs[ki * TK:(ki + 1) * TK, ni * TN:(ni + 1) * TN])
                acc += nl.matmul(a, b, transpose_x=True)
            out = nl.copy(acc, dtype=result.dtype)
            nl.store(result[mi * TM:(mi + 1) * TM, ni * TN:(ni + 1) * TN], value=out)
    return result
