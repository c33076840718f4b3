"""Matmul tutorial, step 3: both free dimensions blocked.

Same product as tiled.py. Output rows are taken in blocks of 2 x 128 and output columns in blocks
of 2 x 512: the lhsT strips of a row-block are loaded once and reused by every column-block, and
the rhs strips of a column-block are loaded once per (row-block, column-block) and reused by both
row tiles, halving rhs traffic against step 2.
Written for Axon from the description in AWS's NKI matrix-multiplication tutorial.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

ROW_TILES = 2  # 128-row output tiles per row-block
COL_TILES = 2  # 512-column output tiles per column-block


@nki.jit
def matmul_block_free(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, "lhsT and rhs must share the contraction dimension"
    TM = nl.tile_size.gemm_stationary_fmax
    TK = nl.tile_size.pmax
    TN = nl.tile_size.gemm_moving_fmax
    KT = K // TK
    BM, BN = ROW_TILES * TM, COL_TILES * TN
    assert M % BM == 0 and N % BN == 0, "M and N must be multiples of the block sizes"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for mb in nl.affine_range(M // BM):
        # tile (r, k) of the row-block sits at columns [(r*KT + k)*TM, +TM)
        a_block = nl.ndarray((TK, ROW_TILES * KT * TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for r in nl.affine_range(ROW_TILES):
            for ki in nl.affine_range(KT):
                col = (r * KT + ki) * TM
                a_block[:, col:col + TM] = nl.load(lhsT[ki * TK:(ki + 1) * TK, mb * BM + r * TM:mb * BM + (r + 1) * TM])

        for nb in nl.affine_range(N // BN):
            b_block = nl.ndarray((TK, COL_TILES * KT * TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for c in nl.affine_range(COL_TILES):
                for ki in nl.affine_range(KT):
                    col = (c * KT + ki) * TN
                    b_block[:, col:col + TN] = nl.load(rhs[ki * TK:(ki + 1) * TK, nb * BN + c * TN:nb * BN + (c + 1) * TN])

            for r in nl.affine_range(ROW_TILES):
                for c in nl.affine_range(COL_TILES):
                    acc = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for ki in nl.affine_range(KT):
                        a_col = (r * KT + ki) * TM
                        b_col = (c * KT + ki) * TN
                        acc += nl.matmul(a_block[:, a_col:a_col + TM], b_block[:, b_col:b_col + TN],
                                         transpose_x=True)
                    out = nl.copy(acc, dtype=result.dtype)
                    row0, col0 = mb * BM + r * TM, nb * BN + c * TN
                    nl.store(result[row0:row0 + TM, col0:col0 + TN], value=out)
    return result
