"""Kernels in the style of a current-API NKI kernel library (a package whose `__init__` imports
its modules with importlib, access patterns `t.ap(...)`, dst-first ISA calls given by keyword,
`tensor.buffer == nl.sbuf`, `nl.tile_size` constants) run unchanged and match NumPy."""
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from axon.errors import KernelError
from axon.targets.trainium.hardware import TRN2
from axon.targets.trainium.simulator import load_kernel, simulate, simulate_source

NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\nimport numpy as np\n"
RNG = np.random.default_rng(5)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def sim(body, **inputs):
    return simulate_source(NEW + textwrap.dedent(body), "k", inputs)


def test_package_init_importing_its_modules_with_importlib_stays_inside_the_load(tmp_path):
    write(tmp_path / "lib" / "__init__.py", """
        import importlib
        import pkgutil
        for _finder, _name, _ispkg in pkgutil.iter_modules(__path__):
            importlib.import_module(f".{_name}", __name__)
    """)
    write(tmp_path / "lib" / "helpers.py", """
        import nki.language as nl
        SCALE = 2.0
        ACT = nl.gelu_apprx_sigmoid
    """)
    k = write(tmp_path / "lib" / "ops.py", """
        import nki
        import nki.isa as nisa
        import nki.language as nl
        from .helpers import SCALE, ACT

        @nki.jit
        def act(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.activation(u, op=ACT, data=t, scale=SCALE)
            nisa.dma_copy(dst=out, src=u)
            return out
    """)
    x = RNG.uniform(-3, 3, (128, 64)).astype(np.float32)
    got = simulate(load_kernel(str(k), "act"), {"x": x}).outputs
    z = 2.0 * x
    np.testing.assert_allclose(got, z / (1.0 + np.exp(-1.702 * z)), rtol=1e-5, atol=1e-6)
    assert not [m for m in sys.modules if m == "lib" or m.startswith("lib.")]


def test_access_pattern_reads_partitions_strided_and_broadcast():
    r = sim("""
        @nki.jit
        def k(x):
            out = nl.ndarray((128, 4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            u = nl.ndarray((128, 4, 8), dtype=x.dtype, buffer=nl.sbuf)
            # columns 1, 5, 9, 13 (step 4), each repeated 8 times (step 0)
            nisa.tensor_copy(dst=u, src=t.ap(pattern=[[32, 128], [4, 4], [0, 8]], offset=1))
            nisa.dma_copy(dst=out, src=u)
            return out
    """, x=(x := RNG.standard_normal((128, 32)).astype(np.float32)))
    want = np.broadcast_to(x[:, 1:17:4, None], (128, 4, 8))
    np.testing.assert_array_equal(r.outputs, want)


def test_access_pattern_writes_into_its_tensor_and_on_hbm():
    r = sim("""
        @nki.jit
        def k(x):
            out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
            nisa.memset(t, value=0.0)
            # the first 8 rows of x land in the odd columns of t, transposed through HBM's ap
            nisa.dma_copy(dst=t.ap(pattern=[[16, 128], [2, 8]], offset=1),
                          src=x.ap(pattern=[[1, 128], [128, 8]]))
            nisa.dma_copy(dst=out, src=t)
            return out
    """, x=(x := RNG.standard_normal((8, 128)).astype(np.float32)))
    want = np.zeros((128, 16), np.float32)
    want[:, 1::2] = x.T
    np.testing.assert_array_equal(r.outputs, want)


@pytest.mark.parametrize("pattern, offset, message", [
    ("[[32, 128], [1, 33]]", 0, "reaches elements"),
    ("[[64, 64], [1, 32]]", 0, "partition step 64"),
    ("[[32, 128], [1, 32]]", 0, "partition step 32 must equal the tensor's free size 64"),  # as bf16
])
def test_bad_access_patterns_fail_with_the_kernel_line(pattern, offset, message):
    dtype = ", dtype=nl.bfloat16" if "size 64" in message else ""
    with pytest.raises(KernelError, match=message) as err:
        sim(f"""
            @nki.jit
            def k(x):
                t = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x)
                v = t.ap(pattern={pattern}, offset={offset}{dtype})
                return x
        """, x=np.zeros((128, 32), np.float32))
    assert str(err.value).startswith("<kernel>:10: ap(")


def test_buffer_compares_with_nl_buffers_and_tile_size_constants():
    r = sim("""
        @nki.jit
        def k(x):
            t = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.sbuf)
            out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
            flags = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
            nisa.memset(flags, value=0)
            nisa.memset(flags[0:1, 0:1], value=int(t.buffer == nl.sbuf))
            nisa.memset(flags[0:1, 1:2], value=int(x.buffer != nl.sbuf))
            nisa.memset(flags[0:1, 2:3], value=int(t.buffer == nl.psum))
            nisa.memset(flags[0:1, 3:4], value=nl.tile_size.total_available_sbuf_size)
            nisa.dma_copy(dst=out, src=flags)
            return out
    """, x=np.zeros((128, 4), np.float32))
    assert r.outputs.tolist() == [[1, 1, 0, TRN2.memory.sbuf_bytes_per_partition]]


def test_nkiobject_dataclass_takes_plain_class_attributes_and_defaults_annotated_ones_to_none(tmp_path):
    k = write(tmp_path / "sections.py", """
        from dataclasses import dataclass
        import nki
        import nki.isa as nisa
        import nki.language as nl

        @dataclass
        class Section(nl.NKIObject):
            index = None
            offset = 0
            rows: int

        @nki.jit
        def k(x):
            s = Section(index=1, offset=64)
            assert s.rows is None and Section().offset == 0
            out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[:, s.offset * s.index:s.offset * (s.index + 1)])
            nisa.dma_copy(dst=out, src=t)
            return out
    """)
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    np.testing.assert_array_equal(simulate(load_kernel(str(k), "k"), {"x": x}).outputs, x[:, 64:])


@pytest.mark.parametrize("shape, perm", [((8, 4, 16), (2, 1, 0)), ((16, 1, 3, 8), (3, 1, 2, 0))])
def test_dma_transpose_of_3d_and_4d_access_patterns(shape, perm):
    out_shape = tuple(shape[a] for a in perm)
    r = sim(f"""
        @nki.jit
        def k(x):
            out = nl.ndarray({out_shape}, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray({out_shape}, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=t, src=x, axes={perm})
            nisa.dma_copy(dst=out, src=t)
            return out
    """, x=(x := RNG.standard_normal(shape).astype(np.float32)))
    np.testing.assert_array_equal(r.outputs, x.transpose(perm))


def test_dma_transpose_refuses_axes_the_dma_engine_does_not_perform():
    with pytest.raises(KernelError, match=r"transposes only as \(2, 1, 0\)"):
        sim("""
            @nki.jit
            def k(x):
                t = nl.ndarray((4, 8, 16), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_transpose(dst=t, src=x, axes=(1, 0, 2))
                return x
        """, x=np.zeros((8, 4, 16), np.float32))


def test_dma_compute_adds_its_sources_in_float32_and_rounds_once():
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    a, b, c = (RNG.standard_normal((4, 128, 32)).astype(bf16) for _ in range(3))
    r = sim("""
        from nki.isa.constants import dge_mode, oob_mode

        @nki.jit
        def k(a, b, c):
            out = nl.ndarray((128, 32), dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 32), dtype=a.dtype, buffer=nl.sbuf)
            rows = [x.ap(pattern=[[32, 128], [1, 32]], offset=2 * 128 * 32) for x in (a, b, c)]
            nisa.dma_compute(dst=t, srcs=rows, reduce_op=nl.add)
            nisa.dma_copy(dst=out, src=t, dge_mode=dge_mode.none, oob_mode=oob_mode.error)
            return out
    """, a=a, b=b, c=c)
    want = (a[2].astype(np.float32) + b[2].astype(np.float32) + c[2].astype(np.float32)).astype(bf16)
    np.testing.assert_array_equal(r.outputs, want)
    assert [i.opcode for i in r.trace].count("dma_compute") == 1


def test_dma_compute_refuses_what_dma_engines_do_not_compute():
    with pytest.raises(KernelError, match="reduce_op must be nl.add"):
        sim("""
            @nki.jit
            def k(a):
                t = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
                nisa.dma_compute(dst=t, srcs=[a, a], reduce_op=nl.maximum)
                return a
        """, a=np.zeros((128, 8), np.float32))


def test_kernel_value_arguments_name_the_kernel_modules_own_enums(tmp_path):
    from axon.errors import InputError
    from axon.targets.trainium.simulator import KernelValue

    k = write(tmp_path / "modes.py", """
        from enum import Enum
        import nki
        import nki.isa as nisa
        import nki.language as nl

        class Mode(Enum):
            COPY = 0
            DOUBLE = 1

        @nki.jit
        def k(x, mode=Mode.COPY):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            if mode == Mode.DOUBLE:
                nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out, src=t)
            return out
    """)
    kernel = load_kernel(str(k), "k")
    x = RNG.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(simulate(kernel, {"x": x, "mode": KernelValue("Mode.DOUBLE")}).outputs, 2 * x)
    with pytest.raises(InputError, match="Mode has no 'TRIPLE'"):
        simulate(kernel, {"x": x, "mode": KernelValue("Mode.TRIPLE")})


def test_nc_stream_shuffle_moves_partitions_within_each_quadrant_and_keeps_255():
    mask = [(i + 1) % 32 for i in range(32)]
    mask[5] = 255
    r = sim(f"""
        @nki.jit
        def k(x):
            out = nl.ndarray((64, 8), dtype=x.dtype, buffer=nl.shared_hbm)
            s = nl.ndarray((64, 8), dtype=x.dtype, buffer=nl.sbuf)
            d = nl.ndarray((64, 8), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=x)
            nisa.memset(d, value=-1.0)
            nisa.nc_stream_shuffle(dst=d, src=s, shuffle_mask={mask})
            nisa.dma_copy(dst=out, src=d)
            return out
    """, x=(x := RNG.standard_normal((64, 8)).astype(np.float32)))
    want = np.full((64, 8), -1.0, np.float32)
    for j in range(64):
        if mask[j % 32] != 255:
            want[j] = x[32 * (j // 32) + mask[j % 32]]
    np.testing.assert_array_equal(r.outputs, want)


def test_nc_stream_shuffle_broadcasts_one_partition_in_the_beta1_argument_order():
    src = textwrap.dedent("""
        from neuronxcc import nki
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        @nki.jit
        def k(x):
            out = nl.ndarray((20, 8), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            d = nl.ndarray((20, 8), dtype=x.dtype, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(t[0:1, :], d, [0] * 32)
            nl.store(out, d)
            return out
    """)
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(simulate_source(src, "k", {"x": x}).outputs, np.broadcast_to(x[0], (20, 8)))


def test_nc_stream_shuffle_refuses_a_source_partition_past_src():
    with pytest.raises(KernelError, match="reads source partition 1, but src spans 1"):
        sim("""
            @nki.jit
            def k(x):
                t = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x)
                nisa.nc_stream_shuffle(dst=t, src=t[0:1, :], shuffle_mask=[0, 1] + [255] * 30)
                return x
        """, x=np.zeros((4, 8), np.float32))


def test_mx_packed_dtypes_exist_for_comparisons_and_are_refused_for_tensors():
    r = sim("""
        @nki.jit
        def k(x):
            assert x.dtype != nl.float8_e4m3fn_x4 and nl.float4_e2m1fn_x4 != nl.float8_e5m2_x4
            return x
    """, x=np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(r.outputs, 0)
    with pytest.raises(KernelError, match="MX packed dtype nl.float8_e4m3fn_x4 is not supported"):
        sim("""
            @nki.jit
            def k(x):
                t = nl.ndarray((128, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
                return x
        """, x=np.zeros((2, 2), np.float32))


SWAP_HALVES = """
    @nki.jit
    def k(x):
        # each of two programs writes its half of `mid`, then (after the barrier) reads the other's
        p = nl.program_id(0)
        mid = nl.ndarray((2, 128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray((2, 128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p])
        nisa.dma_copy(dst=mid[p], src=t)
        BARRIER
        u = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=mid[1 - p])
        nisa.dma_copy(dst=out[p], src=u)
        return out
"""


def test_core_barrier_lets_each_program_read_what_the_other_wrote_before_it():
    from axon.targets.trainium.simulator import simulate_source

    x = RNG.standard_normal((2, 128, 8)).astype(np.float32)
    src = NEW + textwrap.dedent(SWAP_HALVES).replace("BARRIER", "nisa.core_barrier(mid, (0, 1))")
    r = simulate_source(src, "k", {"x": x}, grid=(2,))
    np.testing.assert_array_equal(r.outputs, x[::-1])
    assert [i.opcode for i in r.trace].count("core_barrier") == 2
    with pytest.raises(KernelError, match="never written"):  # without it, program 0 reads too early
        simulate_source(NEW + textwrap.dedent(SWAP_HALVES).replace("BARRIER", "pass"), "k", {"x": x}, grid=(2,))


def test_core_barrier_that_a_program_never_reaches_is_an_error_on_its_line():
    src = NEW + textwrap.dedent(SWAP_HALVES).replace(
        "BARRIER", "if p == 0:\n            nisa.core_barrier(mid, (0, 1))")
    with pytest.raises(KernelError, match=r"<kernel>:1[56]: nisa.core_barrier: program 0 waits for program\(s\) \[1\]"):
        simulate_source(src, "k", {"x": np.zeros((2, 128, 8), np.float32)}, grid=(2,))
    with pytest.raises(KernelError, match="launch of one program"):
        simulate_source(NEW + textwrap.dedent(SWAP_HALVES).replace("BARRIER", "nisa.core_barrier(mid, (0, 1))"),
                        "k", {"x": np.zeros((2, 128, 8), np.float32)})


def test_max8_and_nc_find_index8_give_the_top_values_and_their_first_positions():
    x = RNG.standard_normal((16, 40)).astype(np.float32)
    x[3, 30] = x[3, 10] = 9.0  # a repeated maximum: its first position
    r = sim("""
        @nki.jit
        def k(x):
            top = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            where = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
            t = nl.ndarray((16, 40), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            v = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.max8(dst=v, src=t)
            i = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.nc_find_index8(dst=i, data=t, vals=v)
            nisa.dma_copy(dst=top, src=v)
            nisa.dma_copy(dst=where, src=i)
            return top, where
    """, x=x)
    top, where = r.outputs
    want = -np.sort(-x, axis=1)[:, :8]
    np.testing.assert_array_equal(top, want)
    np.testing.assert_array_equal(where, [[list(row).index(v) for v in w] for row, w in zip(x, want)])
    assert where[3, 0] == 10 and where[3, 1] == 10


def test_nc_find_index8_marks_a_missing_value_with_the_all_ones_sentinel():
    r = sim("""
        @nki.jit
        def k(x, v):
            where = nl.ndarray((1, 8), dtype=nl.uint16, buffer=nl.shared_hbm)
            t = nl.ndarray((1, 16), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            w = nl.ndarray((1, 8), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=w, src=v)
            i = nl.ndarray((1, 8), dtype=nl.uint16, buffer=nl.sbuf)
            nisa.nc_find_index8(dst=i, data=t, vals=w)
            nisa.dma_copy(dst=where, src=i)
            return where
    """, x=np.arange(16, dtype=np.float32)[None], v=np.array([[3, 100, 5, 0, 15, -1, 7, 7]], np.float32))
    assert r.outputs.tolist() == [[3, 0xFFFF, 5, 0, 15, 0xFFFF, 7, 7]]


def test_nc_match_replace8_replaces_first_occurrences_pairing_repeated_vals_from_the_last_slot():
    # the documented example: the seven 8s pair with positions 4..10 from slot 7 down to slot 1
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8], [5, 6, 7, 0, 0, 9, 1, 2, 3, 4, 4]], np.float32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8], [4, 9, 50, 4, 4, 0, 6, 1]], np.float32)
    r = sim("""
        @nki.jit
        def k(x, v):
            out = nl.ndarray((2, 11), dtype=x.dtype, buffer=nl.shared_hbm)
            where = nl.ndarray((2, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
            t = nl.ndarray((2, 11), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            w = nl.ndarray((2, 8), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=w, src=v)
            o = nl.ndarray((2, 11), dtype=x.dtype, buffer=nl.sbuf)
            i = nl.ndarray((2, 8), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.nc_match_replace8(dst=o, data=t, vals=w, imm=-1.0, dst_idx=i)
            nisa.dma_copy(dst=out, src=o)
            nisa.dma_copy(dst=where, src=i)
            return out, where
    """, x=data, v=vals)
    out, where = r.outputs
    # row 2: slot 0 wants a third 4 after slots 4 and 3 took both; no 50 at all. A val with no
    # occurrence left gives the index dtype's all-ones, as nc_find_index8 does
    none = 0xFFFFFFFF
    assert where.tolist() == [[2, 10, 9, 8, 7, 6, 5, 4], [none, 5, none, 10, 9, 3, 1, 6]]
    assert out.tolist() == [[1, 2, -1, 4, -1, -1, -1, -1, -1, -1, -1], [5, -1, 7, -1, 0, -1, -1, 2, 3, -1, -1]]


def test_nc_n_gather_picks_each_partitions_own_flattened_elements():
    x = RNG.standard_normal((4, 2, 8)).astype(np.float32)
    at = RNG.integers(0, 16, size=(4, 5)).astype(np.uint32)
    body = """
        @nki.jit
        def k(x, at):
            out = nl.ndarray((4, 5), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((4, 2, 8), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            i = nl.ndarray((4, 5), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.dma_copy(dst=i, src=at)
            o = nl.ndarray((4, 5), dtype=x.dtype, buffer=nl.sbuf)
            nisa.nc_n_gather(dst=o, data=t, indices=i)
            nisa.dma_copy(dst=out, src=o)
            return out
    """
    r = sim(body, x=x, at=at)
    np.testing.assert_array_equal(r.outputs, np.take_along_axis(x.reshape(4, 16), at.astype(np.int64), axis=1))
    assert [i.engine.value for i in r.trace if i.opcode == "nc_n_gather"] == ["gpsimd"]
    at[2, 3] = 16
    with pytest.raises(KernelError, match="index 16 at partition 2 is past data's 16 elements"):
        sim(body, x=x, at=at)


def test_shared_constant_loads_an_npy_file_a_host_function_wrote(tmp_path):
    table = RNG.standard_normal((8, 4)).astype(np.float32)
    np.save(tmp_path / "table.npy", table)
    body = """
        @nki.jit
        def k(x):
            out = nl.ndarray((8, 4), dtype=x.dtype, buffer=nl.shared_hbm)
            c = nl.shared_constant(PATH)
            t = nl.ndarray((8, 4), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=c)
            nisa.dma_copy(dst=out, src=t)
            return out
    """
    r = sim(body.replace("PATH", repr(str(tmp_path / "table.npy"))), x=table)
    np.testing.assert_array_equal(r.outputs, table)
    with pytest.raises(KernelError, match="shared_constant: cannot load the array file .*missing.npy"):
        sim(body.replace("PATH", repr(str(tmp_path / "missing.npy"))), x=table)


def test_a_dma_casts_between_float_and_integer_dtypes():
    r = sim("""
        @nki.jit
        def k(x):
            out = nl.ndarray((4, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
            t = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(dst=out, src=t)
            return out
    """, x=np.arange(32, dtype=np.float32).reshape(4, 8))
    assert r.outputs.dtype == np.uint32 and r.outputs.tolist() == np.arange(32).reshape(4, 8).tolist()


def test_dynamic_range_over_a_register_loaded_from_a_tensor_with_scalar_offset_access():
    x = RNG.standard_normal((4 * 16, 8)).astype(np.float32)
    r = sim("""
        @nki.jit
        def k(x, n):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=x)
            n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=n_sb, src=n)
            count = nisa.register_alloc()
            nisa.register_load(count, n_sb)
            row = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.memset(dst=row, value=0)
            for _ in nl.dynamic_range(0, count, 1):
                t = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x.ap(pattern=[[8, 16], [1, 8]], offset=0, scalar_offset=row, indirect_dim=0))
                nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
                nisa.dma_copy(dst=out.ap(pattern=[[8, 16], [1, 8]], offset=0, scalar_offset=row, indirect_dim=0), src=t)
                nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=16)
            return out
    """, x=x, n=np.array([[3]], np.int32))
    want = x.copy()
    want[:48] *= 2  # three tiles of 16 rows, the fourth left as copied
    np.testing.assert_array_equal(r.outputs, want)


def test_registers_hold_constants_feed_while_loops_and_refuse_unset_reads():
    r = sim("""
        @nki.jit
        def k(x):
            out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
            acc = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
            nisa.memset(dst=acc, value=0)
            left = nisa.register_alloc(3)
            other = nisa.register_alloc()
            nisa.register_move(other, left)
            while other:
                nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1)
                nisa.register_move(other, 0)
            for _ in nl.dynamic_range(left):
                nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=10)
            nisa.dma_copy(dst=out, src=acc)
            return out
    """, x=np.zeros((1, 1), np.float32))
    assert r.outputs.tolist() == [[31] * 4]
    with pytest.raises(KernelError, match="read before any value"):
        sim("""
            @nki.jit
            def k(x):
                for _ in nl.dynamic_range(nisa.register_alloc()):
                    pass
                return x
        """, x=np.zeros((1, 1), np.float32))


def test_abs_as_the_alu_op_of_tensor_scalar_reduce_gives_the_row_abs_max():
    x = RNG.standard_normal((8, 32)).astype(np.float32)
    r = sim("""
        @nki.jit
        def k(x):
            out = nl.ndarray((8, 1), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((8, 32), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            a = nl.ndarray((8, 32), dtype=x.dtype, buffer=nl.sbuf)
            m = nl.ndarray((8, 1), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar_reduce(dst=a, data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.maximum, reduce_res=m)
            nisa.dma_copy(dst=out, src=m)
            return out
    """, x=x)
    np.testing.assert_array_equal(r.outputs, np.abs(x).max(axis=1, keepdims=True))


def test_access_pattern_reinterprets_bytes_for_reading_and_refuses_writes_through_them():
    import ml_dtypes

    x = RNG.standard_normal((4, 2)).astype(np.float32)
    body = """
        @nki.jit
        def k(x):
            out = nl.ndarray((4, 8), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
            t = nl.ndarray((4, 2), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(DST, SRC)
            return out
    """
    r = sim(body.replace("DST", "dst=out").replace("SRC", "src=t.ap(pattern=[[8, 4], [1, 8]], dtype=nl.float8_e4m3)"), x=x)
    np.testing.assert_array_equal(r.outputs.view(np.uint8), x.view(np.uint8))
    assert r.outputs.dtype == np.dtype(ml_dtypes.float8_e4m3)
    with pytest.raises(KernelError, match="cannot write through a reinterpret-cast view"):
        sim(body.replace("nisa.dma_copy(DST, SRC)", "nisa.memset(dst=t.ap(pattern=[[8, 4], [1, 8]], "
                         "dtype=nl.float8_e4m3), value=0.0)"), x=x)


def test_an_input_given_as_a_strided_numpy_view_is_a_row_major_hbm_tensor():
    x = RNG.standard_normal((32, 8)).astype(np.float32).T  # a transposed view: not C-contiguous
    r = sim("""
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x.ap(pattern=[[32, 8], [1, 32]]))
            nisa.dma_copy(dst=out, src=t)
            return out
    """, x=x)
    np.testing.assert_array_equal(r.outputs, x)
