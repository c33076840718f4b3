"""Bad kernels and bad inputs: one clear error naming the kernel line and the rule."""
import re
import textwrap

import numpy as np
import pytest

from axon.errors import InputError, KernelError
from axon.targets.trainium.simulator import ShapeDtype, load_kernel, simulate_source

OLD = "from neuronxcc import nki\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"
NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
X = np.ones((128, 512), np.float32)


def expect_error(body, pattern, api=NEW, inputs=None, **options):
    """The kernel fails with KernelError '<kernel>:N: ...' where N is the line marked '# <-'."""
    src = api + textwrap.dedent(body)
    line = next(i for i, text in enumerate(src.splitlines(), 1) if "# <-" in text)
    with pytest.raises(KernelError) as info:
        simulate_source(src, "k", {"x": X} if inputs is None else inputs, **options)
    msg = str(info.value)
    assert msg.startswith(f"<kernel>:{line}: "), msg
    assert re.search(pattern, msg), msg
    assert "\n" not in msg
    return msg


def test_syntax_error_names_line(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(NEW + "@nki.jit\ndef k(x):\n    y = (1,\n    return y\n")
    with pytest.raises(KernelError, match=r"bad\.py:\d+: syntax error"):
        load_kernel(str(path))


def test_unknown_instruction():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.load(x)
        nisa.frobnicate(t)  # <-
    """, r"nki\.isa\.frobnicate is not supported")


def test_unknown_language_function_beta1():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.load(x)
        return nl.softmax_fancy(t)  # <-
    """, r"neuronxcc\.nki\.language\.softmax_fancy is not supported", api=OLD)


def test_partition_dimension_over_128():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)  # <-
    """, r"partition dimension 256 exceeds 128")


def test_load_over_128_partitions():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.load(x)  # <-
    """, r"partition dimension 200 exceeds 128", api=OLD, inputs={"x": np.ones((200, 4), np.float32)})


def test_matmul_result_into_sbuf():
    expect_error("""
    @nki.jit
    def k(x):
        a = nl.load(x[:, 0:128])
        b = nl.load(x[:, 0:512])
        r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(dst=r, stationary=a, moving=b)  # <-
    """, r"nc_matmul: the result must go to PSUM")


def test_matmul_operand_in_psum():
    expect_error("""
    @nki.jit
    def k(x):
        a = nl.load(x[:, 0:128])
        p = nisa.nc_transpose(a)
        b = nl.load(x[:, 0:512])
        r = nisa.nc_matmul(p, b)  # <-
    """, r"stationary must be in SBUF, got a PSUM tensor", api=OLD)


def test_matmul_free_size_limits():
    expect_error("""
    @nki.jit
    def k(x):
        a = nl.load(x[:, 0:128])
        b = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
        r = nisa.nc_matmul(a, b)  # <-
    """, r"moving free size 1024 exceeds 512", api=OLD)
    expect_error("""
    @nki.jit
    def k(x):
        a = nl.load(x[:, 0:256])
        r = nisa.nc_matmul(a, a)  # <-
    """, r"stationary free size 256 exceeds 128", api=OLD)


def test_matmul_result_must_fit_one_psum_bank():
    expect_error("""
    @nki.jit
    def k(x):
        a = nl.load(x[:, 0:128])
        b = nl.load(x[:, 0:512])
        p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p[:, 256:768], stationary=a, moving=b)  # <-
    """, r"must fit in one 2048-byte PSUM bank")


def test_matmul_tiling_mode_is_checked_as_the_isa_states_it():
    body = """
    @nki.jit
    def k(x):
        a = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[0:64, 0:64])
        p = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a, moving=a, {args})  # <-
    """
    cases = [("tile_position=(64, 0)", "must both be set"),
             ("tile_position=(32, 0), tile_size=(64, 128)", "starts at 32: a multiple of its size 64"),
             ("tile_position=(0, 0), tile_size=(32, 128)", "contraction size 64 exceeds the row tile size 32"),
             ("tile_position=(0, 96), tile_size=(64, 32)", "stationary free size 64 exceeds the column tile size 32"),
             ("tile_position=(0, 0), tile_size=(48, 128)", "a row tile of 48 PEs; trn2 slices its array into 128 or 64 or 32"),
             ("tile_position=(0, 64), tile_size=(128, 64), perf_mode=nisa.matmul_perf_mode.double_row",
              "double_row performance mode cannot be combined with column tiling")]
    for args, pattern in cases:
        expect_error(body.format(args=args), pattern, target="trn2")
    # 32-PE tiles are a NeuronCore-v3 feature
    expect_error(body.format(args="tile_position=(0, 0), tile_size=(64, 32)"), "trn1 slices its array into 128 or 64",
                 target="trn1")


def test_uninitialised_read():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        u = nl.exp(t)  # <-
    """, r"reads uninitialised SBUF data", api=OLD)


def test_uninitialised_read_in_timing_only_mode():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        u = nl.exp(t)  # <-
    """, r"reads uninitialised SBUF data", api=OLD,
        inputs={"x": ShapeDtype((128, 512), "float32")}, timing_only=True)


def test_storing_partly_uninitialised_tile():
    expect_error("""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 0:256], src=x[:, 0:256])
        nisa.dma_copy(dst=out, src=t)  # <-
        return out
    """, r"stores uninitialised data to HBM \(32768 elements")


def test_returning_unwritten_output():
    expect_error("""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:256], value=nl.load(x[:, 0:256]))
        return out  # <-
    """, r"returns .* 32768 elements never written")


def test_out_of_bounds_without_mask():
    expect_error("""
    @nki.jit
    def k(x):
        i = nl.arange(128)[:, None]
        j = nl.arange(512)[None, :]
        t = nl.load(x[i + 64, j])  # <-
    """, r"reads out of bounds of a HBM tensor of shape \(128, 512\) \(mask those elements off\)", api=OLD)


def test_slice_out_of_bounds():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.load(x[0:128, 256:1024])  # <-
    """, r"slice 256:1024 is out of bounds for axis 1 of size 512")


def test_partition_start_alignment():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.load(x)
        u = nl.exp(t[10:20, :])  # <-
    """, r"starts at partition 10; a partition start must be 0, 32, 64 or 96", api=OLD)
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.load(x)
        u = nl.exp(t[32:96, :])  # <-
    """, r"33-64 partitions must start at 0 or 64", api=OLD)


def test_sbuf_capacity_of_live_tiles():
    # strict capacity (Axon's own kernels): the error names the first instruction where the live
    # tiles exceed SBUF
    expect_error("""
    @nki.jit
    def k(x):
        a = nl.ndarray((128, 30000), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 30000), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=a, value=1.0)
        nisa.memset(dst=b, value=2.0)
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)  # <-
    """, r"SBUF capacity exceeded: live tiles need 240000 bytes per partition, trn2 has 212984 "
         r"\(strict capacity: no spilling\)", strict_capacity=True)


def test_sbuf_released_at_end_of_iteration():
    src = NEW + textwrap.dedent("""
    @nki.jit
    def k(x):
        for i in nl.affine_range(4):
            a = nl.ndarray((128, 30000), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=a[:, 0:512], src=x)
    """)
    r = simulate_source(src, "k", {"x": X}, strict_capacity=True)
    assert r.sbuf_peak_bytes == 120000


def test_psum_capacity_in_banks():
    expect_error("""
    @nki.jit
    def k(x):
        tiles = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(8)]
        extra = nl.ndarray((128, 10), dtype=nl.float32, buffer=nl.psum)
        xs = nl.load(x)
        for t in tiles:
            nisa.tensor_copy(dst=t, src=xs)
        nisa.tensor_copy(dst=extra, src=xs[:, 0:10])  # <-
        for t in tiles:
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=extra[:, 0:1])
    """, r"PSUM capacity exceeded: .*9 banks of 2048 B", strict_capacity=True)


def test_vector_free_size_limit_in_psum():
    expect_error("""
    @nki.jit
    def k(x):
        p = nl.ndarray((128, 4096 + 8), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.memset(dst=p, value=0.0)  # <-
    """, r"4104 elements per partition, more than the 4096 allowed in PSUM")


def test_instruction_cap_stops_runaway_loop():
    expect_error("""
    @nki.jit
    def k(x):
        while True:
            t = nl.load(x)  # <-
    """, r"more than 1000 instructions", api=OLD, max_instructions=1000)


def test_wall_clock_limit_stops_pure_python_loop():
    src = NEW + textwrap.dedent("""
    @nki.jit
    def k(x):
        n = 0
        while True:
            n += 1
    """)
    with pytest.raises(KernelError) as info:
        simulate_source(src, "k", {"x": X}, time_limit_s=0.5)
    # the interrupt lands on one of the loop's two lines
    assert re.match(r"<kernel>:(8|9): kernel did not finish within the 0.5 s wall-clock limit "
                    r"\(infinite loop\?\)$", str(info.value)), str(info.value)


def test_python_error_in_kernel_names_line():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.load(x)
        return undefined_name  # <-
    """, r"NameError: name 'undefined_name' is not defined")


def test_branching_on_tile_data_is_rejected():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.load(x)
        if t:  # <-
            pass
    """, r"kernels cannot branch on data")


def test_bad_inputs():
    src = NEW + "@nki.jit\ndef k(x):\n    return x\n"
    with pytest.raises(InputError, match="needs inputs: x"):
        simulate_source(src, "k", {})
    with pytest.raises(InputError, match="no parameter"):
        simulate_source(src, "k", {"x": X, "y": X})
    with pytest.raises(InputError, match="float64 is not an NKI data type"):
        simulate_source(src, "k", {"x": np.ones((2, 2))})
    with pytest.raises(InputError, match="timing_only"):
        simulate_source(src, "k", {"x": ShapeDtype((2, 2))})
    with pytest.raises(InputError, match="unknown Trainium target"):
        simulate_source(src, "k", {"x": X}, target="trn9")


def test_load_kernel_names_missing_file_and_function(tmp_path):
    with pytest.raises(InputError, match="cannot read kernel file"):
        load_kernel(str(tmp_path / "nope.py"))
    path = tmp_path / "two.py"
    path.write_text(NEW + "@nki.jit\ndef a(x):\n    return x\n@nki.jit\ndef b(x):\n    return x\n")
    with pytest.raises(KernelError, match=r"several kernels \(a, b\)"):
        load_kernel(str(path))
    assert load_kernel(str(path), "b").params == ["x"]
    with pytest.raises(KernelError, match="no function named 'c'"):
        load_kernel(str(path), "c")


def test_a_bitvec_operator_on_floats_is_an_error():
    expect_error("""
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=t, op0=nl.bitwise_and, operand0=0x7FFFFFFF)  # <-
        return r
    """, r"nl\.bitwise_and treats elements as bit patterns and needs integer operands; data is float32")
