"""On-chip capacity by liveness, and spilling (simulator/liveness.py): a block or temporary counts
only while it is live; a live set larger than SBUF/PSUM spills in user mode (DMAs in the trace,
reported) and is an error under strict capacity (Axon's own kernels)."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from axon.errors import KernelError
from axon.targets.trainium.hardware import get_target
from axon.targets.trainium.perfmodel import estimate
from axon.targets.trainium.runner import run
from axon.targets.trainium.simulator import simulate_source
from axon.targets.trainium.target import TrainiumTarget

NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
ROOT = Path(__file__).resolve().parents[3]

# 16 blocks of 32 KB per partition (512 KB: more than SBUF), each used in one iteration only;
# the temporaries of an iteration die with it
BLOCKS = NEW + textwrap.dedent("""
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((16, nl.par_dim(128), 8192), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(16):
        buf[i] = nl.load(x[i * 128:(i + 1) * 128, :])
        e = nl.exp(buf[i])
        nl.store(out[i * 128:(i + 1) * 128, :], value=e)
    return out
""")

# a chain of 64 KB temporaries held by Python names: only two are ever live at once
CHAIN = NEW + textwrap.dedent("""
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.tanh(a)
    c = nl.tanh(b)
    d = nl.tanh(c)
    e = nl.tanh(d)
    nl.store(out, value=e)
    return out
""")

# four 64 KB tiles (256 KB per partition) all live at once: more than trn2's 208 KB SBUF
WIDE = NEW + textwrap.dedent("""
@nki.jit
def k(x):
    out = nl.ndarray((128, 16384), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x[0])
    b = nl.load(x[1])
    c = nl.load(x[2])
    d = nl.load(x[3])
    s = nl.add(a, b)
    s = nl.add(s, c)
    s = nl.add(s, d)
    nl.store(out, value=s)
    return out
""")

# nine matmul results of one PSUM bank each, all read after the last: more than 8 banks
PSUM9 = NEW + textwrap.dedent("""
@nki.jit
def k(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    sa = nl.load(a)
    sb = nl.load(b)
    acc = nl.ndarray((9, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(9):
        acc[i] = nisa.nc_matmul(sa, sb)
    total = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(9):
        total[...] = nl.add(total, acc[i])
    nl.store(out, value=total)
    return out
""")

# a lazily zeroed PSUM tensor of 16 banks, each block accumulated and evacuated in its own
# iteration: its zeroing does not make every block live at the start
LAZY = NEW + textwrap.dedent("""
@nki.jit
def k(a, b):
    out = nl.ndarray((16, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    sa = nl.load(a)
    sb = nl.load(b)
    acc = nl.zeros((16, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum, lazy_initialization=True)
    for i in nl.affine_range(16):
        acc[i] += nisa.nc_matmul(sa, sb)
        res = nl.copy(acc[i])
        nl.store(out[i], value=res)
    return out
""")


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("src, shape", [(BLOCKS, (2048, 8192)), (CHAIN, (128, 16384))])
def test_dead_blocks_and_temporaries_are_not_live(src, shape):
    """Under the old rule (every block of a buffer, and every tile a Python name holds, live)
    these exceed SBUF; by liveness they fit, with no spill, even under strict capacity."""
    x = _x(*shape)
    r = simulate_source(src, "k", {"x": x}, strict_capacity=True)
    assert r.spills == r.reloads == r.spill_bytes == 0
    assert r.sbuf_peak_bytes <= 2 * 64 * 1024 + 4096
    want = np.exp(x) if src is BLOCKS else np.tanh(np.tanh(np.tanh(np.tanh(x))))
    np.testing.assert_allclose(r.outputs, want, rtol=1e-5)
    assert not any(i.extra.get("spill") for i in r.trace)


def test_a_live_set_larger_than_sbuf_spills_in_user_mode():
    x = _x(4, 128, 16384)
    r = simulate_source(WIDE, "k", {"x": x})
    assert r.sbuf_peak_bytes > get_target("trn2").memory.sbuf_bytes_per_partition
    assert r.spills >= 1 and r.reloads >= 1
    unit = 128 * 16384 * 4
    assert r.spill_bytes == r.spills * unit and r.reload_bytes == r.reloads * unit
    np.testing.assert_allclose(r.outputs, x.sum(axis=0), rtol=1e-5, atol=1e-5)
    spill = [i for i in r.trace if i.extra.get("spill")]
    assert len(spill) == r.spills + r.reloads and all(i.opcode == "dma_copy" for i in spill)
    # the spill traffic is timed: the same trace without its spill DMAs is faster
    hw = get_target("trn2")
    with_spill = estimate(r.trace, hw)
    without = estimate([i for i in r.trace if not i.extra.get("spill")], hw)
    assert with_spill.latency_ns > without.latency_ns
    assert with_spill.hbm_bytes == without.hbm_bytes + r.spill_bytes + r.reload_bytes


def test_the_same_kernel_fails_under_strict_capacity():
    with pytest.raises(KernelError, match=r"^<kernel>:11: SBUF capacity exceeded: live tiles need 262144 bytes "
                                          r"per partition, trn2 has 212984 \(strict capacity: no spilling\)"):
        simulate_source(WIDE, "k", {"x": _x(4, 128, 16384)}, strict_capacity=True)


def test_psum_spills_by_bank():
    a, b = _x(128, 128), _x(128, 512, seed=1)
    r = simulate_source(PSUM9, "k", {"a": a, "b": b})
    assert r.psum_peak_bytes == 9 * 2048 and r.spills >= 1 and r.reloads >= 1
    np.testing.assert_allclose(r.outputs, 9 * (a.T @ b), rtol=1e-4, atol=1e-3)
    with pytest.raises(KernelError, match=r"PSUM capacity exceeded: .*9 banks of 2048 B"):
        simulate_source(PSUM9, "k", {"a": a, "b": b}, strict_capacity=True)


def test_lazily_zeroed_psum_blocks_live_from_their_first_use():
    a, b = _x(128, 128), _x(128, 512, seed=1)
    r = simulate_source(LAZY, "k", {"a": a, "b": b}, strict_capacity=True)
    assert r.spills == 0 and r.psum_peak_bytes <= 2 * 2048
    np.testing.assert_allclose(r.outputs, np.broadcast_to(a.T @ b, (16, 128, 512)), rtol=1e-4, atol=1e-3)


def test_timing_only_mode_spills_the_same():
    from axon.targets.trainium.simulator import ShapeDtype

    data = simulate_source(WIDE, "k", {"x": _x(4, 128, 16384)})
    shapes = simulate_source(WIDE, "k", {"x": ShapeDtype((4, 128, 16384), "float32")}, timing_only=True)
    assert (shapes.spills, shapes.spill_bytes, shapes.reload_bytes) == (data.spills, data.spill_bytes, data.reload_bytes)


def test_axons_own_kernels_run_under_strict_capacity():
    """The target's run (selection, the benchmarks) is strict: a spill there is a defect."""
    t = TrainiumTarget("trn2")
    with pytest.raises(KernelError, match="SBUF capacity exceeded"):
        t.run(WIDE, {"x": _x(4, 128, 16384)}, timing_only=False)
    assert t.run(CHAIN, {"x": _x(128, 16384)}, timing_only=False).latency_ns > 0


def test_runner_reports_spills_in_json(tmp_path):
    path = tmp_path / "wide.py"
    path.write_text(WIDE)
    rep = run(str(path), {"x": _x(4, 128, 16384)})
    j = rep.to_json()
    assert j["spill_bytes"] > 0 and j["reload_bytes"] > 0 and j["spills"] >= 1
    assert j["sbuf_peak_bytes"] == 5 * 65536  # a, b, c, d and their first sum
    with pytest.raises(KernelError, match="strict capacity"):
        run(str(path), {"x": _x(4, 128, 16384)}, strict_capacity=True)


def test_cli_says_the_kernel_spilled(tmp_path):
    path = tmp_path / "wide.py"
    path.write_text(WIDE)
    args = [sys.executable, "-m", "axon", "simulate", str(path), "--input", "x=4x128x16384:float32"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "spilled" in r.stdout and "reloads" in r.stdout
    j = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert json.loads(j.stdout)["spill_bytes"] > 0
    strict = subprocess.run(args + ["--strict-capacity"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert strict.returncode == 2 and "SBUF capacity exceeded" in strict.stderr
