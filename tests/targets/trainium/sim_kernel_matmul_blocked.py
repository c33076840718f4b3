import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_blocked(lhsT, rhs, BM=16, BN=2, BK=8):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TM, TK, TN = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    SM, SN, SK = TM * BM, TN * BN, TK * BK
    for n in nl.affine_range(N // SN):
        acc = nl.zeros((M // SM, BM, BN, nl.par_dim(TM), TN), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.sequential_range(K // SK):
            g = nl.mgrid[0:TK, 0:SN]
            rt = nl.ndarray((BK, nl.par_dim(TK), SN), dtype=rhs.dtype, buffer=nl.sbuf)
            for bk in nl.affine_range(BK):
                rt[bk] = nl.load(rhs[(BK * k + bk) * TK + g.p, SN * n + g.x])
            for m in nl.affine_range(M // SM):
                gl = nl.mgrid[0:TK, 0:SM]
                lt = nl.ndarray((BK, nl.par_dim(TK), SM), dtype=lhsT.dtype, buffer=nl.sbuf)
                for bk in nl.affine_range(BK):
                    lt[bk] = nl.load(lhsT[(BK * k + bk) * TK + gl.p, SM * m + gl.x])
                a = nl.mgrid[0:TK, 0:TM]
                b = nl.mgrid[0:TK, 0:TN]
                r = nl.mgrid[0:TM, 0:TN]
                for bn in nl.affine_range(BN):
                    for bm in nl.affine_range(BM):
                        ps = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(BK):
                            ps[...] += nisa.nc_matmul(lt[bk, a.p, bm * TM + a.x], rt[bk, b.p, bn * TN + b.x])
                        acc[m, bm, bn, r.p, r.x] += ps[r.p, r.x]
        for m in nl.affine_range(M // SM):
            for bm in nl.affine_range(BM):
                g = nl.mgrid[0:TK, 0:TN]
                gp = nl.mgrid[0:TK, 0:SN]
                packed = nl.ndarray((TK, SN), dtype=nl.float32, buffer=nl.sbuf)
                for bn in nl.affine_range(BN):
                    packed[g.p, bn * TN + g.x] = nl.copy(acc[m, bm, bn, g.p, g.x])
                nl.store(out[(BM * m + bm) * TK + gp.p, SN * n + gp.x], value=packed)
    return out
