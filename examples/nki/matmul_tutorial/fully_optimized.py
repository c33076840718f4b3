"""Matmul tutorial, step 4: all three dimensions blocked, DMA-friendly layouts.

Same product as tiled.py. Output columns go in blocks of 2 x 512, the contraction in blocks of
8 x 128 (a sequential loop: partial sums of each K-block are added into SBUF accumulators that
hold the whole column-block of the output), output rows in blocks of 16 x 128. Operand blocks are
loaded as wide tiles (128 x 1024 of rhs, 128 x 2048 of lhsT: 2 KiB and 4 KiB per partition) so
each DMA moves large contiguous runs, and each finished row of output tiles is packed into one
128 x 1024 tile before its store.
Written for Axon from the description in AWS's NKI matrix-multiplication tutorial.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

ROW_TILES = 16  # 128-row tiles per row-block (2048 rows)
COL_TILES = 2  # 512-column tiles per column-block (1024 columns)
K_TILES = 8  # 128-deep tiles per contraction block (1024)


@nki.jit
def matmul_fully_optimized(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, "lhsT and rhs must share the contraction dimension"
    TM = nl.tile_size.gemm_stationary_fmax
    TK = nl.tile_size.pmax
    TN = nl.tile_size.gemm_moving_fmax
    BM, BN, BK = ROW_TILES * TM, COL_TILES * TN, K_TILES * TK
    assert M % BM == 0 and N % BN == 0 and K % BK == 0, "sizes must be multiples of the block sizes"
    row_blocks = M // BM
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for nb in nl.affine_range(N // BN):
        # Accumulators for a whole column-block of the output: tile (t, c) with t the global
        # 128-row tile index sits at columns [(t*COL_TILES + c)*TN, +TN).
        acc_sb = nl.zeros((TM, row_blocks * ROW_TILES * COL_TILES * TN), dtype=lhsT.dtype, buffer=nl.sbuf)

        for kb in nl.sequential_range(K // BK):
            b_block = nl.ndarray((TK, K_TILES * BN), dtype=rhs.dtype, buffer=nl.sbuf)
            for kt in nl.affine_range(K_TILES):
                k0 = kb * BK + kt * TK
                b_block[:, kt * BN:(kt + 1) * BN] = nl.load(rhs[k0:k0 + TK, nb * BN:(nb + 1) * BN])

            for mb in nl.affine_range(row_blocks):
                a_block = nl.ndarray((TK, K_TILES * BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                for kt in nl.affine_range(K_TILES):
                    k0 = kb * BK + kt * TK
                    a_block[:, kt * BM:(kt + 1) * BM] = nl.load(lhsT[k0:k0 + TK, mb * BM:(mb + 1) * BM])

                for c in nl.affine_range(COL_TILES):
                    for r in nl.affine_range(ROW_TILES):
                        part = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for kt in nl.affine_range(K_TILES):
                            a_col = kt * BM + r * TM
                            b_col = kt * BN + c * TN
                            part += nisa.nc_matmul(a_block[:, a_col:a_col + TM], b_block[:, b_col:b_col + TN])
                        col = ((mb * ROW_TILES + r) * COL_TILES + c) * TN
                        acc_sb[:, col:col + TN] = nl.add(acc_sb[:, col:col + TN], part, dtype=lhsT.dtype)

        for t in nl.affine_range(row_blocks * ROW_TILES):
            packed = nl.ndarray((TM, BN), dtype=lhsT.dtype, buffer=nl.sbuf)
            for c in nl.affine_range(COL_TILES):
                col = (t * COL_TILES + c) * TN
                packed[:, c * TN:(c + 1) * TN] = nl.copy(acc_sb[:, col:col + TN])
            nl.store(result[t * TM:(t + 1) * TM, nb * BN:(nb + 1) * BN], value=packed)
    return result
