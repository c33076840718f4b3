"""Hardware descriptions of NeuronCore-v2 (trn1) and NeuronCore-v3 (trn2), as data.

One source of truth for every Trainium number: the simulator's rule checks, the performance
model, tiling and emission all read from here. Each number names its source; where sources
disagree the choice and the reason stand next to the number.
Sources: AWS Neuron docs (nki/guides/architecture/trainium_inferentia2_arch.rst,
trainium2_arch.rst, nki/api/nki.isa.rst, nki.isa docstrings at docs tag v2.26.0,
nki-dma-overview.rst, nki-dma-bandwidth-guide.rst), as gathered in shared/trainium.md.
Short tags in the comments: [arch] architecture guide, [isa] nki.isa docstring "estimated
instruction cost" notes, [dma-bw] DMA bandwidth guide, [perf] NKI performance guide,
[mm-tut] the NKI matrix-multiplication tutorial.

Invariant: this module holds numbers and formulas as data only; the performance model
(`perfmodel.py`) is the one interpreter of `CostFormula` and `DmaSpec`.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from axon.targets.trainium.trace import Engine


@dataclass(frozen=True)
class MemoryLimits:
    partitions: int  # SBUF/PSUM partition count (nl.tile_size.pmax) [arch guide]
    sbuf_bytes_per_partition: int  # usable SBUF bytes per partition [nki.language docs]
    psum_bytes_per_partition: int  # 16 KiB per partition [arch guide]
    psum_bank_bytes: int  # 2 KiB per partition per bank = 512 fp32 [arch guide]
    psum_banks: int  # 8 banks [arch guide]


@dataclass(frozen=True)
class TileLimits:
    """nl.tile_size and per-instruction size limits [nki.language.tile_size, nki.isa docstrings]."""

    pmax: int = 128  # partition dimension of any tile
    matmul_stationary_free_max: int = 128  # gemm_stationary_fmax
    matmul_moving_free_max: int = 512  # gemm_moving_fmax (one PSUM bank of fp32)
    matmul_contraction_max: int = 128  # K on the partition axis per nc_matmul
    free_max_sbuf_elems: int = 65536  # Vector/Scalar engine free size reading SBUF
    free_max_psum_elems: int = 4096  # Vector/Scalar engine free size reading PSUM
    bn_stats_free_max: int = 512
    # Tensor Engine tiling mode: the PE array's rows and columns sliced into tiles of these sizes,
    # on which matmuls with a smaller stationary tile run side by side: 2 x 64 on NeuronCore-v2,
    # also 4 x 32 from v3 [isa nc_matmul, "Tiling mode"]
    pe_tile_sizes: tuple = (128, 64)


# ---------------------------------------------------------------------------------------------
# Engines and per-instruction costs
# ---------------------------------------------------------------------------------------------

MIN_II = 64  # minimum initiation interval of a Vector/Scalar/GpSimd instruction, cycles [isa]


class CostBasis(enum.Enum):
    """What N in a cost formula is measured from."""

    FREE = "free"  # N = elements per partition the instruction processes
    MATMUL = "matmul"  # N = max(min(64, stationary free size), moving free size) [isa nc_matmul]
    TRANSPOSE = "transpose"  # N = max(partitions, min(64, free size)) [isa nc_transpose]


class FastPath(enum.Enum):
    """Conditions under which an instruction runs at `fast_mult` instead of `mult` cycles/elem."""

    NONE = "none"
    # tensor_tensor on the Vector Engine (the docstring's cost table is "when it runs on Vector
    # Engine"; GpSimd never gets it): N cycles when one input is in PSUM and the other in SBUF, or
    # when both inputs are in SBUF, inputs and output are all bfloat16 (not fp16), the op is
    # add/multiply/subtract and the inputs are contiguous along the free dimension [isa]
    PSUM_INPUT_OR_HALF_ARITH = "psum_input_or_half_arith"
    # tensor_reduce: N/2 when input and output are both bfloat16 and the op is add or max [isa]
    HALF_ADD_MAX = "half_add_max"


@dataclass(frozen=True)
class CostFormula:
    """Engine cycles of one instruction: max(floor, mult * N) * dtype factor + add.

    `fp32_mult` applies when the instruction's dtype is float32 (TensorE runs fp32 at 1/4 rate).
    The model adds the engine's fixed access-start cost and the static overhead on top.
    """

    basis: CostBasis = CostBasis.FREE
    mult: float = 1.0
    floor: int = 0
    add: int = 0
    fp32_mult: float = 1.0
    fast_mult: float = 1.0
    fast_when: FastPath = FastPath.NONE
    source: str = "isa"


# Per-opcode cost formulas, keyed by the nki.isa instruction name the trace records [isa, as
# tabulated in shared/trainium.md "Instruction costs"]. Opcodes not listed cost DEFAULT_COST.
COSTS: dict[str, CostFormula] = {
    # max(min(64, N_stationary), N_moving) for bf16/fp16/tf32/fp8; 4x for fp32 [isa nc_matmul]
    "nc_matmul": CostFormula(basis=CostBasis.MATMUL, fp32_mult=4.0),
    "nc_transpose": CostFormula(basis=CostBasis.TRANSPOSE),  # TensorE transpose [isa]
    "activation": CostFormula(floor=MIN_II),  # scale and bias are free [isa]
    "activation_reduce": CostFormula(floor=MIN_II, add=MIN_II),
    "tensor_scalar_reduce": CostFormula(floor=MIN_II, add=MIN_II),
    "tensor_scalar": CostFormula(floor=MIN_II),  # one or two ops cost the same [isa]
    "tensor_copy": CostFormula(floor=MIN_II),
    "tensor_copy_predicated": CostFormula(mult=2.0, floor=MIN_II),  # SBUF in and out [isa]
    "select_reduce": CostFormula(mult=2.0, floor=MIN_II,
                                 source="assumed: two tiles read, as tensor_tensor; no [isa] figure"),
    # isa.SELECT as printed: tensor_scalar (N) + tensor_copy (N) + tensor_copy_predicated (2N)
    "select": CostFormula(mult=4.0, floor=MIN_II),
    "memset": CostFormula(floor=MIN_II),
    "tensor_tensor": CostFormula(mult=2.0, floor=MIN_II, fast_mult=1.0,
                                 fast_when=FastPath.PSUM_INPUT_OR_HALF_ARITH),
    "tensor_reduce": CostFormula(mult=1.0, fast_mult=0.5, fast_when=FastPath.HALF_ADD_MAX),
    "tensor_tensor_scan": CostFormula(mult=2.0, floor=MIN_II),
    "scalar_tensor_tensor": CostFormula(mult=2.0),
    "reciprocal": CostFormula(mult=8.0, floor=MIN_II),  # on VectorE [isa reciprocal]
    "reciprocal@scalar": CostFormula(floor=MIN_II),  # on ScalarE: max(MIN_II, N) [isa reciprocal]
    "iota": CostFormula(add=150),  # GpSimd: 150 + N [isa]
    "affine_select": CostFormula(add=150),
    # bn_aggr: max(MIN_II, 13 * N / 3), N = input elements per partition [isa bn_aggr docstring]
    "bn_aggr": CostFormula(mult=13.0 / 3.0, floor=MIN_II),
    # bn_stats: no cost figure in the docstrings; assumed a one-pass streaming Vector instruction
    "bn_stats": CostFormula(floor=MIN_II, source="assumed: streaming max(MIN_II, N), no [isa] figure"),
}
# Unknown opcodes: the common streaming cost max(MIN_II, N) (the cost of copy/tensor_scalar).
DEFAULT_COST = CostFormula(floor=MIN_II, source="default: streaming max(MIN_II, N)")


@dataclass(frozen=True)
class EngineSpec:
    clock_ghz: float
    # Fixed cycles to start any SBUF/PSUM access, paid by every instruction [isa rules of thumb:
    # "~60 cycles"]. TensorE uses its documented ~64-cycle matmul init latency instead [isa].
    access_start_cycles: int = 60


@dataclass(frozen=True)
class AccessRules:
    """SBUF/PSUM access facts [arch trainium_inferentia2_arch, "Performance Consideration"]."""

    # "When the most-minor F dimension stride is less than 16 bytes, SBUF/PSUM ... can supply a
    # peak bandwidth ...; if [it] exceeds 16 bytes, [it] will be half of the peak bandwidth, which
    # translates to roughly 50% performance hit on the instructions." Exactly 16 B is in neither
    # sentence; we read "less than 16 B" as the condition for peak, so 16 B and more halve.
    wide_stride_bytes: int = 16
    wide_stride_slowdown: float = 2.0  # applied to the streaming (N-proportional) part of the cost
    # NeuronCore-v2 only: "VectorE and GpSimdE cannot access SBUF in parallel", "VectorE and ScalarE
    # cannot access PSUM in parallel"; the compiler serialises such instructions [arch]. Each entry
    # is one shared port: (memory, engines whose instructions touching that memory take turns).
    shared_ports: tuple = ()


@dataclass(frozen=True)
class VectorPerfMode:
    """NeuronCore-v3's Vector Engine performance mode [arch trainium2_arch, "Vector Engine
    Performance Mode"]: the hardware detects it, no kernel asks for it. tensor_copy and
    tensor_scalar whose input and output are both bfloat16/float16 run 4x NeuronCore-v2's
    throughput when both are in SBUF with the innermost free dimension contiguous, 2x when both
    are in SBUF but strided, or contiguous with one of them in PSUM. (Its tensor_tensor 2x is the
    [isa] fast path of COSTS, which every target has.)"""

    opcodes: tuple = ("tensor_copy", "tensor_scalar")
    dtypes: tuple = ("bfloat16", "float16")
    sbuf_contiguous: float = 4.0
    partial: float = 2.0

    def speedup(self, opcode: str, in_dtype: str, out_dtype: str, psum: bool, contiguous: bool) -> float:
        """How many times faster than the [isa] cost the streaming part of the instruction runs."""
        if opcode not in self.opcodes or in_dtype not in self.dtypes or out_dtype not in self.dtypes:
            return 1.0
        if not psum:
            return self.sbuf_contiguous if contiguous else self.partial
        return self.partial if contiguous else 1.0


@dataclass(frozen=True)
class SchedulerRules:
    """What the model grants the Neuron compiler's instruction scheduler.

    Each engine runs one instruction stream, but the compiler orders it: instructions of different
    iterations of an nl.affine_range loop (declared free of loop-carried dependencies) may be
    interleaved; sequential_range iterations, and statements within one iteration, keep their
    order. The model places an instruction at the earliest time its dependencies and its engine
    allow, ahead of earlier-issued instructions of its engine only if those belong to one of the
    `affine_lookahead` previous iterations of an affine loop the two share. The window stands for
    the compiler's finite scheduling window and the buffers it can give a loop body's tiles: a
    lookahead of 2 is triple buffering (iteration t computes while t-1 drains and t-2's buffers are
    reused), the usual depth of the compiler's software pipelining; it is a modelling choice, not
    a documented number. Data dependencies through tiles always hold.
    """

    affine_lookahead: int = 2
    # Waiting instructions an engine looks at per decision (and earlier unstarted ones it checks a
    # candidate against): keeps the model near-linear in trace length; a real scheduler's window
    # is finite too.
    candidate_limit: int = 64
    # Loop-invariant loads: the compiler loads an HBM region that a kernel loads again and again
    # (and never writes) once and keeps it in SBUF, as long as those resident copies fit in this
    # share of SBUF per partition (the rest holds the kernel's working tiles). Fitted (see
    # CALIBRATION): NKIBench add_rmsnorm_matmul reads its 8 MB weight once on hardware (HBM read
    # 42.0 MB = x + z + w; its kernel loads w in every row block: 64 KiB per partition), while the
    # matmul tutorial's tiled kernel, whose re-read operands far exceed SBUF, is not hoisted
    # (51.80 ms, DMA-bound).
    hoist_sbuf_fraction: float = 0.5


@dataclass(frozen=True)
class OverheadRules:
    """Static per-instruction overhead [isa rules of thumb]: add ~100 cycles when N << 128 or
    when an instruction depends on the one just before it on the same engine."""

    static_cycles: int = 100
    # "N << 128": we read it as fewer than half the 128 lanes' worth of elements per partition.
    small_n_threshold: int = 64


# ---------------------------------------------------------------------------------------------
# DMA and HBM
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DmaSpec:
    """The DMA subsystem of one NeuronCore.

    Model (interpreted by perfmodel): a transfer holds one of `queues` queues for
    `fixed_ns + data time`; a free queue takes the ready transfer that comes first in program
    order (the order the compiler issued them in), so a late pass's loads, ready from the start,
    never hold back an earlier pass's stores. Data time is bytes / (bandwidth * efficiency), where
    bandwidth is the aggregate engine bandwidth (capped by HBM for transfers touching HBM) shared
    by all transfers in flight, and efficiency depends on the contiguous bytes per partition (the DMA packet):
    efficiency(s) = min(1, s / saturation_bytes) ** small_payload_exponent, a saturation curve
    that reaches the engines' peak at `saturation_bytes`.
    """

    engines: int  # DMA engines per core [dma-bw]
    queues: int  # queues the model schedules transfers on (16 per engine exist [arch])
    bytes_per_ns_per_engine: float  # [dma-bw]
    fixed_ns: float  # descriptor, semaphore and start cost per transfer [dma-bw]
    saturation_bytes: int  # payload per partition from which the engines run at peak [dma-bw]
    small_payload_exponent: float  # how fast efficiency falls below saturation (fitted)
    transpose_efficiency: float = 1.0  # DMA transpose throughput relative to a copy, HBM -> SBUF
    onchip_transpose_efficiency: float = 1.0  # the same, SBUF -> SBUF

    @property
    def bytes_per_ns(self) -> float:
        return self.engines * self.bytes_per_ns_per_engine

    def efficiency(self, contiguous_bytes: float) -> float:
        s = max(float(contiguous_bytes), 1.0)
        return min(1.0, s / self.saturation_bytes) ** self.small_payload_exponent


# Payload efficiency. The bandwidth guide gives a saturation curve and its end points, not a
# formula: < 256 B per partition "severely overhead-bound", 256 B - 2 KiB "improving but below
# peak", >= 2 KiB "approaches peak", >= 4 KiB "fully amortizes per-packet overhead and saturates
# the DMA engines" [dma-bw]. We take saturation at 4 KiB and a power law below it; the exponent is
# fitted (see CALIBRATION) to the matmul tutorial's DMA-bound tiled, hoist_load and block_free
# (1 KiB per partition rhs tiles at ~100 GB/s of 272 at their published latencies; tiled adds
# 256 B lhsT tiles): 0.6 puts them at +11%, -11% and -9%. e(256 B) = 0.19, e(1 KiB) = 0.44,
# e(2 KiB) = 0.66. The payload is the HBM-side contiguous run (perfmodel: NKIBench bmm's 256 B
# per partition loads of contiguous rows run at peak).
_DMA_SATURATION_BYTES = 4096
_DMA_SMALL_PAYLOAD_EXPONENT = 0.6


class DType(enum.Enum):
    """Peak-rate classes of the Tensor Engine."""

    HALF = "half"  # bfloat16, float16, tfloat32
    FP8 = "fp8"
    FP32 = "fp32"


def matmul_rate_class(dtype: str) -> DType:
    if dtype in ("float32", "fp32"):
        return DType.FP32
    if dtype.startswith("float8") or dtype.startswith("fp8"):
        return DType.FP8
    return DType.HALF


@dataclass(frozen=True)
class HardwareDescription:
    name: str  # "trn1" or "trn2"
    core: str  # "NeuronCore-v2" / "NeuronCore-v3"
    memory: MemoryLimits
    tiles: TileLimits
    engines: dict[Engine, EngineSpec] = field(default_factory=dict)
    dma: DmaSpec | None = None
    hbm_bytes_per_ns: float = 0.0  # HBM bandwidth available to one core (chip / cores)
    tensor_peak_flops: dict[DType, float] = field(default_factory=dict)  # per core, FLOP/s
    overhead: OverheadRules = OverheadRules()
    access: AccessRules = AccessRules()
    scheduler: SchedulerRules = SchedulerRules()
    # Fixed cost of one kernel launch (NEFF start and teardown) that neuron-profile's total_time
    # includes; reported as Estimate.launch_ns, outside latency_ns (see CALIBRATION).
    launch_ns: float = 0.0
    vector_perf_mode: VectorPerfMode | None = None  # NeuronCore-v3 and later

    def vector_speedup(self, opcode: str, in_dtype: str, out_dtype: str, psum: bool,
                       contiguous: bool = True) -> float:
        """The Vector Engine's performance-mode speed-up of one instruction (1.0 without it)."""
        mode = self.vector_perf_mode
        return mode.speedup(opcode, in_dtype, out_dtype, psum, contiguous) if mode else 1.0

    def clock_ghz(self, engine: Engine) -> float:
        return self.engines[engine].clock_ghz

    def issue_cycles(self, engine: Engine, cycles: float, size: int, back_to_back: bool = False) -> float:
        """An instruction's engine cycles from its formula's `cycles`: plus the engine's access
        start, and the static overhead when it streams few elements per partition (`size`) or
        waits on the instruction just before it."""
        cycles += self.engines[engine].access_start_cycles
        if size < self.overhead.small_n_threshold or back_to_back:
            cycles += self.overhead.static_cycles
        return cycles

    def instruction_ns(self, opcode: str, engine: Engine, size: int, fast: bool = False,
                       speedup: float = 1.0) -> float:
        """Time of one Vector/Scalar/GpSimd instruction of `size` elements per partition by its
        formula (`fast`: its fast path applies; `speedup`: the performance mode's) and the
        overheads of `issue_cycles`: what the performance model charges a contiguous bf16/fp32
        instruction, for placement decisions made before there is a trace."""
        f = self.cost(opcode, engine)
        stream = (f.fast_mult if fast else f.mult) * size / speedup
        return self.issue_cycles(engine, max(float(f.floor), stream) + f.add, size) / self.clock_ghz(engine)

    def cost(self, opcode: str, engine: Engine | None = None) -> CostFormula:
        """The opcode's formula; an "opcode@engine" entry, where the docs give one, wins."""
        if engine is not None:
            f = COSTS.get(f"{opcode}@{engine.value}")
            if f is not None:
                return f
        return COSTS.get(opcode, DEFAULT_COST)


def _peak(clock_ghz: float) -> float:
    # 128 x 128 systolic array, one multiply-add (2 FLOP) per PE per cycle at bf16 [arch].
    return 2 * 128 * 128 * clock_ghz * 1e9


TRN1 = HardwareDescription(
    name="trn1",
    core="NeuronCore-v2",
    # SBUF 24 MiB = 128 x 192 KiB; 180224 B per partition usable by kernels [nki.language.sbuf].
    memory=MemoryLimits(partitions=128, sbuf_bytes_per_partition=180224,
                        psum_bytes_per_partition=16384, psum_bank_bytes=2048, psum_banks=8),
    tiles=TileLimits(),
    engines={  # clocks [arch trainium_inferentia2_arch]
        Engine.TENSOR: EngineSpec(clock_ghz=2.8, access_start_cycles=64),
        Engine.VECTOR: EngineSpec(clock_ghz=1.12),
        Engine.SCALAR: EngineSpec(clock_ghz=1.4),
        Engine.GPSIMD: EngineSpec(clock_ghz=1.4),
    },
    # 16 engines x 17 B/ns = 272 GB/s [dma-bw]. The arch guide's "27 GiB/s per engine" would give
    # 464 GB/s, above the core's HBM share (410 GB/s); we take the newer bandwidth guide, which
    # gives per-engine figures for all generations in one table. Fixed cost ~1300 ns [dma-bw].
    dma=DmaSpec(engines=16, queues=16, bytes_per_ns_per_engine=17.0, fixed_ns=1300.0,
                saturation_bytes=_DMA_SATURATION_BYTES,
                small_payload_exponent=_DMA_SMALL_PAYLOAD_EXPONENT),
    # 820 GB/s per chip, 2 cores [arch]; the tutorial's ridge point 222 FLOP/B x 92 TFLOPS
    # = 414 GB/s agrees [mm-tut].
    hbm_bytes_per_ns=410.0,
    # 92 TFLOPS bf16/fp16/tf32, 23 fp32 per core [arch]; 2*128*128*2.8 GHz = 91.75 TFLOPS. No FP8
    # speed-up on v2 (performance mode unsupported [isa nc_matmul]).
    tensor_peak_flops={DType.HALF: _peak(2.8), DType.FP8: _peak(2.8), DType.FP32: _peak(2.8) / 4},
    launch_ns=456_000.0,  # fitted, see CALIBRATION
    # v2 SBUF/PSUM port sharing [arch]; v3 lifts both restrictions (trainium2_arch: no such rule).
    access=AccessRules(shared_ports=(("sbuf", (Engine.VECTOR, Engine.GPSIMD)),
                                     ("psum", (Engine.VECTOR, Engine.SCALAR)))),
)

TRN2 = HardwareDescription(
    name="trn2",
    core="NeuronCore-v3",
    # SBUF 28 MiB = 128 x 224 KiB; 212984 B per partition usable by kernels [nki.language.sbuf].
    memory=MemoryLimits(partitions=128, sbuf_bytes_per_partition=212984,
                        psum_bytes_per_partition=16384, psum_bank_bytes=2048, psum_banks=8),
    tiles=TileLimits(pe_tile_sizes=(128, 64, 32)),
    engines={  # clocks [arch trainium2_arch]
        Engine.TENSOR: EngineSpec(clock_ghz=2.4, access_start_cycles=64),
        Engine.VECTOR: EngineSpec(clock_ghz=0.96),
        Engine.SCALAR: EngineSpec(clock_ghz=1.2),
        Engine.GPSIMD: EngineSpec(clock_ghz=1.2),
    },
    # 16 engines x 23 B/ns = 368 GB/s [dma-bw]; ~600 ns fixed cost with hardware descriptor
    # generation [dma overview]: NKI DMAs from HBM use it on v3, so we take 600, not 1300.
    # DMA transpose runs at ~90% of copy throughput HBM->SBUF, ~50% SBUF->SBUF [arch trainium2_arch].
    dma=DmaSpec(engines=16, queues=16, bytes_per_ns_per_engine=23.0, fixed_ns=600.0,
                saturation_bytes=_DMA_SATURATION_BYTES,
                small_payload_exponent=_DMA_SMALL_PAYLOAD_EXPONENT, transpose_efficiency=0.9,
                onchip_transpose_efficiency=0.5),
    # 2.9 TB/s per chip, 8 cores [arch trainium2_arch]; one page says 3 TB/s. We keep the
    # architecture guide's number, the primary source for v3 (the two differ by 3%).
    hbm_bytes_per_ns=2900.0 / 8,
    # 79 TFLOPS bf16, 158 fp8 (double_row performance mode), 20 fp32 per core [arch].
    tensor_peak_flops={DType.HALF: _peak(2.4), DType.FP8: 2 * _peak(2.4), DType.FP32: _peak(2.4) / 4},
    vector_perf_mode=VectorPerfMode(),
)

# Parameters fitted to the calibration set (shared/fidelity.md), each with the rows it came from;
# benchmarks/calibrate.py prints this list with its table (benchmarks/results/calibration.md).
CALIBRATION: tuple[str, ...] = (
    "launch_ns (trn1) = 456 us: NEFF start/teardown in neuron-profile total_time; least squares of "
    "the relative error of (schedule latency + launch) over the seven NKIBench rows (add_rmsnorm_matmul, "
    "bmm, gqa_full, lora, mamba_M7168, rope_single_freq_apply, silu). Not in nki.benchmark latencies "
    "(the tutorial rows: mamba_v1 at 256 channels is 172.93 us in all).",
    "dma.small_payload_exponent = 0.6: DMA efficiency min(1, s / 4 KiB) ** 0.6 of the contiguous HBM "
    "bytes s (saturation at 4 KiB is the bandwidth guide's [dma-bw]); fitted to the matmul tutorial's "
    "DMA-bound tiled, hoist_load and block_free (+11%, -11%, -9%; 1 KiB and 256 B per partition).",
    "scheduler.hoist_sbuf_fraction = 0.5: add_rmsnorm_matmul (HBM read 42.0 MB: its re-loaded 64 KiB/"
    "partition weight is read once) against the matmul tutorial's tiled/hoist_load/block_free "
    "(DMA-bound at their published latencies: their re-read operands exceed SBUF, no hoisting).",
    "DMA payload (not a number): the HBM-side contiguous run, even across partitions: bmm moves "
    "1153 MB in its 4.2 ms schedule, at the engines' peak, with 256 B per partition loads of "
    "contiguous rows.",
    "spill victims (not a number, simulator/liveness.py): the live unit used furthest ahead "
    "(mamba_M7168 reloads 55 MB, as measured: 55.1 MB; least recently used gave 110 MB).",
    "SBUF space (not a number, simulator/liveness.space_reuse): a tile waits for the last users of "
    "the space it takes, the space freed longest ago first; a spill reload waits for the store that "
    "frees its space. Before, loads ran ahead of their use without bound and reloads right after "
    "their stores (gqa_full's reloads shared the bandwidth with its spill stores): gqa_full -1.6% "
    "then, -3.0% now; mamba_M7168 -10.9%, +2.9%; lora -1.6%, +8.1%; the fully optimised matmul "
    "tutorial -2.3%, +0.7%; Spearman 0.989, 0.995. The launch cost refitted with it, 463 -> 423 us, "
    "puts rope at -20.4% (its ScalarE time is under-modelled: 0.34 of the profile).",
    "DMA queues (not a number): at most `dma.queues` transfers in flight, taken in program order "
    "(the DmaSpec docstring); with the SBUF space, a later pass's prefetched loads no longer hold "
    "back an earlier pass's stores.",
    "engine of nl.*/nisa ops left to the compiler (not a number): PSUM->SBUF copies and tensor_scalar "
    "on a PSUM tile, one-row partition broadcasts and copies to another partition base on ScalarE "
    "(ScalarE/GpSimd active % of add_rmsnorm_matmul, mamba_M7168, gqa_full; rope's only ScalarE "
    "candidate); reciprocal of >= 64 elements on ScalarE (silu: ScalarE active 31.5% = activation "
    "+ reciprocal; the [isa] cost, max(MIN_II, N) there, 8N on VectorE).",
    "compiler fusion (not a number): an activation and the add-reduction of exactly its output run as "
    "one activation_reduce (gqa_full's VectorE active 31.4%: its exp + sum; add_rmsnorm's square + sum).",
    "repeated computations (not a number, perfmodel._repeated_computations): a matmul, transpose, copy "
    "or tensor_tensor repeating an earlier one of its statement on the same input-derived values is "
    "computed once. lora reads 434.7 MB of HBM besides spill reloads: its inputs once, x twice (its "
    "two loop nests), not the 1357 MB its loads issue (x re-loaded and re-transposed in each of 12 "
    "outer iterations); with the repeats served its TensorE busy is 25.2 ms, not 28.0, and the row "
    "+25.8% -> +4.8% (launch 423 us). Partition broadcasts stay per use (mamba_M7168's ScalarE "
    "active 537 us: 496 with them, 330 without); mamba_M7168 +2.9% -> -10.4%, its VectorE 1.17 -> "
    "0.96 of the profile (deltaU = delta * u repeated per state). The launch cost refitted with it, "
    "423 -> 456 us.",
    "Instruction costs, clocks, DMA bandwidth and fixed cost and the static overheads stay the documented "
    "[isa]/[arch]/[dma-bw] values above: none is fitted.",
)

TARGETS = {hw.name: hw for hw in (TRN1, TRN2)}


def get_target(name: str) -> HardwareDescription:
    try:
        return TARGETS[name]
    except KeyError:
        from axon.errors import InputError

        raise InputError(f"unknown Trainium target {name!r}; expected one of {', '.join(TARGETS)}") from None

