"""Per-simulation cost of the sandbox (simulator/sandbox.py): a tiny timing-only kernel through
the target's `run` (what selection calls per candidate), in-process and in a forked child.

    .venv/bin/python benchmarks/sandbox_overhead.py [RUNS]
"""
import statistics
import sys
import time

from axon.targets.trainium.simulator import ShapeDtype
from axon.targets.trainium.target import TrainiumTarget

KERNEL = """import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
"""


def main(runs: int) -> None:
    target = TrainiumTarget("trn2")
    inputs = {"x": ShapeDtype((128, 512), "float32")}
    times = {False: [], True: []}
    for _ in range(runs):
        for sandbox in (False, True):
            start = time.perf_counter()
            target.run(KERNEL, inputs, True, sandbox=sandbox)
            times[sandbox].append((time.perf_counter() - start) * 1e3)
    for sandbox, ts in times.items():
        print(f"{'sandboxed ' if sandbox else 'in-process'}  min {min(ts):6.2f} ms  median {statistics.median(ts):6.2f} ms")
    print(f"overhead    min {min(times[True]) - min(times[False]):6.2f} ms  "
          f"median {statistics.median(times[True]) - statistics.median(times[False]):6.2f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
