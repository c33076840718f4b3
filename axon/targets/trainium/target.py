"""The Trainium target as the shared stages see it: limits, synthesizer, emitter, runner.

Tiling, selection and `optimize` talk to a target only through this object's methods; a CPU
target provides the same ones.
"""
from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from axon.targets.trainium.hardware import HardwareDescription, get_target
from axon.targets.trainium.simulator.sandbox import sandboxed, source_label
from axon.tiling.space import Limits


@dataclass
class Measured:
    latency_ns: float
    outputs: object  # arrays, or None for timing-only runs
    estimate: object  # the model's Estimate (its kernel bound is the kernel's own, not the program's)
    work: int = 0  # instructions simulated: what the run cost, as selection's budget counts it
    exact: bool = True  # False: a loop-sampled latency (sampled_timing.py), not the full path's
    floors: tuple = ()  # sampled runs: (work spent, floor of the latency) at each estimate
    stopped: bool = False  # a floor passed `stop_above_ns`: latency_ns is that floor


class TrainiumTarget:
    def __init__(self, name: str = "trn2"):
        self.hw: HardwareDescription = get_target(name)
        self.name = self.hw.name
        self.kernel_suffix = ".py"
        self.dma_transpose = self.name == "trn2"  # DMA transpose is a NeuronCore-v3 feature
        # Vector and GpSimd take turns on SBUF on NeuronCore-v2, so spreading work over them pays on v3
        # only; v3's Scalar Engine also runs tensor_scalar and tensor_copy [isa tensor_copy]
        self.engine_balance = self.name == "trn2"

    def limits(self) -> Limits:
        m, t = self.hw.memory, self.hw.tiles
        return Limits(partitions=t.pmax, contraction_max=t.matmul_contraction_max,
                      stationary_free_max=t.matmul_stationary_free_max, moving_free_max=t.matmul_moving_free_max,
                      free_max=t.free_max_sbuf_elems, onchip_bytes=m.sbuf_bytes_per_partition,
                      accum_bank_bytes=m.psum_bank_bytes, accum_banks=m.psum_banks)

    def emitter(self, dtype: str):
        from axon.targets.trainium.emitter import NkiEmitter

        return NkiEmitter(dtype, self.hw, scalar_copies=self.engine_balance,
                          immediate_bias=self.name != "trn1")

    def synthesizer(self):
        """The synthesis stage over this target's instruction specs: the only source of lowerings
        (without a verifier its lowerings are numerically checked and marked unproved)."""
        from axon.synthesis import Synthesizer
        from axon.targets.trainium import isa

        try:
            from axon.verification import Verifier

            verifier = Verifier()
        except ImportError:
            verifier = False
        from dataclasses import replace

        from axon.targets.trainium.emitter import EMITTABLE

        # only instructions this target's emitter (and the simulator behind it) can print
        full = getattr(isa, f"{self.name.upper()}_ISA")
        usable = replace(full, instructions=tuple(s for s in full.instructions if s.name in EMITTABLE))
        return Synthesizer(usable, verifier)

    def can_emit(self, lowering) -> bool:
        from axon.targets.trainium.emitter import EMITTABLE

        return all(s.instruction in EMITTABLE for s in lowering.steps)

    @sandboxed(lambda self, source, *a, **k: source_label(source))  # timeout_s, memory_mb: sandbox.py
    def run(self, source: str, inputs: dict, timing_only: bool, keep_schedule: bool = False,
            partial: bool = False, sampled: bool = False, stop_above_ns: float = math.inf,
            timed: bool = True) -> Measured:
        """`partial`: the kernel may leave output elements unwritten (a check's kernel on some row
        blocks); they come back NaN. `sampled` (timing only): the latency from runs that cut long
        loops short (sampled_timing.py; no schedule), what ranking uses, stopped once its floor
        reaches `stop_above_ns`. `timed=False`: outputs only, no latency (a numerical check's run:
        ranking timed the kernel already, and at Llama sizes the model adds seconds to the run)."""
        from axon.targets.trainium.perfmodel import estimate
        from axon.targets.trainium.sampled_timing import sampled_latency
        from axon.targets.trainium.simulator import ShapeDtype, load_source, simulate

        args = {k: (ShapeDtype(v.shape, _dtype_name(v.dtype)) if timing_only else v) for k, v in inputs.items()}
        # Axon's own kernel: more live SBUF/PSUM than the target has is a defect, not a spill, a
        # call outside the documented NKI API is an error (nki_api.py), and a computation it
        # repeats costs its time again (no credit for the compiler removing it)
        # a check's kernel on part of its blocks may read what it skipped (a row pass reads whole
        # rows): NaN there, not an error
        strict = dict(partial=partial, strict_capacity=True, strict_api=True, reads_unwritten=partial)
        kernel = load_source(source)
        if sampled and timing_only:
            s = sampled_latency(kernel, args, self.hw, serve_repeats=False, stop_above_ns=stop_above_ns, **strict)
            return Measured(s.latency_ns, None, None, s.work, s.exact, s.floors, s.stopped)
        res = simulate(kernel, args, target=self.name, timing_only=timing_only, **strict)
        est = estimate(res.trace, self.hw, keep_schedule=keep_schedule, serve_repeats=False) if timed else None
        outs = None
        if not timing_only:
            o = res.outputs
            outs = list(o) if isinstance(o, (tuple, list)) else [o]
        return Measured(est.latency_ns if timed else math.nan, outs, est, len(res.trace))

    def full_timing_work(self, source: str) -> Optional[int]:
        """What the full timing-only path costs on `source`, in instructions simulated and timed
        (the ranking budget's unit), counted from the source; None where the source does not say
        (loops over computed bounds, calls other than `nisa.*`)."""
        from axon.targets.trainium.sampled_timing import static_counts

        counts = static_counts(source)
        return None if counts is None else counts[2]

    def peaks(self, dtype: str):
        """The roofline's rates at `dtype`: TensorE peak and one core's HBM bandwidth (the
        bandwidth, not the lower DMA aggregate: the tutorial's ridge point agrees [mm-tut])."""
        from axon.search.roofline import Peaks
        from axon.targets.trainium.hardware import matmul_rate_class

        return Peaks(matmul_flops_per_ns=self.hw.tensor_peak_flops[matmul_rate_class(dtype)] / 1e9,
                     memory_bytes_per_ns=self.hw.hbm_bytes_per_ns)

    def model_fingerprint(self) -> str:
        return model_fingerprint()

    def launcher(self, module: str, entry: str, shapes: dict, dtype: str, pipeline: bool = False) -> str:
        """The file written beside a kernel: calling it from PyTorch on Neuron and from JAX."""
        from axon.targets.trainium.launch import launcher_source

        return launcher_source(module, entry, shapes, dtype, pipeline)

    def write_trace(self, measured: Measured, path: Path) -> None:
        from axon.targets.trainium.perfmodel import write_perfetto

        write_perfetto(measured.estimate, path)


@functools.cache
def model_fingerprint() -> str:
    """A hash of the sources that turn a kernel into a latency: the simulator (it records the
    instruction trace), the trace format, the hardware description, the API table that decides
    which of Axon's kernels run at all (nki_api.py), the performance model and the loop-sampled
    timing that extends it (sampled_timing.py: its latencies are what ranking caches).
    Cached results and benchmark rows carry it, so a model change never reuses old numbers."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in [root / "hardware.py", root / "perfmodel.py", root / "sampled_timing.py", root / "trace.py",
                 root / "nki_api.py", *sorted((root / "simulator").glob("*.py"))]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def _dtype_name(dt) -> str:
    return np.dtype(dt).name if np.dtype(dt).kind != "V" else "bfloat16"
