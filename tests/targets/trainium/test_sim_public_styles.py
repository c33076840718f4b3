"""Kernels written in the styles of the public NKI corpora (beta-1 tutorials, current-API SPMD
kernels, packages with relative imports and dataclasses, compiler directives, engine aliases)
run unchanged: given only array inputs, scalar arguments and a grid, and their outputs match
NumPy."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from axon.errors import InputError
from axon.targets.trainium.runner import parse_arg, parse_grid, run

ROOT = Path(__file__).resolve().parents[3]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


RMSNORM_BETA1 = """
    import math
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    import torch_xla.core.xla_model as xm  # host-side only; not installed here

    @nki.jit
    def rmsnorm(a_tensor, g_tensor, eps=1e-6, ROWS=128):
        out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
        ix = nl.arange(ROWS)[:, None]
        iy = nl.arange(a_tensor.shape[1])[None, :]
        g = nl.load(g_tensor.reshape((1, g_tensor.shape[0]))[nl.arange(1)[:, None], iy])
        for i in nl.affine_range(math.ceil(a_tensor.shape[0] / ROWS)):
            a = nl.load(a_tensor[i * ROWS + ix, iy], mask=(i * ROWS + ix < a_tensor.shape[0]))
            ss = nl.sum(nl.square(a), axis=[1])
            r = nl.rsqrt(ss / a_tensor.shape[1] + eps)
            y = nl.multiply(nl.multiply(a, r), g.broadcast_to((ROWS, a_tensor.shape[1])))
            nl.store(out[i * ROWS + ix, iy], value=y, mask=(i * ROWS + ix < a_tensor.shape[0]))
        return out
"""


def _rms(a, g, eps):
    return a / np.sqrt(np.mean(a * a, axis=1, keepdims=True) + eps) * g


def test_beta1_scalar_argument_with_default_and_host_only_import(tmp_path):
    k = write(tmp_path / "rmsnorm.py", RMSNORM_BETA1)
    rng = np.random.default_rng(0)
    a, g = rng.standard_normal((200, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    default = run(str(k), {"a_tensor": a, "g_tensor": g}, target="trn1")  # eps, ROWS keep their defaults
    np.testing.assert_allclose(default.outputs, _rms(a, g, 1e-6), rtol=1e-4, atol=1e-4)
    given = run(str(k), {"a_tensor": a, "g_tensor": g}, target="trn1", args={"eps": 10.0})
    np.testing.assert_allclose(given.outputs, _rms(a, g, 10.0), rtol=1e-4, atol=1e-4)
    assert not np.allclose(default.outputs, given.outputs)


SPMD_ADD = """
    import nki
    import nki.language as nl
    import nki.isa as nisa

    @nki.jit
    def add(a, b):
        c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        assert nl.num_programs(0) * 128 == a.shape[0] and nl.num_programs(1) * 256 == a.shape[1]
        i, j = nl.program_id(0), nl.program_id(axis=1)
        x = nl.load(a[i * 128:(i + 1) * 128, j * 256:(j + 1) * 256])
        y = nl.load(b[i * 128:(i + 1) * 128, j * 256:(j + 1) * 256])
        z = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add, engine=nisa.vector_engine)
        nl.store(c[i * 128:(i + 1) * 128, j * 256:(j + 1) * 256], value=z)
        return c
"""


def test_spmd_grid_runs_every_instance(tmp_path):
    k = write(tmp_path / "add.py", SPMD_ADD)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((256, 768)).astype(np.float32) for _ in range(2))
    rep = run(str(k), {"a": a, "b": b}, target="trn1", grid=(2, 3))
    np.testing.assert_array_equal(rep.outputs, a + b)
    one = run(str(k), {"a": a[:128, :256], "b": b[:128, :256]}, target="trn1")
    # six instances, each its own loads, add and store, on one NeuronCore
    assert rep.estimate.instructions == 6 * one.estimate.instructions
    assert rep.estimate.latency_ns > one.estimate.latency_ns


def test_spmd_instance_without_a_grid_is_instance_zero(tmp_path):
    k = write(tmp_path / "add.py", SPMD_ADD)
    with pytest.raises(Exception, match="never written|AssertionError"):
        run(str(k), {"a": np.ones((256, 256), np.float32), "b": np.ones((256, 256), np.float32)}, target="trn1")


def test_package_with_relative_imports_and_module_level_dataclass(tmp_path):
    write(tmp_path / "mylib" / "__init__.py", "")
    write(tmp_path / "mylib" / "utils" / "__init__.py", "from .config import TileConfig\n")
    write(tmp_path / "mylib" / "utils" / "config.py", """
        from __future__ import annotations
        from dataclasses import dataclass
        import nki.language as nl

        @dataclass(frozen=True)
        class TileConfig(nl.NKIObject):
            rows: int = 128
            scale: float = 3.0
    """)
    write(tmp_path / "mylib" / "utils" / "helpers.py", """
        def div_ceil(a, b):
            return (a + b - 1) // b
    """)
    k = write(tmp_path / "mylib" / "ops" / "scale" / "scale.py", """
        from __future__ import annotations
        from dataclasses import dataclass
        import nki
        import nki.language as nl
        import nki.isa as nisa
        from ...utils import TileConfig
        from ...utils.helpers import div_ceil
        from mylib.utils.config import TileConfig as Same

        @dataclass
        class Plan:
            tiles: int
            cfg: TileConfig

        @nki.jit
        def scale(x, cfg: TileConfig = TileConfig()):
            assert TileConfig is Same
            plan = Plan(div_ceil(x.shape[0], cfg.rows), cfg)
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(plan.tiles):
                t = nl.ndarray((cfg.rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x[i * cfg.rows:(i + 1) * cfg.rows, :])
                u = nl.ndarray((cfg.rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=cfg.scale)
                nisa.dma_copy(dst=out[i * cfg.rows:(i + 1) * cfg.rows, :], src=u)
            return out
    """)
    x = np.arange(256 * 32, dtype=np.float32).reshape(256, 32)
    rep = run(str(k), {"x": x}, target="trn1")
    np.testing.assert_array_equal(rep.outputs, 3 * x)
    assert "mylib" not in sys.modules and "mylib.utils.config" not in sys.modules  # restored


TRANSPOSE_IDENTITY = """
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.compiler as ncc

    @nki.compiler.skip_middle_end_transformations
    @nki.jit
    def transpose_scale(x, out_dtype=nl.float32):
        identity = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=x.dtype)
        out = nl.ndarray((x.shape[1], x.shape[0]), dtype=out_dtype, buffer=nl.shared_hbm)
        ident = nl.load(identity)
        t = nl.ndarray((128, 128), dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t[...] = nl.load(x)
        ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
        ps[...] = nisa.nc_matmul(t, ident, is_moving_onezero=True, is_transpose=True)
        big = nl.full((128, 1), nl.finfo(nl.float32).max, dtype=nl.float32)
        low = nl.full((128, 1), nl.fp32.min, dtype=nl.float32)
        res = nisa.tensor_scalar(ps, nl.minimum, big, engine=nisa.unknown_engine)
        res = nisa.tensor_scalar(res, nl.maximum, low, engine=nisa.scalar_engine)
        for i in nl.sequential_range(1, directives=ncc.no_reorder()):
            nl.store(out, value=res)
        return out
"""


def test_shared_constant_transposing_matmul_compiler_directives_engine_aliases_finfo(tmp_path):
    k = write(tmp_path / "tr.py", TRANSPOSE_IDENTITY)
    x = np.random.default_rng(2).standard_normal((128, 128)).astype(np.float32)
    rep = run(str(k), {"x": x}, target="trn1")
    np.testing.assert_allclose(rep.outputs, x.T, rtol=1e-6, atol=1e-6)


LOOP_REDUCE = """
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.isa as nisa

    @nki.jit
    def colsum_blocks(lhsT, rhs, KT=128):
        K, M = lhsT.shape
        out = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(K // KT):
            ps = nl.matmul(nl.load(lhsT[k * KT:(k + 1) * KT, :]), nl.load(rhs[k * KT:(k + 1) * KT, :]),
                           transpose_x=True)
            acc[...] = nl.loop_reduce(ps, op=np.add, loop_indices=[k], dtype=nl.float32)
        nl.store(out, value=acc)
        return out
"""


def test_loop_reduce_accumulates_into_its_destination(tmp_path):
    k = write(tmp_path / "lr.py", LOOP_REDUCE)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((512, 64)).astype(np.float32), rng.standard_normal((512, 256)).astype(np.float32)
    rep = run(str(k), {"lhsT": a, "rhs": b}, target="trn1")
    np.testing.assert_allclose(rep.outputs, a.T @ b, rtol=1e-4, atol=1e-3)


POOL_SELECT = """
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    @nki.jit
    def pool_and_select(x, table, rows, pool=2):
        C, H, W = x.shape
        out = nl.ndarray((C, H // pool, W // pool), dtype=x.dtype, buffer=nl.shared_hbm)
        sel = nl.ndarray((C, H // pool, W // pool), dtype=x.dtype, buffer=nl.shared_hbm)
        gat = nl.ndarray((C, W), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        v = t.reshape((C, H // pool, pool, W // pool, pool))
        s = nl.sum(v, axis=[2, 4])  # non-trailing free axes
        i_f = nl.arange(H // pool)[None, :, None]
        m = nl.max(v, axis=[2, 4], mask=(i_f < H // pool))  # a mask of the result's rank on a 5-D input
        nl.store(out, value=nl.multiply(s, 1.0 / (pool * pool)))
        big = nl.greater_equal(m, nl.max(nl.max(m, axis=[2], keepdims=True), axis=[1], keepdims=True))
        nl.store(sel, value=nl.where(big, m, 0.0))
        idx = nl.load(rows)  # an integer index tile: a gather of rows of the table
        g = nl.load(table[idx, nl.arange(W)[None, :]])
        nl.store(gat, value=g)
        return out, sel, gat
"""


def test_reductions_over_inner_axes_masks_where_and_index_tiles(tmp_path):
    k = write(tmp_path / "pool.py", POOL_SELECT)
    rng = np.random.default_rng(4)
    C, H, W = 16, 8, 6
    x = rng.standard_normal((C, H, W)).astype(np.float32)
    rows = ((np.arange(C) * 5) % (C * H)).astype(np.int32).reshape(C, 1)
    table = x.reshape(C * H, W).copy()
    rep = run(str(k), {"x": x, "table": table, "rows": rows}, target="trn1")
    out, sel, gat = rep.outputs
    v = x.reshape(C, H // 2, 2, W // 2, 2)
    np.testing.assert_allclose(out, v.mean(axis=(2, 4)), rtol=1e-5, atol=1e-6)
    m = v.max(axis=(2, 4))
    np.testing.assert_allclose(sel, np.where(m >= m.max(axis=(1, 2), keepdims=True), m, 0.0), rtol=1e-6)
    np.testing.assert_array_equal(gat, table[rows[:, 0]])


def test_cli_takes_scalar_arguments_and_a_grid(tmp_path):
    k = write(tmp_path / "add.py", SPMD_ADD)
    r = subprocess.run([sys.executable, "-m", "axon", "simulate", str(k), "--input", "a=256x512:float32",
                        "--input", "b=256x512:float32", "--grid", "2x2", "--target", "trn1", "--json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["instructions"] > 0
    k2 = write(tmp_path / "rms.py", RMSNORM_BETA1)
    np.savez(tmp_path / "in.npz", a_tensor=np.ones((128, 32), np.float32), g_tensor=np.ones(32, np.float32))
    r = subprocess.run([sys.executable, "-m", "axon", "simulate", str(k2), "--inputs", str(tmp_path / "in.npz"),
                        "--arg", "eps=0.5", "--arg", "ROWS=64", "--target", "trn1"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "axon", "simulate", str(k2), "--inputs", str(tmp_path / "in.npz"),
                        "--arg", "nope=1"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "nope" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_argument_and_grid_parsing():
    assert parse_arg("eps=1e-5") == ("eps", 1e-5)
    assert parse_arg("shape2D=(37, 44)") == ("shape2D", (37, 44))
    assert parse_arg("flag=True") == ("flag", True)
    assert parse_arg("mode=fast") == ("mode", "fast")
    assert str(parse_arg("dt=nl.bfloat16")[1]) == "bfloat16"
    assert parse_grid("2x4") == (2, 4) and parse_grid("8") == (8,)
    for bad in ("2x0", "x", "2xx4"):
        with pytest.raises(InputError):
            parse_grid(bad)
    with pytest.raises(InputError):
        parse_arg("=3")


LOOP_REDUCE_MAX = """
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    @nki.jit
    def rowmax(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        m = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)  # never initialised (NKIBench style)
        for j in nl.affine_range(x.shape[1] // 512):
            part = nl.max(nl.load(x[:, j * 512:(j + 1) * 512]), axis=[1], keepdims=True)
            m[...] = nl.loop_reduce(part, op=np.max, loop_indices=[j], dtype=nl.float32)
        nl.store(out, value=m)
        return out
"""


def test_loop_reduce_into_an_unwritten_tile_starts_from_its_first_iteration(tmp_path):
    k = write(tmp_path / "lrm.py", LOOP_REDUCE_MAX)
    x = np.random.default_rng(4).standard_normal((128, 2048)).astype(np.float32)
    rep = run(str(k), {"x": x}, target="trn1")
    np.testing.assert_allclose(rep.outputs, x.max(axis=1, keepdims=True))
