"""A kernel file is Python code: the sandbox (simulator/sandbox.py) runs each simulation in a child
process, so a kernel that hangs, eats memory or exits the interpreter is one KernelError, and the
caller (and a normal kernel after it) goes on."""
import os
import resource
import time

import numpy as np
import pytest

from axon.errors import KernelError
from axon.targets.trainium.runner import run
from axon.targets.trainium.simulator import sandbox

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs fork")

HEADER = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n\n\n@nki.jit\ndef kern(x):\n"
NORMAL = HEADER + """    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
"""
X = {"x": np.arange(128 * 4, dtype=np.float32).reshape(128, 4)}


def body(text):
    return HEADER + "".join("    " + line + "\n" for line in text.strip().splitlines())


def failing(source, **limits):
    start = time.monotonic()
    with pytest.raises(KernelError) as info:
        run(source, X, **limits)
    message = str(info.value)
    assert "\n" not in message
    return message, time.monotonic() - start


@pytest.fixture(autouse=True)
def the_caller_goes_on():
    yield
    report = run(NORMAL, X)  # after every bad kernel, in the same process
    assert np.array_equal(report.outputs, X["x"])


def test_a_sleeping_kernel_stops_at_the_timeout():
    message, took = failing(body("import time\ntime.sleep(60)\nreturn x"), timeout_s=1)
    assert "1 s wall-clock limit" in message and "kernel.py:9" in message
    assert took < 3


def test_a_killed_run_of_kernel_text_leaves_no_file_behind(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the child would write one
    source = body("while True:\n    try:\n        time.sleep(0.01)\n    except BaseException:\n        pass")
    failing(source.replace("import nki\n", "import nki\nimport time\n", 1), timeout_s=1)  # killed
    assert list(tmp_path.iterdir()) == []


def test_a_kernel_that_catches_every_interrupt_is_killed():
    source = body("while True:\n    try:\n        time.sleep(0.01)\n    except BaseException:\n        pass")
    message, took = failing(source.replace("import nki\n", "import nki\nimport time\n", 1), timeout_s=1)
    assert "killed at the 1 s wall-clock limit" in message
    assert took < 4


def test_a_busy_loop_that_catches_everything_stops_at_the_cpu_limit():
    source = body("while True:\n    try:\n        pass\n    except BaseException:\n        pass")
    message, took = failing(source, timeout_s=60, cpu_s=1)
    assert "1 s CPU-time limit" in message
    assert took < 30  # 1 s of CPU, long before the wall-clock limit (even on a loaded machine)


def test_a_huge_sbuf_tile_fails_the_capacity_check_before_it_is_allocated():
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    message, took = failing(body("t = nl.ndarray((128, 10**7), dtype=nl.float32, buffer=nl.sbuf)\nreturn x"),
                            memory_mb=500)
    assert "SBUF capacity exceeded" in message and "kernel.py:8" in message
    assert took < 3
    # the child never touched the 5 GB the tile would take (and the 500 MB limit did not trip first)
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < max(before, 0) + 400 * 1024


def test_a_huge_psum_tile_fails_before_allocation():
    message, _ = failing(body("t = nl.ndarray((128, 10**8), dtype=nl.float32, buffer=nl.psum)\nreturn x"),
                         memory_mb=500)
    assert "PSUM capacity exceeded" in message


def test_a_python_loop_building_lists_hits_the_memory_limit():
    message, took = failing(body("acc = []\nfor i in range(10**9):\n    acc.append([i])\nreturn x"),
                            memory_mb=200, timeout_s=20)
    assert "200 MB memory limit" in message and "MemoryError" in message
    assert took < 15  # the memory limit, well before the 20 s wall clock (slack for a loaded machine)


@pytest.mark.parametrize("exit_call", ["os._exit(0)", "os._exit(3)"])
def test_os_exit_is_an_error_never_success(exit_call):
    message, _ = failing(body(f"import os\n{exit_call}\nreturn x"))
    assert "exits the interpreter" in message and "exit status" in message


@pytest.mark.parametrize("code", ["sys.exit(0)", "raise SystemExit", "sys.exit('bye')"])
def test_sys_exit_is_an_error(code):
    message, _ = failing(body(f"import sys\n{code}\nreturn x"))
    assert "exits the interpreter" in message and "kernel.py:9" in message


def test_exit_at_module_level_is_an_error():
    source = "import os\nos._exit(0)\n" + NORMAL
    message, _ = failing(source)
    assert "exits the interpreter" in message


def test_limits_travel_as_keywords_and_in_process_still_works():
    report = run(NORMAL, X, sandbox=False)
    assert np.array_equal(report.outputs, X["x"])
    with pytest.raises(Exception, match="timeout must be positive"):
        run(NORMAL, X, timeout_s=0)


def test_same_input_same_report_through_the_sandbox():
    a, b = run(NORMAL, X), run(NORMAL, X, sandbox=False)
    assert a.to_json() == b.to_json()


def test_a_bug_outside_the_kernel_comes_back_with_its_traceback():
    def broken():
        raise ValueError("not a kernel problem")

    with pytest.raises(RuntimeError, match="ValueError: not a kernel problem"):
        sandbox.call(broken, "label")


def test_selection_skips_a_hanging_candidate_and_ranks_the_rest(monkeypatch):
    from axon.search.select import ResultCache, rank
    from axon.targets.trainium.simulator import ShapeDtype
    from axon.targets.trainium.target import TrainiumTarget

    class Cand:
        def __init__(self, source):
            self.source = source

    target = TrainiumTarget("trn2")
    slow = Cand(body("import time\nwhile True:\n    try:\n        time.sleep(0.01)\n    except BaseException:\n        pass"))
    good = Cand(NORMAL)
    original = type(target).run

    def limited(self, source, inputs, timing_only, **kw):
        return original(self, source, inputs, timing_only, timeout_s=1, **kw)

    monkeypatch.setattr(type(target), "run", limited)
    start = time.monotonic()
    out = rank(target, [slow, good], {"x": ShapeDtype((128, 4), "float32")}, ResultCache(None), budget_s=60)
    assert time.monotonic() - start < 5
    assert out[0][0] is good and out[0][1].latency_ns < float("inf")
    assert out[1][0] is slow and "wall-clock limit" in out[1][1].error


HUGE_SCRATCH = body("""s = nl.ndarray((64, 2**28), dtype=nl.float32, buffer=nl.shared_hbm)
t = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.sbuf)
nisa.dma_copy(dst=t, src=x)
nisa.dma_copy(dst=s[0:64, 0:4], src=t[0:64, 0:4])
return x""")


def test_a_timing_only_run_maps_but_never_touches_a_huge_hbm_scratch():
    """64 GiB of HBM scratch under a 500 MB limit: a timing-only run moves no data, so the tensor's
    address space is let past the limit while it lives; a run with data still meets the limit."""
    from axon.targets.trainium.runner import InputSpec

    report = run(HUGE_SCRATCH, {"x": InputSpec((128, 4), "float32")}, timing_only=True, memory_mb=500)
    assert report.estimate.latency_ns > 0
    message, _ = failing(HUGE_SCRATCH, memory_mb=500)
    assert "500 MB memory limit" in message and "MemoryError" in message


def test_a_finished_run_is_read_after_its_deadline_when_the_caller_was_busy():
    """A check starts its kernel run, then computes the reference (tens of seconds at Llama-70B
    sizes): a run that finished in time, its answer larger than the pipe holds, is not killed for
    the time it waited to be read; a run that does not answer still is."""
    big = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: the child blocks on the full pipe
    answered = sandbox.start(lambda: big * 2, "big answer", sandbox.Limits(timeout_s=0.5))
    silent = sandbox.start(lambda: time.sleep(60), "silent", sandbox.Limits(timeout_s=0.5))
    time.sleep(2.0)  # the caller is busy past both deadlines
    assert np.array_equal(answered.result(), big * 2)
    with pytest.raises(KernelError, match="wall-clock limit"):
        silent.result()
