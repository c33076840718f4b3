"""NKI semantics the public kernels rely on, each checked on a small kernel written here: the
first matmul of an accumulation group in timing-only mode, instructions whose mask is off
everywhere, and the indexing forms of the reference kernels."""
import textwrap

import numpy as np

from axon.targets.trainium.simulator import ShapeDtype, simulate_source

NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
OLD = "from neuronxcc import nki\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"

MATMUL_GROUPS = """
    @nki.jit
    def k(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        for kk in nl.affine_range(2):
            at = nl.load(a[kk * 128:(kk + 1) * 128, :])
            bt = nl.load(b[kk * 128:(kk + 1) * 128, :])
            nisa.nc_matmul(dst=acc, stationary=at, moving=bt)
        s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=acc)
        nl.store(out, value=s)
        return out
"""

MATMUL_IADD = """
    @nki.jit
    def k(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        for kk in nl.affine_range(2):
            at = nl.load(a[kk * 128:(kk + 1) * 128, :])
            bt = nl.load(b[kk * 128:(kk + 1) * 128, :])
            acc += nisa.nc_matmul(at, bt)
        nl.store(out, value=nl.copy(acc))
        return out
"""


def _accumulate_flags(source, api, timing_only):
    shapes = {"a": ShapeDtype((256, 128), "float32"), "b": ShapeDtype((256, 512), "float32")}
    rng = np.random.default_rng(0)
    values = {"a": rng.standard_normal((256, 128), dtype=np.float32),
              "b": rng.standard_normal((256, 512), dtype=np.float32)}
    res = simulate_source(api + textwrap.dedent(source), "k", shapes if timing_only else values,
                          target="trn1", timing_only=timing_only)
    flags = [ins.extra["accumulate"] for ins in res.trace if ins.opcode == "nc_matmul"]
    return flags, res, values


def test_first_matmul_overwrites_in_timing_only_mode_as_with_values():
    for source, api in ((MATMUL_GROUPS, NEW), (MATMUL_IADD, OLD)):
        timed, _, _ = _accumulate_flags(source, api, timing_only=True)
        valued, res, v = _accumulate_flags(source, api, timing_only=False)
        assert timed == valued == [False, True]
        np.testing.assert_allclose(res.outputs, v["a"].T @ v["b"], rtol=1e-4, atol=1e-3)
