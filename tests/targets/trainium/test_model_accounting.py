"""Every estimate accounts for its whole trace: each instruction not folded is scheduled once and
every matmul FLOP is charged, or the model raises (an instruction left out reads as a saving).

The regression: on trn2 the model scheduled 2,985 of the 5,048 instructions of this attention
kernel at s = 4096 and reported 214 us with no error. Two engines finished within the model's
same-instant tolerance; the scheduler dispatched at the earlier time, found the later engine
still busy, and with its completion already consumed never offered it work again."""
import heapq
import json
import subprocess
import sys
from pathlib import Path

import pytest

from axon.errors import ModelError
from axon.targets.trainium import perfmodel
from axon.targets.trainium.hardware import TRN2
from axon.targets.trainium.runner import InputSpec, run

HERE = Path(__file__).resolve().parent
KERNEL = HERE / "sim_kernel_attention_dmajor.py"
D = 128


def _issued(s: int) -> int:
    """The instructions the kernel issues at size s, counted from its loops: per 512-row block two
    loads, q.T @ k (memset, matmul and copy per 128 x 128 tile), the softmax (3 per row tile, then
    4 transposes and a copy per 512 columns), v's transposes (one load, transpose and copy per
    tile), probs @ v.T (a memset, the matmuls, a copy and a store per row tile). The kernel's own
    nisa.memset calls are instructions the compiler keeps: none is folded into its matmul."""
    tiles = s // 128
    per_block = 2 + 4 * tiles * 3 + 4 * (3 + (s // 512) * 5) + 1 + tiles * 2 + 4 * (tiles + 3)
    return (s // 512) * per_block


def _estimate(s: int, target: str):
    inputs = {name: InputSpec((D, s), "bfloat16") for name in ("q", "k", "v")}
    return run(str(KERNEL), inputs, target=target, timing_only=True).estimate


@pytest.mark.parametrize("target", ["trn2", "trn1"])
@pytest.mark.parametrize("s", [1024, 4096])
def test_attention_every_instruction_scheduled_every_flop_charged(s, target):
    e = _estimate(s, target)
    assert (e.instructions, e.folded) == (_issued(s), 0)
    assert e.scheduled == e.instructions
    # q.T @ k is (s x d) @ (d x s), probs @ v.T is (s x s) @ (s x d): 2*M*N*K each
    assert e.flops == e.scheduled_flops == 2 * (s * s * D) + 2 * (s * D * s)
    # every matmul ran: TensorE was busy at least the FLOPs' time at peak, and no less than that
    # fits in the latency
    assert e.engine_busy_ns["tensor"] >= e.kernel_bound_compute_ns
    assert e.latency_ns >= e.engine_busy_ns["tensor"]


def test_simulate_json_reports_what_was_traced_and_what_was_scheduled():
    args = [a for name in ("q", "k", "v") for a in ("--input", f"{name}=128x4096:bfloat16")]
    r = subprocess.run([sys.executable, "-m", "axon", "simulate", str(KERNEL), "--target", "trn2",
                        "--timing-only", "--json", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["scheduled"] == out["instructions"] == _issued(4096)
    assert out["matmul_flops"] == out["scheduled_matmul_flops"] == 4 * 4096 * 4096 * D


def test_an_instruction_the_scheduler_never_places_is_an_error(monkeypatch):
    """The check runs on every estimate: a scheduler that never starts one instruction (here a
    stand-in for any such bug) makes the estimate fail instead of coming out shorter."""
    from axon.targets.trainium.simulator import ShapeDtype, load_kernel, simulate

    trace = simulate(load_kernel(str(KERNEL)), {n: ShapeDtype((D, 512), "bfloat16") for n in ("q", "k", "v")},
                     target="trn2", timing_only=True).trace
    refused = max(i for i, ins in enumerate(trace) if ins.opcode == "nc_matmul")
    choose = perfmodel._choose

    def never_the_last_matmul(eng, *args):
        chosen = choose(eng, *args)
        if chosen == refused:
            heapq.heappush(eng.ready, chosen)  # back unstarted, as if it were never eligible
            return None
        return chosen

    monkeypatch.setattr(perfmodel, "_choose", never_the_last_matmul)
    with pytest.raises(ModelError, match=rf"placed \d+ of \d+ instructions.*first unplaced: #{refused} nc_matmul"):
        perfmodel.estimate(trace, TRN2)
