"""NumPy reference for the matmul tutorial kernels: result = lhsT.T @ rhs (float32)."""
import numpy as np


def matmul(lhsT, rhs):
    return np.asarray(lhsT, dtype=np.float32).T @ np.asarray(rhs, dtype=np.float32)
