"""NKI source emission: the Trainium side of `axon.tiling.build`'s verbs, in the current NKI API.

The builder decides loops, tiles and which lowering `Step`s run on which tiles; this module prints
them as NKI that runs unchanged under `nki.jit` (`import nki`, `nki.language as nl`, `nki.isa as
nisa`, `nl.ndarray(..., buffer=nl.sbuf/nl.psum/nl.shared_hbm)`, `nisa.*(dst=...)`,
`nl.affine_range`). Target-specific choices live here: accumulators are PSUM tiles, a transpose
onto the partition axis is a Tensor Engine `nc_transpose` into PSUM (four 128-blocks per bank)
evacuated by one `tensor_copy`, a vector broadcast across partitions is a one-row matmul against
ones. Operators are printed only from the synthesized programs handed in (`program`, `matmul`):
each instruction name maps to its `nisa` call, slots and holes (the synthesizer's names) to
keywords; a constant in a tile-only slot is a memset tile; a predicate of the tile's positions
(tiling.positions) is affine_select's pattern, offset, channel_multiplier and cmp_op.

Invariant: the same calls give byte-identical source (names come from a per-kernel counter).
"""
from __future__ import annotations

import itertools
import re
from contextlib import contextmanager

from axon.errors import UnsupportedError
from axon.semantics.scalar import ScalarOp
from axon.targets.trainium.isa import nki_name
from axon.targets.trainium.nki_api import tensor_scalar_engines
from axon.targets.trainium.tidy import tidy
from axon.targets.trainium.trace import Engine
from axon.tiling.positions import Predicate

_DTYPE = {"kernel": "DT", "f32": "nl.float32"}
# instructions whose nisa call `steps` can print (slots and holes map to keyword arguments)
EMITTABLE = {"activation", "tensor_scalar", "tensor_tensor", "tensor_reduce", "tensor_tensor_scan", "reciprocal",
             "tensor_copy", "scalar_tensor_tensor", "activation_reduce", "tensor_scalar_reduce", "nc_matmul",
             "nc_transpose", "affine_select", "select"}
_PSUM_BANK_BYTES = 2048


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _nl(value) -> str:
    """A hole value as NKI source: an operator becomes nl.<its name in the ISA table> (the name
    carries meaning: nl.gelu is not Axon's gelu), anything else its repr."""
    if value is None or isinstance(value, ScalarOp):
        return f"nl.{nki_name(value)}"
    return repr(value)


def _hardware(target: str):
    from axon.targets.trainium.hardware import get_target

    return get_target(target)


def _idle() -> dict[str, float]:
    return {"vector": 0.0, "gpsimd": 0.0, "scalar": 0.0}


def _plus(*terms: str) -> str:
    """The sum of index expressions, zeros left out ("0" when all are)."""
    kept = [t for t in terms if t and t != "0"]
    return " + ".join(kept) or "0"


class NkiEmitter:
    def __init__(self, dtype: str = "bfloat16", hw=None, scalar_copies: bool = False,
                 immediate_bias: bool = True):
        """`hw`: the target's HardwareDescription (engine placement costs instructions by it;
        trn2's by default); `scalar_copies`: the Scalar Engine runs tensor_scalar and tensor_copy
        (NeuronCore-v3); `immediate_bias`: an activation's bias may be a number (NeuronCore-v3;
        v2 takes a [P, 1] tile, nki_api)."""
        self.dtype = dtype
        self.hw = hw or _hardware("trn2")
        self.scalar_copies = scalar_copies
        self.immediate_bias = immediate_bias
        self.lines: list[str] = []
        self.constants: dict[int, tuple[str, int]] = {}  # line -> (var, value): loops of one iteration
        self.pre: list[str] = []  # kernel-level set-up printed before the body (constant tiles)
        self.entry_lines = 0  # the entry checks and `DT = ...`, which `pre` follows
        self.consts: dict[tuple, str] = {}
        self.depth = 1
        self.counter: dict[str, int] = {}
        self.tile_dtype: dict[str, str] = {}
        self.tile_mem: dict[str, str] = {}
        self.name = "kernel"
        self.params: list[str] = []
        self.header: list[str] = []
        self.sizes: dict[str, int] = {}  # binds symbolic constants (a mean's k)
        self.balance = False  # spread tensor_tensor / tensor_scalar / tensor_copy over Vector, GpSimd (and Scalar)
        # balance is kept per region (one loop nest that runs after the one before: a pass, a
        # causal pass's run of row blocks): `region` counts them, `load` is the current one's
        # work placed so far, `fixed[r]` region r's single-engine work (all of it, `preload`ed)
        self.region = 0
        self.load = _idle()
        self.fixed: dict[int, dict] = {0: _idle()}
        self._fixed_known = False  # `preload`ed: every region's fixed work is charged already
        self.trips = 1  # iterations of the loops around the current line (work is charged per run)
        self.wide_dtype = "f32"  # what an f32 tile wider than one column is allocated as ("kernel": DT)
        self._prescanned = False  # inside `program`, whose single-engine load was charged up front

    # -- names and lines --------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        prefix = re.sub(r"\W", "_", prefix)
        while True:
            k = self.counter.get(prefix, 0)
            self.counter[prefix] = k + 1
            name = f"{prefix}{k}" if k else prefix
            if name not in self.params and name not in ("DT", "nl", "nki", "nisa"):
                return name

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)
        if self.balance and text.startswith("nisa."):
            self._note_fixed(text)

    def comment(self, text: str) -> None:
        self.line(f"# {text}")

    @contextmanager
    def loop(self, var: str, count: int, sequential: bool = False, scoped: bool = False, only=None, runs=None):
        """`sequential`: iterations depend on each other (a carried value): nl.sequential_range;
        `scoped`: a loop even for one iteration, so the tiles allocated in it die with it; `only`:
        the iteration values to run, of the `count` (a causal pass's row blocks, a check's kernel
        on part of the rows); `runs`: how many the kernel runs (default `count`)."""
        # placement weighs work by what the full kernel runs: a check's kernel places every
        # instruction where the kernel it checks does
        trips = self.trips
        self.trips = trips * (count if runs is None else runs)
        kind = "sequential_range" if sequential else "affine_range"
        values = tuple(range(count)) if only is None else tuple(only)
        contiguous = bool(values) and values == tuple(range(values[0], values[0] + len(values)))
        opened = not (contiguous and len(values) == 1 and not scoped)
        try:
            if not opened:  # a binding `tidy` substitutes into the lines it scopes, then drops
                self.constants[len(self.lines)] = (var, values[0])
                self.line(f"{var} = {values[0]}")
            elif contiguous:
                bounds = f"{values[0]}, {values[-1] + 1}" if values[0] else f"{len(values)}"
                self.line(f"for {var} in nl.{kind}({bounds}):")
            else:
                self.line(f"for {var}_k in nl.{kind}({len(values)}):")
                self.line(f"    {var} = {values}[{var}_k]  # {len(values)} of {count} iterations")
            self.depth += opened
            yield
        finally:
            self.trips = trips
            self.depth -= opened

    # -- kernel frame -----------------------------------------------------------------------
    def begin(self, name: str, params: list[str], header: list[str], shapes: list[tuple] | None = None) -> None:
        """`shapes`: each parameter's shape as the caller passes it, checked at entry with the
        kernel's dtype (the sizes and dtype the kernel was built and checked for)."""
        self.name, self.params, self.header = name, params, header
        dt = "nl.float32" if self.dtype == "float32" else f"nl.{self.dtype}"
        for p, shape in zip(params, shapes or ()):
            want = f"({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''})"
            self.line(f'assert tuple({p}.shape) == {want}, f"{p}: expected shape {want}, got {{{p}.shape}}"')
            self.line(f'assert {p}.dtype == {dt}, f"{p}: expected {self.dtype}, got {{{p}.dtype}}"')
        self.line(f"DT = {params[0]}.dtype")
        self.entry_lines = len(self.lines)

    def hbm(self, name: str, shape: list[int], dtype: str, output: bool) -> None:
        buf = "nl.shared_hbm" if output else "nl.hbm"
        self.line(f"{name} = nl.ndarray(({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), "
                  f"dtype={_DTYPE[dtype]}, buffer={buf})")

    def finish(self, outputs: list[str]) -> str:
        self.line(f"return {', '.join(outputs)}")
        head = ['"""' + self.header[0]] + self.header[1:] + ['"""'] if self.header else []
        lines = tidy(self.lines, self.constants)
        k = self.entry_lines
        body = lines[:k] + self.pre + lines[k:]  # after the entry checks and `DT = ...`
        text = "\n".join(head + ["import nki", "import nki.isa as nisa", "import nki.language as nl", "", "",
                                 "@nki.jit", f"def {self.name}({', '.join(self.params)}):"] + body) + "\n"
        return text

    # -- tiles ------------------------------------------------------------------------------
    def alloc(self, prefix: str, partitions: int, free: int, dtype: str) -> str:
        name = self.fresh(prefix)
        mem = "psum" if dtype == "accum" else "sbuf"
        if dtype == "f32" and free > 1:
            dtype = self.wide_dtype
        elif dtype == "state":  # a running value carried across a walk: f32 whatever its width
            dtype = "f32"
        dt = "nl.float32" if dtype == "accum" else _DTYPE[dtype]
        self.tile_dtype[name] = "f32" if dtype in ("accum", "f32") else "kernel"
        self.tile_mem[name] = mem
        self.line(f"{name} = nl.ndarray(({partitions}, {free}), dtype={dt}, buffer=nl.{mem})")
        return name

    @staticmethod
    def view(tile: str, partitions: int, c0: str, width: int) -> str:
        stop = str(width) if c0 == "0" else f"{c0} + {width}"
        return f"{tile}[0:{partitions}, {c0}:{stop}]"

    def _base(self, expr: str) -> str:
        return expr.split("[", 1)[0]

    def needs_cast_for_store(self, tile: str) -> bool:
        return self.tile_dtype.get(self._base(tile)) == "f32" and self.dtype != "float32"

    # -- data movement ----------------------------------------------------------------------
    def fill(self, dst: str, value: float) -> None:
        """dst = value everywhere (an accumulator's identity)."""
        text = repr(float(value)) if abs(value) != float("inf") else f"float('{value}')"
        self.line(f"nisa.memset(dst={dst}, value={text})")

    def dma(self, dst: str, src: str) -> None:
        self.line(f"nisa.dma_copy(dst={dst}, src={src})")

    # rows of an HBM block per DMA transpose: a partition's worth, as the stationary operands take
    # them (the block lands as [K tile, rows])
    dma_transpose_rows = 128

    def dma_transpose(self, dst: str, src: str) -> None:
        self.line(f"nisa.dma_transpose(dst={dst}, src={src})")

    def copy(self, dst: str, src: str, engine: str | None = None) -> None:
        """`engine`: the placement (`, engine=...` or '') already chosen for it."""
        eng = self._engine("tensor_copy", [src], dst, self._width(dst)) if engine is None else engine
        self.line(f"nisa.tensor_copy(dst={dst}, src={src}{eng})")

    # -- engine placement (balance) -----------------------------------------------------------------
    # tensor_tensor streams at 2 cycles per element except on the Vector Engine with all-bf16
    # add/sub/mul (1 cycle); GpSimd cannot reach PSUM; on NeuronCore-v3 the Scalar Engine runs
    # tensor_scalar and tensor_copy too [isa]. Each instruction goes to the engine that would be
    # least loaded with it (in ns, at each engine's clock, times the runs of its loops), after the
    # region's single-engine work is charged (`preload`, from a first build): an evacuation copy
    # printed before the activation of the same rows then already sees that activation.

    def preload(self, fixed: dict) -> None:
        """Start each region's placement from its whole single-engine load (`fixed` of a first build)."""
        self.fixed = {r: dict(f) for r, f in fixed.items()}
        self.load = dict(self.fixed.get(self.region, _idle()))
        self._fixed_known = True

    def begin_region(self) -> None:
        """A new loop nest starts: it runs after the previous one (their engines' work does not
        overlap much), so its instructions are balanced among themselves, not against the work
        placed before it."""
        self.region += 1
        if not self._fixed_known:
            self.fixed[self.region] = _idle()
        self.load = dict(self.fixed.get(self.region, _idle()))

    def _width(self, view: str) -> int:
        m = re.match(r"^\w+\[\d+:\d+, (.+?):(.+)\]$", view)
        if not m:
            return 512
        start, stop = m.group(1), m.group(2)
        if start == "0" and stop.isdigit():
            return int(stop)
        tail = stop.rsplit("+ ", 1)[-1]
        return int(tail) if tail.isdigit() else 512

    # instructions only one engine runs: they load it too
    _FIXED = {"tensor_reduce": "vector", "scalar_tensor_tensor": "vector", "tensor_tensor_scan": "vector",
              "tensor_scalar_reduce": "vector", "activation": "scalar", "activation_reduce": "scalar",
              "affine_select": "gpsimd"}
    _READS_DATA = ("tensor_reduce", "tensor_scalar_reduce", "activation_reduce")  # N is the input's width
    _DST = re.compile(r"^nisa\.(\w+)\(dst=(\w+\[\d+:\d+, [^\]]+\])")

    def _ns(self, instruction: str, engine: str, width: int, fast: bool = False, speedup: float = 1.0) -> float:
        """The time of one instruction on `engine` (the hardware description's cost), times the
        loop trips around it."""
        return self.trips * self.hw.instruction_ns(instruction, Engine(engine), width, fast, speedup)

    def _charge(self, instruction: str, width: int, fast: bool = False) -> None:
        if self._fixed_known:
            return
        engine = self._FIXED[instruction]
        ns = self._ns(instruction, engine, width, fast)
        self.load[engine] += ns
        self.fixed[self.region][engine] += ns

    def _note_fixed(self, text: str) -> None:
        if self._prescanned:
            return
        m = self._DST.match(text)
        if m and m.group(1) in self._FIXED and "engine=" not in text:
            width = self._width(m.group(2))
            if m.group(1) in self._READS_DATA:
                src = re.search(r"data=(\w+\[0:\d+, [^\]]+\])", text)
                width = self._width(src.group(1)) if src else width
            self._charge(m.group(1), width)

    def _engine(self, instruction: str, reads: list, dst: str, width: int, op: str = "",
                op1: str | None = None) -> str:
        """`, engine=...` for the instruction, or '' for its default engine (Vector). A
        tensor_scalar goes only where the documented API lets its operators run (nki_api)."""
        if not self.balance:
            return ""
        tiles = [self._base(x) for x in reads + [dst] if isinstance(x, str)]
        psum = any(self.tile_mem.get(t) == "psum" for t in tiles)
        half = self.dtype in ("bfloat16", "float16") and all(self.tile_dtype.get(t) == "kernel" for t in tiles)
        fast, speedup = False, 1.0
        engines = ["vector", "gpsimd"]
        if instruction == "tensor_tensor":  # its Vector Engine fast path [isa]
            fast = psum or (half and op in ("add", "sub", "subtract", "mul", "multiply"))
        else:
            dt = self.dtype if half else "float32"
            speedup = self.hw.vector_speedup(instruction, dt, dt, psum)
            engines += ["scalar"] if self.scalar_copies else []
        if instruction == "tensor_scalar":
            allowed = tensor_scalar_engines(op, op1)
            engines = [e for e in engines if e in allowed]
        if psum:
            engines = [e for e in engines if e != "gpsimd"]  # GpSimd cannot reach PSUM
        vector_rate = {"fast": fast, "speedup": speedup}  # the fast path and perf mode are VectorE's
        cost = {e: self._ns(instruction, e, width, **(vector_rate if e == "vector" else {})) for e in engines}
        best = min(engines, key=lambda e: (self.load[e] + cost[e], e != "vector"))
        self.load[best] += cost[best]
        # the compiler puts an engine-less PSUM read on ScalarE (an evacuation), so say Vector
        return "" if best == "vector" and not psum else f", engine=nisa.engine.{best}"

    def broadcast_vector(self, dst: str, src: str, n: int, partitions: int) -> None:
        """dst[P, n] = src[n] on every partition: ones[1, P]^T @ src[1, n] on the Tensor Engine,
        in the kernel's dtype (exact: one product by 1.0 per element, summed in fp32 PSUM; a DMA
        only copies, so the row keeps its HBM dtype)."""
        one = self.fresh("ones")
        row = self.fresh(f"{src}_row")
        self.line(f"{one} = nl.ndarray((1, {partitions}), dtype=DT, buffer=nl.sbuf)")
        self.line(f"nisa.memset(dst={one}, value=1.0)")
        self.line(f"{row} = nl.ndarray((1, {n}), dtype=DT, buffer=nl.sbuf)")
        self.line(f"nisa.dma_copy(dst={row}, src={src}.reshape((1, {n})))")
        self.tile_dtype[dst] = "f32" if self.wide_dtype == "f32" else "kernel"
        self.line(f"{dst} = nl.ndarray(({partitions}, {n}), dtype={_DTYPE[self.tile_dtype[dst]]}, buffer=nl.sbuf)")
        w = min(512, n)
        for count, width, c0 in ((n // w, w, f"i_c * {w}"), (1 if n % w else 0, n % w, str(n - n % w))):
            if not count:
                continue  # a last, narrower piece when one bank's 512 columns do not divide n
            with self.loop("i_c", count):
                acc = self.fresh("bc")
                self.line(f"{acc} = nl.ndarray(({partitions}, {width}), dtype=nl.float32, buffer=nl.psum)")
                self.tile_mem[acc], self.tile_dtype[acc] = "psum", "f32"
                self.line(f"nisa.nc_matmul(dst={acc}, stationary={one}, moving={row}[0:1, {c0}:{c0} + {width}])")
                self.copy(f"{dst}[0:{partitions}, {c0}:{c0} + {width}]", acc)

    def transpose_into(self, dst_tile: str, src: str, partitions: int, k: int, count: int, layout: str,
                       base: str, stride: int | None = None) -> None:
        """Blocks q = 0..count-1 of src[:, q*k:(q+1)*k] ([partitions, k]) land transposed ([k, partitions])
        at dst_tile[:, base + q*step] (step = partitions, or `stride`)."""
        src_tile, src_c0 = self._split(src)
        dt = self.tile_dtype.get(self._base(src_tile), "kernel")
        if self.tile_mem.get(self._base(src_tile)) == "psum":  # the Tensor Engine reads SBUF only [isa]
            start = src_c0.removesuffix(" + ") or "0"
            cols = f"{start}:{count * k}" if start == "0" else f"{start}:{start} + {count * k}"
            src_tile, src_c0 = self._base(self._in_sbuf(f"{src_tile}[0:{partitions}, {cols}]", partitions, count * k)), ""
        item = 4 if dt == "f32" or self.dtype == "float32" else 2
        step = stride or partitions
        # as many blocks per PSUM bank as fit, each bank leaving in one copy (a copy's fixed cost
        # is paid per bank); a count the group does not divide ends with one shorter group
        group = 1 if stride is not None else max(g for g in (4, 2, 1) if g * partitions * item <= _PSUM_BANK_BYTES)
        group = min(group, count)
        full, tail = divmod(count, group)
        # each group's copy out of PSUM is placed on its own, and the groups run in loops of
        # consecutive ones placed alike: one line runs on one engine, and the copies are many
        # (attention's P^T: a line of them took a third of ScalarE's time)
        probe = "psum_probe"  # never printed: where the copies read from, for placement
        self.tile_mem[probe], self.tile_dtype[probe] = "psum", dt
        placed = [self._engine("tensor_copy", [probe], f"{dst_tile}[0:{k}, 0:{group * partitions}]",
                                group * partitions) for _ in range(full)]
        del self.tile_mem[probe], self.tile_dtype[probe]
        for engine, run in itertools.groupby(range(full), key=placed.__getitem__):
            run = list(run)
            with self.loop("i_q", full, only=range(run[0], run[-1] + 1), runs=len(run)):
                self._transpose_group(dst_tile, _plus(base, f"i_q * {group * step}"), src_tile,
                                      _plus(src_c0.removesuffix(" + "), f"i_q * {group * k}"), partitions, k,
                                      group, dt, engine)
        if tail:
            self._transpose_group(dst_tile, _plus(base, str(full * group * step)), src_tile,
                                  _plus(src_c0.removesuffix(" + "), str(full * group * k)), partitions, k, tail, dt)

    def _in_sbuf(self, view: str, partitions: int, width: int) -> str:
        """An SBUF copy of `view` (a PSUM tile's columns, where an instruction cannot read it from
        PSUM), in its own dtype: the view to read instead."""
        dt = self.tile_dtype.get(self._base(view), "f32")
        staged = self.fresh("st")
        self.line(f"{staged} = nl.ndarray(({partitions}, {width}), dtype={_DTYPE[dt]}, buffer=nl.sbuf)")
        self.tile_mem[staged], self.tile_dtype[staged] = "sbuf", dt
        self.copy(f"{staged}[0:{partitions}, 0:{width}]", view)
        return f"{staged}[0:{partitions}, 0:{width}]"

    def _transpose_group(self, dst_tile: str, d0: str, src_tile: str, c0: str, partitions: int, k: int,
                         group: int, dt: str, engine: str | None = None) -> None:
        """`group` blocks of src_tile from column c0 transposed into one PSUM tile, copied out at
        dst_tile[:, d0:] (on `engine`, as `copy` takes it)."""
        tp = self.fresh("tp")
        self.line(f"{tp} = nl.ndarray(({k}, {group * partitions}), dtype={_DTYPE[dt]}, buffer=nl.psum)")
        self.tile_mem[tp], self.tile_dtype[tp] = "psum", dt
        for u in range(group):
            c = _plus(c0, str(u * k))
            self.line(f"nisa.nc_transpose(dst={tp}[0:{k}, {u * partitions}:{(u + 1) * partitions}], "
                      f"data={src_tile}[0:{partitions}, {c}:{c} + {k}])")
        self.copy(f"{dst_tile}[0:{k}, {d0}:{d0} + {group * partitions}]", tp, engine)

    def _split(self, view: str) -> tuple[str, str]:
        """'t[0:P, a:b]' -> ('t', 'a + ') so block offsets can be added to the view's start."""
        m = re.match(r"^(\w+)\[0:\d+, (.+?):(.+)\]$", view)
        if not m:
            return view, ""
        start = m.group(2)
        return m.group(1), ("" if start == "0" else f"{start} + ")

    def store_transposed(self, out: str, tile: str, rows: str, partitions: int, c0: str, width: int,
                         batch: list[str]) -> None:
        """out[.., c0:c0+width, rows:rows+P] = tile[P, width]^T, 128 columns at a time."""
        k = min(128, width)
        if self.tile_mem.get(self._base(tile)) == "psum":  # the Tensor Engine transposes from SBUF
            sb = self.alloc("ev", partitions, width, "kernel")
            self.copy(self.view(sb, partitions, "0", width), tile)
            tile = self.view(sb, partitions, "0", width)
        stage = self.alloc("tT", k, (width // k) * partitions, "kernel")
        self.transpose_into(stage, tile, partitions, k, width // k, "i_r", "0")
        with self.loop("i_q", width // k):
            idx = batch + [f"{c0} + i_q * {k}:{c0} + i_q * {k} + {k}", f"{rows}:{rows} + {partitions}"]
            self.line(f"nisa.dma_copy(dst={out}[{', '.join(idx)}], "
                      f"src={stage}[0:{k}, i_q * {partitions}:i_q * {partitions} + {partitions}])")

    # -- compute ----------------------------------------------------------------------------
    def matmul(self, acc: str, lhsT: str, rhs: str, partitions: int, k: int, n: int, k_tiles: int,
               lhs_col: str, rhs_col: str, step=None, acc_col: str = "0") -> None:
        """acc = lhsT^T @ rhs accumulated over k_tiles, by the synthesized `step` (one instruction whose
        slot reading operand 0 transposed takes lhsT and whose other slot takes rhs), into
        acc[:, acc_col:acc_col + n]. `acc` is a fresh PSUM tile, never zeroed: with nc_matmul's
        default `accumulate` the first matmul into a location overwrites and the later ones add (a
        streamed contraction's later weight pieces add to the first's); a memset first would be a
        wasted instruction, and accumulating onto a memset's PSUM is undefined on NeuronCore-v2/v3."""
        name, stat, mov = "nc_matmul", "stationary", "moving"
        if step is not None:
            name = step.instruction
            stat = next(s for s, a in step.args if a.kind == "operand" and a.transposed)
            mov = next(s for s, a in step.args if a.kind == "operand" and not a.transposed)
        dst = f"{acc}[0:{partitions}, 0:{n}]" if acc_col == "0" else f"{acc}[0:{partitions}, {acc_col}:{acc_col} + {n}]"
        with self.loop("i_kt", k_tiles):
            self.line(f"nisa.{name}(dst={dst}, "
                      f"{stat}={lhsT}[0:{k}, {lhs_col}:{lhs_col} + {partitions}], "
                      f"{mov}={rhs}[0:{k}, {rhs_col}:{rhs_col} + {n}])")

    # -- programs (synthesized instruction sequences) ------------------------------------------
    # NKI call syntax per instruction, in the synthesizer's vocabulary: which keyword a slot, hole
    # or extra output is spelled with, and fixed keywords. Syntax only: which instructions compute
    # an operator comes from the synthesis stage.
    _SLOT_KW = {("tensor_copy", "data"): "src"}
    _HOLE_KW = {("activation", "func"): "op", ("activation_reduce", "func"): "op"}
    _OUT_KW = {"reduce": "reduce_res"}
    _FIXED_KW = {"tensor_reduce": ("axis=1",)}  # the free axis of a [P, C] tile

    def program(self, prog, operands: list, dsts: dict, partitions: int, width_of, binding: dict) -> None:
        """Print a synthesized `Program`: operand k is operands[k] (a tile expression or a number);
        dsts[(step, output)] is where a needed value goes; other step outputs get f32 temporaries
        (wide ones in `wide_dtype`), reused once dead (an element-wise instruction may write over the operand it reads last)."""
        if self.balance:
            self._charge_fixed(prog, operands, width_of)
            self._prescanned = True
        try:
            self._program_steps(prog, operands, dsts, partitions, width_of, binding)
        finally:
            self._prescanned = False

    def _charge_fixed(self, prog, operands, width_of) -> None:
        """Charge the program's single-engine instructions before any flexible one is placed: the
        greedy placement then sees the program's whole fixed load."""
        for i, st in enumerate(prog.steps):
            if st.instruction not in self._FIXED:
                continue
            data = st.arg("data")
            if st.instruction in self._READS_DATA and data is not None:
                width = (width_of(prog.widths[(data.index, data.output)]) if data.kind == "step" else
                         self._width(str(operands[data.index])) if data.kind == "operand" else 1)
            else:
                width = max((width_of(w) for (j, _), w in prog.widths.items() if j == i), default=1)
            # bf16 in and out: tensor_reduce's double rate [isa]
            fast = data is not None and self.dtype == "bfloat16" and \
                self._max_in_kernel_dtype(st, [self._arg_kind(data, operands, width)])
            self._charge(st.instruction, width, fast)

    def _arg_kind(self, arg, operands, width: int) -> str | None:
        """'kernel' or 'f32': the dtype a program's argument has (a temporary's is alloc's rule)."""
        if arg.kind == "operand":
            return self.tile_dtype.get(self._base(str(operands[arg.index])))
        return "kernel" if arg.kind == "step" and width > 1 and self.wide_dtype == "kernel" else "f32"

    def _program_steps(self, prog, operands: list, dsts: dict, partitions: int, width_of, binding: dict) -> None:
        from axon.synthesis.spec import Form
        from axon.targets.trainium.isa import INSTRUCTIONS

        specs = {s.name: s for s in INSTRUCTIONS}
        last: dict = {}
        for i, st in enumerate(prog.steps):
            for _, a in st.args:
                if a.kind == "step":
                    last[(a.index, a.output)] = i
        vals: dict = {}
        temps: dict = {}  # (step, output) -> (tile, width) for temporaries
        free: list = []  # (width, tile) of dead temporaries
        for i, st in enumerate(prog.steps):
            spec = specs.get(st.instruction)
            if spec is None or st.instruction in ("nc_matmul", "nc_transpose"):
                raise UnsupportedError(f"{st.instruction} inside an element-wise program")
            outs = [(j, name) for (j, name) in prog.widths if j == i]
            width = max((width_of(prog.widths[o]) for o in outs), default=1)
            kwargs, reads, by_slot = [], [], {}
            for slot, arg in st.args:
                sl = next((x for x in spec.slots if x.name == slot), None)
                takes_tile = sl is not None and (Form.IMMEDIATE not in sl.forms or (
                    slot == "bias" and not self.immediate_bias))
                v = self._program_arg(arg, operands, vals, binding)
                if isinstance(v, Predicate):  # evaluated on the fly from the tile's positions
                    kwargs.extend(self._predicate_args(v))
                    continue
                if isinstance(v, (int, float)) and takes_tile:
                    cols = 1 if slot == "bias" else width  # a bias is one value per partition
                    v = self.view(self._const_tile(float(v), partitions, cols), partitions, "0", cols)
                elif isinstance(v, (int, float)):
                    v = repr(float(v))
                reads.append(v)
                by_slot[slot] = v
                kwargs.append(f"{self._SLOT_KW.get((st.instruction, slot), slot)}={v}")
            # temporaries that die at this step may take its main output (in place, element-wise);
            # a second output (a reduction's column) only takes one dead before this step; not a
            # select's: it writes its output before it has read all of its operands
            dying = [k for k in temps if last.get(k, -1) == i and k[0] < i and st.instruction != "select"]
            for key in [k for k in temps if last.get(k, -1) < i]:
                free.append((temps[key][1], temps.pop(key)[0]))
            for o in outs:
                if o in dsts:
                    vals[o] = dsts[o]
                    continue
                w = width_of(prog.widths[o])
                if o == outs[0]:
                    for key in dying:
                        free.append((temps[key][1], temps.pop(key)[0]))
                    dying = []
                kinds = [self.tile_dtype.get(self._base(r)) for r in reads]
                kind = "kernel" if w == 1 and self._max_in_kernel_dtype(st, kinds) else "f32"
                reuse = next((k for k, (fw, ft) in enumerate(free)
                              if fw == w and self._kind(ft, w) == kind), None)
                tile = free.pop(reuse)[1] if reuse is not None else \
                    self.view(self.alloc("t", partitions, w, kind), partitions, "0", w)
                temps[o] = (tile, w)
                vals[o] = tile
            main = vals[outs[0]] if outs else None
            head = [f"dst={main}"]
            for o in outs[1:]:
                head.append(f"{self._OUT_KW.get(o[1], o[1])}={vals[o]}")
            for hole, value in st.holes:
                if hole == "engine":
                    continue
                kw = self._HOLE_KW.get((st.instruction, hole), hole)
                if value is None:
                    if hole == "func":
                        kwargs.append(f"{kw}={_nl(None)}")
                    continue
                if value is False:
                    continue
                kwargs.append(f"{kw}={self._hole(kw if hole != 'func' else 'op', value)}")
            if st.instruction == "select":
                self._select(main, by_slot, partitions, width)
                continue
            self._one_read_from_psum(st.instruction, by_slot, kwargs, reads, partitions, width)
            kwargs.extend(self._FIXED_KW.get(st.instruction, ()))
            if st.instruction in ("tensor_tensor", "tensor_scalar") and hasattr(self, "_engine"):
                ops = {h: str(getattr(v, "value", v)) for h, v in st.holes if h in ("op", "op0", "op1") and v}
                eng = self._engine(st.instruction, reads, main, width, ops.get("op", ops.get("op0", "")), ops.get("op1"))
                if eng:
                    kwargs.append(eng[2:])
            self.line(f"nisa.{st.instruction}({', '.join(head + kwargs)})")
            for key in dying:
                free.append((temps[key][1], temps.pop(key)[0]))
            for o in outs:  # a value nothing reads is dead at once
                if o in temps and o not in last:
                    free.append((temps[o][1], temps.pop(o)[0]))

    # the two tensor operands of an instruction that may not both be read from PSUM [isa]
    _PSUM_PAIRS = {"tensor_tensor": ("data1", "data2"), "scalar_tensor_tensor": ("data", "operand1"),
                   "tensor_tensor_scan": ("data0", "data1")}

    def _one_read_from_psum(self, instruction: str, by_slot: dict, kwargs: list, reads: list,
                            partitions: int, width: int) -> None:
        """Where both of `instruction`'s tensor operands are PSUM tiles (x * x of a matmul's result,
        say), its second one is read from an SBUF copy."""
        pair = self._PSUM_PAIRS.get(instruction)
        views = [by_slot.get(slot) for slot in pair] if pair else []
        if not views or any(not isinstance(v, str) or self.tile_mem.get(self._base(v)) != "psum" for v in views):
            return
        slot, view = pair[1], views[1]
        kw = self._SLOT_KW.get((instruction, slot), slot)
        staged = self._in_sbuf(view, partitions, width)
        kwargs[kwargs.index(f"{kw}={view}")] = f"{kw}={staged}"
        reads[reads.index(view)] = staged

    def _select(self, dst: str, x: dict, partitions: int, width: int) -> None:
        """dst = x["on_true"] where x["pred"] is non-zero, else x["on_false"], exactly: dst takes
        on_false, then tensor_copy_predicated copies on_true where a uint8 predicate (pred != 0)
        is set [isa tensor_copy_predicated: predicate uint8/16/32, src of dst's dtype]. A NaN or
        infinity in the branch not taken never reaches dst, as it would through 0 * x masks."""
        pred = self.fresh("pred")
        self.line(f"{pred} = nl.ndarray(({partitions}, {width}), dtype=nl.uint8, buffer=nl.sbuf)")
        self.line(f"nisa.tensor_scalar(dst={pred}, data={x['pred']}, op0=nl.not_equal, operand0=0.0)")
        if _is_number(x["on_false"]):  # an immediate: a masked score's -30000, say
            self.line(f"nisa.memset(dst={dst}, value={x['on_false']})")
        elif x["on_false"] != dst:
            self.line(f"nisa.tensor_copy(dst={dst}, src={x['on_false']})")
        src, kind = x["on_true"], self.tile_dtype.get(self._base(dst))
        if self.tile_dtype.get(self._base(src)) != kind:  # the copy converts it to dst's dtype
            src = self.view(self.alloc("t", partitions, width, "kernel" if kind == "kernel" else "state"),
                            partitions, "0", width)
            self.line(f"nisa.tensor_copy(dst={src}, src={x['on_true']})")
        self.line(f"nisa.tensor_copy_predicated(dst={dst}, src={src}, predicate={pred})")

    def _max_in_kernel_dtype(self, st, kinds: list) -> bool:
        """A max reduction of tiles in the kernel's dtype (`kinds`: its inputs'): its result is one
        of them, exact in that dtype, so its column is allocated there (bf16 in and out is the
        Vector Engine's double-rate tensor_reduce [isa])."""
        if st.instruction != "tensor_reduce" or dict(st.holes).get("op") is not ScalarOp.MAXIMUM:
            return False
        return self.dtype != "float32" and bool(kinds) and all(k == "kernel" for k in kinds)

    def _kind(self, tile: str, width: int) -> str:
        """What a temporary of `width` columns was allocated as, in alloc's terms."""
        kernel = self.tile_dtype.get(self._base(tile)) == "kernel"
        return "kernel" if kernel and (width == 1 or self.wide_dtype != "kernel") else "f32"

    @staticmethod
    def _predicate_args(pred) -> list[str]:
        """nisa.affine_select's predicate cmp_op(offset + channel_multiplier * p + step * f, 0)."""
        return [f"pattern=[[{pred.col}, {pred.width}]]", f"offset={pred.offset}",
                f"channel_multiplier={pred.row}", f"cmp_op=nl.{nki_name(pred.cmp)}"]

    def _program_arg(self, arg, operands, vals, binding):
        if arg.kind == "operand":
            return operands[arg.index]
        if arg.kind == "step":
            return vals[(arg.index, arg.output)]
        v = arg.value
        return float(v.evaluate(binding)) if hasattr(v, "evaluate") else float(v)

    def _const_tile(self, value: float, partitions: int, width: int) -> str:
        """A tile filled with `value`, set once at the top of the kernel (it is loop-invariant)."""
        key = (value, partitions, width)
        if key not in self.consts:
            name = self.fresh("const")
            self.tile_dtype[name], self.tile_mem[name] = "f32", "sbuf"
            self.pre.append(f"    {name} = nl.ndarray(({partitions}, {width}), dtype=nl.float32, buffer=nl.sbuf)")
            self.pre.append(f"    nisa.memset(dst={name}, value={value!r})")
            self.consts[key] = name
        return self.consts[key]

    def _hole(self, hole: str, value) -> str:
        if hole.startswith("op") or hole in ("reduce_op",):
            return _nl(value)
        return repr(value)  # a flag or a number
