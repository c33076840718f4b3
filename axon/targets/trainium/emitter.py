"""NKI source emission: the Trainium side of `axon.tiling.build`'s verbs, in the current NKI API.

The builder decides loops, tiles and which lowering `Step`s run on which tiles; this module prints
them as NKI that runs unchanged under `nki.jit` (`import nki`, `nki.language as nl`, `nki.isa as
nisa`, `nl.ndarray(..., buffer=nl.sbuf/nl.psum/nl.shared_hbm)`, `nisa.*(dst=...)`,
`nl.affine_range`). Target-specific choices live here: accumulators are PSUM tiles, a transpose
onto the partition axis is a Tensor Engine `nc_transpose` into PSUM (four 128-blocks per bank)
evacuated by one `tensor_copy`, a vector broadcast across partitions is a one-row matmul against
ones, and each instruction name maps to its `nisa` call with the step's holes as keywords.

Invariant: the same calls give byte-identical source (names come from a per-kernel counter).
"""
from __future__ import annotations

import re
from contextlib import contextmanager

from axon.errors import UnsupportedError

# slots that take a tile; a constant there is materialised with memset
_TENSOR_SLOTS = {"data", "data0", "data1", "data2", "stationary", "moving", "src"}
_DTYPE = {"kernel": "DT", "f32": "nl.float32"}
# instructions whose nisa call `steps` can print (slots and holes map to keyword arguments)
EMITTABLE = {"activation", "tensor_scalar", "tensor_tensor", "tensor_reduce", "tensor_tensor_scan", "reciprocal",
             "tensor_copy", "scalar_tensor_tensor", "activation_reduce", "tensor_scalar_reduce", "nc_matmul",
             "nc_transpose"}
_PSUM_BANK_BYTES = 2048


def _nl(value) -> str:
    """A hole value as NKI source: operator names become nl.<name>."""
    if hasattr(value, "value") and isinstance(getattr(value, "value"), str):  # an enum (ScalarOp / Op)
        value = value.value
    if isinstance(value, str):
        return f"nl.{_OP_NAMES.get(value, value)}"
    if isinstance(value, float):
        return repr(value)
    return repr(value)


# frontend vocabulary -> nl spelling, for holes that carry the operator's own name
_OP_NAMES = {"sub": "subtract", "mul": "multiply", "div": "divide", "max": "maximum", "min": "minimum",
             "sum": "add", "neg": "negative"}


class NkiEmitter:
    def __init__(self, dtype: str = "bfloat16"):
        self.dtype = dtype
        self.lines: list[str] = []
        self.pre: list[str] = []
        self.depth = 1
        self.counter: dict[str, int] = {}
        self.tile_dtype: dict[str, str] = {}
        self.tile_mem: dict[str, str] = {}
        self.name = "kernel"
        self.params: list[str] = []
        self.header: list[str] = []
        self.sizes: dict[str, int] = {}  # binds symbolic constants (a mean's k)

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

    def comment(self, text: str) -> None:
        self.line(f"# {text}")

    @contextmanager
    def loop(self, var: str, count: int):
        if count == 1:
            self.line(f"{var} = 0")
            yield
            return
        self.line(f"for {var} in nl.affine_range({count}):")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    # -- kernel frame -----------------------------------------------------------------------
    def begin(self, name: str, params: list[str], header: list[str]) -> None:
        self.name, self.params, self.header = name, params, header
        self.line(f"DT = {params[0]}.dtype")

    def hbm(self, name: str, shape: list[int], dtype: str, output: bool) -> None:
        buf = "nl.shared_hbm" if output else "nl.hbm"
        self.line(f"{name} = nl.ndarray(({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), "
                  f"dtype={_DTYPE[dtype]}, buffer={buf})")

    def finish(self, outputs: list[str]) -> str:
        self.line(f"return {', '.join(outputs)}")
        head = ['"""' + self.header[0]] + self.header[1:] + ['"""'] if self.header else []
        text = "\n".join(head + ["import nki", "import nki.isa as nisa", "import nki.language as nl", "", "",
                                 "@nki.jit", f"def {self.name}({', '.join(self.params)}):"] + self.lines) + "\n"
        return text

    # -- tiles ------------------------------------------------------------------------------
    def alloc(self, prefix: str, partitions: int, free: int, dtype: str) -> str:
        name = self.fresh(prefix)
        mem = "psum" if dtype == "accum" else "sbuf"
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
    def dma(self, dst: str, src: str) -> None:
        self.line(f"nisa.dma_copy(dst={dst}, src={src})")

    def dma_transpose(self, dst: str, src: str) -> None:
        self.line(f"nisa.dma_transpose(dst={dst}, src={src})")

    def copy(self, dst: str, src: str) -> None:
        self.line(f"nisa.tensor_copy(dst={dst}, src={src})")

    def broadcast_vector(self, dst: str, src: str, n: int, partitions: int) -> None:
        """dst[P, n] = src[n] on every partition: ones[1, P]^T @ src[1, n] on the Tensor Engine."""
        one = self.fresh("ones")
        row = self.fresh(f"{src}_row")
        self.line(f"{one} = nl.ndarray((1, {partitions}), dtype=nl.float32, buffer=nl.sbuf)")
        self.line(f"nisa.memset(dst={one}, value=1.0)")
        self.line(f"{row} = nl.ndarray((1, {n}), dtype=nl.float32, buffer=nl.sbuf)")
        self.line(f"nisa.dma_copy(dst={row}, src={src}.reshape((1, {n})))")
        self.line(f"{dst} = nl.ndarray(({partitions}, {n}), dtype=nl.float32, buffer=nl.sbuf)")
        self.tile_dtype[dst] = "f32"
        w = min(512, n)
        with self.loop("i_c", n // w):
            acc = self.fresh("bc")
            self.line(f"{acc} = nl.ndarray(({partitions}, {w}), dtype=nl.float32, buffer=nl.psum)")
            self.line(f"nisa.memset(dst={acc}, value=0.0)")
            self.line(f"nisa.nc_matmul(dst={acc}, stationary={one}, moving={row}[0:1, i_c * {w}:i_c * {w} + {w}])")
            self.line(f"nisa.tensor_copy(dst={dst}[0:{partitions}, i_c * {w}:i_c * {w} + {w}], src={acc})")

    def transpose_into(self, dst_tile: str, src: str, partitions: int, k: int, count: int, layout: str,
                       base: str, stride: int | None = None) -> None:
        """Blocks q = 0..count-1 of src[:, q*k:(q+1)*k] ([partitions, k]) land transposed ([k, partitions])
        at dst_tile[:, base + q*step] (step = partitions, or `stride`)."""
        src_tile, src_c0 = self._split(src)
        dt = self.tile_dtype.get(self._base(src_tile), "kernel")
        item = 4 if dt == "f32" or self.dtype == "float32" else 2
        step = stride or partitions
        group = 1
        if stride is None:
            for g in (4, 2, 1):
                if count % g == 0 and g * partitions * item <= _PSUM_BANK_BYTES:
                    group = g
                    break
        with self.loop("i_q", count // group):
            tp = self.fresh("tp")
            self.line(f"{tp} = nl.ndarray(({k}, {group * partitions}), dtype={_DTYPE[dt]}, buffer=nl.psum)")
            for u in range(group):
                c = f"{src_c0}i_q * {group * k} + {u * k}" if group > 1 else f"{src_c0}i_q * {k}"
                c = c.replace(" + 0", "")
                self.line(f"nisa.nc_transpose(dst={tp}[0:{k}, {u * partitions}:{(u + 1) * partitions}], "
                          f"data={src_tile}[0:{partitions}, {c}:{c} + {k}])")
            d0 = f"{base} + i_q * {group * step}" if count // group > 1 else base
            self.line(f"nisa.tensor_copy(dst={dst_tile}[0:{k}, {d0}:{d0} + {group * partitions}], src={tp})")

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
               lhs_col: str, rhs_col: str) -> None:
        self.line(f"nisa.memset(dst={acc}, value=0.0)")
        with self.loop("i_kt", k_tiles):
            self.line(f"nisa.nc_matmul(dst={acc}[0:{partitions}, 0:{n}], "
                      f"stationary={lhsT}[0:{k}, {lhs_col}:{lhs_col} + {partitions}], "
                      f"moving={rhs}[0:{k}, {rhs_col}:{rhs_col} + {n}])")

    def steps(self, lowering, operands: list, dst: str, partitions: int, width: int) -> None:
        """Print a lowering's steps: operand i is operands[i] (a tile expression or a number)."""
        results: list[str] = []
        for si, step in enumerate(lowering.steps):
            if step.instruction in ("nc_matmul", "nc_transpose"):
                raise UnsupportedError(f"{step.instruction} inside an element-wise lowering")
            final = lowering.output_step if isinstance(lowering.output_step, int) else lowering.output_step[0]
            out = dst if si == final else None
            if out is None:
                reduces = step.instruction in ("tensor_reduce",) or any(h == "axis" for h, _ in step.holes)
                out = self.view(self.alloc("tmp", partitions, 1 if reduces else width, "f32"),
                                partitions, "0", 1 if reduces else width)
            kwargs = [f"dst={out}"]
            for slot, arg in step.args:
                kwargs.append(f"{slot}={self._arg(slot, arg, operands, results, partitions, width)}")
            for hole, value in step.holes:
                if hole == "axis":
                    value = 1  # the free axis of a [P, C] tile
                if hole == "func":  # activation's function; None is the identity
                    hole, value = "op", ("copy" if value is None else value)
                if value is None:
                    continue
                kwargs.append(f"{hole}={self._hole(hole, value)}")
            if step.instruction == "tensor_reduce" and not any(h == "axis" for h, _ in step.holes):
                kwargs.append("axis=1")
            self.line(f"nisa.{step.instruction}({', '.join(kwargs)})")
            results.append(out)

    def _hole(self, hole: str, value) -> str:
        if hole.startswith("op") or hole in ("reduce_op",):
            return _nl(value)
        if isinstance(value, (bool, int, float)):
            return repr(value)
        return repr(value) if not isinstance(value, str) else _nl(value)

    def _arg(self, slot: str, arg, operands, results, partitions, width) -> str:
        if arg.kind == "operand":
            v = operands[arg.index]
        elif arg.kind == "step":
            v = results[arg.index]
        else:
            v = float(arg.value.evaluate(self.sizes)) if hasattr(arg.value, "evaluate") else float(arg.value)
        if isinstance(v, (int, float)):
            if slot in _TENSOR_SLOTS:
                t = self.alloc("const", partitions, width, "f32")
                self.line(f"nisa.memset(dst={t}, value={float(v)!r})")
                return self.view(t, partitions, "0", width)
            return repr(float(v))
        return v
