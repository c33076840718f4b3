"""softmax(q.T @ k) @ v.T for q, k, v of shape (128, s), s a multiple of 512, written the way Axon
emits it (one fused pass, row blocks of 4 x 128 rows, PSUM zeroed by memset before each matmul
group, TensorE transposes of the probabilities and of v). The performance model once left a
quarter of such a kernel's instructions unscheduled (test_model_accounting.py)."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def attention_dmajor(q, k, v):
    DT = q.dtype
    s = q.shape[1]
    tiles = s // 128
    out = nl.ndarray((s, 128), dtype=DT, buffer=nl.shared_hbm)
    for i_rb in nl.affine_range(s // 512):
        scores = nl.ndarray((128, 4 * s), dtype=nl.float32, buffer=nl.sbuf)
        probs_T = nl.ndarray((128, 4 * s), dtype=DT, buffer=nl.sbuf)
        lhsT = nl.ndarray((128, 512), dtype=DT, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhsT[0:128, 0:512], src=q[0:128, i_rb * 512:i_rb * 512 + 512])
        w = nl.ndarray((128, s), dtype=DT, buffer=nl.sbuf)
        nisa.dma_copy(dst=w[0:128, 0:s], src=k[0:128, 0:s])
        # scores = q.T @ k, one 128 x 128 PSUM tile at a time
        for i_r in nl.affine_range(4):
            for i_nt in nl.affine_range(tiles):
                acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
                nisa.memset(dst=acc, value=0.0)
                nisa.nc_matmul(dst=acc[0:128, 0:128], stationary=lhsT[0:128, i_r * 128:i_r * 128 + 128],
                               moving=w[0:128, i_nt * 128:i_nt * 128 + 128])
                nisa.tensor_copy(dst=scores[0:128, i_r * s + i_nt * 128:i_r * s + i_nt * 128 + 128],
                                 src=acc[0:128, 0:128], engine=nisa.engine.scalar)
        # softmax along each row, then the probabilities transposed for the second matmul
        for i_r in nl.affine_range(4):
            probs = nl.ndarray((128, s), dtype=DT, buffer=nl.sbuf)
            t = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=t[0:128, 0:1], data=scores[0:128, i_r * s:i_r * s + s], op=nl.maximum,
                               negate=True, axis=1)
            e = nl.ndarray((128, s), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=e[0:128, 0:s], reduce_res=t[0:128, 0:1], data=scores[0:128, i_r * s:i_r * s + s],
                                   bias=t[0:128, 0:1], op=nl.exp, reduce_op=nl.add)
            nisa.tensor_scalar(dst=probs[0:128, 0:s], data=e[0:128, 0:s], operand0=t[0:128, 0:1], op0=nl.divide,
                               engine=nisa.engine.gpsimd)
            for i_q in nl.affine_range(s // 512):
                tp = nl.ndarray((128, 512), dtype=DT, buffer=nl.psum)
                for j in range(4):
                    nisa.nc_transpose(dst=tp[0:128, j * 128:j * 128 + 128],
                                      data=probs[0:128, i_q * 512 + j * 128:i_q * 512 + j * 128 + 128])
                nisa.tensor_copy(dst=probs_T[0:128, i_r * s + i_q * 512:i_r * s + i_q * 512 + 512], src=tp)
        # v.T, transposed on TensorE from the rows of v
        v_T = nl.ndarray((128, s), dtype=DT, buffer=nl.sbuf)
        v_rows = nl.ndarray((128, s), dtype=DT, buffer=nl.sbuf)
        nisa.dma_copy(dst=v_rows[0:128, 0:s], src=v[0:128, 0:s])
        for i_q in nl.affine_range(tiles):
            tp1 = nl.ndarray((128, 128), dtype=DT, buffer=nl.psum)
            nisa.nc_transpose(dst=tp1[0:128, 0:128], data=v_rows[0:128, i_q * 128:i_q * 128 + 128])
            nisa.tensor_copy(dst=v_T[0:128, i_q * 128:i_q * 128 + 128], src=tp1)
        # out = probs @ v.T, accumulated over s in PSUM
        for i_r in nl.affine_range(4):
            o = nl.ndarray((128, 128), dtype=DT, buffer=nl.sbuf)
            acc1 = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
            nisa.memset(dst=acc1, value=0.0)
            for i_kt in nl.affine_range(tiles):
                nisa.nc_matmul(dst=acc1[0:128, 0:128], stationary=probs_T[0:128, i_r * s + i_kt * 128:i_r * s + i_kt * 128 + 128],
                               moving=v_T[0:128, i_kt * 128:i_kt * 128 + 128])
            nisa.tensor_copy(dst=o[0:128, 0:128], src=acc1[0:128, 0:128], engine=nisa.engine.scalar)
            nisa.dma_copy(dst=out[i_rb * 512 + i_r * 128:i_rb * 512 + i_r * 128 + 128, 0:128], src=o[0:128, 0:128])
    return out
