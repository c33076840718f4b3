"""The numerical check of one candidate: which rows run, against what reference, at what tolerance.

A candidate runs with seeded random inputs; its outputs are compared, element by element, with the
float64 reference of the variant it implements, under the bounds floating-point error analysis
gives a kernel with its own roundings (axon.semantics.bounds; the values it keeps in the kernel's
dtype from tiling.build.narrow_values): a candidate is held to what its precision and its passes
allow, so no correct candidate fails, and its report says how wide that was.

When the whole case costs more multiply-adds than the check budget, the candidate's own full-size
kernel is emitted with its row loop restricted to some row blocks (KernelBuilder `rows`): the
first, the last, and blocks spread evenly between, as many as the budget allows and at least two.
A checked block is a multiple of every pass's row block, so each pass computes exactly the rows
the next one reads; the code and HBM addressing are the full kernel's. Rows are independent (every
computed value of a kernel carries the row dimension at axis -2: fusion.nodes.RowWorld), so the
reference is the program on the inputs' same rows, all at once, with its positions along the rows
(an arange: a causal mask) each the row's own index and a size read as a number (t - s) at the
full size (rows_window). Every pass's row tile divides the row count
(tiling.space), so no row tile is partial; column edges (a shorter last column chunk or n tile)
lie inside every checked row.

When even the fewest row blocks cost more than the budget (a Llama-70B weight: 512 rows of
8192 x 28672 are 1.2e11 multiply-adds), the matmuls that make the outputs' columns also run only
some of their column blocks, picked the same way; the kernel's other passes and phases run whole,
reading the skipped columns unwritten (the simulator's partial mode), which reach only the
skipped outputs. Columns are independent where every operator keeps the column index apart
(axon.semantics.batch: the outputs' last axis as a batch axis; no reduction, contraction or
position reads across it), so the reference is the program on the inputs' same columns.

Invariant: shared stage; the target is reached through `target.run` (select.check_candidate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from axon.errors import UnsupportedError
from axon.fusion.nodes import RowWorld, phases
from axon.ir import Graph, Node, make_node
from axon.search.candidates import Candidate, emit, packed_world
from axon.search.roofline import matmul_macs
from axon.search.select import Check, check_candidate, compare, start_check_run
from axon.semantics import batch
from axon.semantics.bounds import Tolerance, kernel_reference
from axon.semantics.evaluate import evaluate
from axon.semantics.ops import ConstParams, Op
from axon.semantics.sizes import Size
from axon.tiling.build import narrow_values

MIN_BLOCKS = 2  # a partial check runs at least the first and the last row block
# What the reference costs per element of a computed value, in multiply-adds: its value and error
# bounds are a dozen float64 passes, against one fused multiply-add of a BLAS product. Fitted on
# benchmarks/results/check_speed.md (the reference as the check runs it, 2026-12-07): matmul at
# 1024 x 8192 x 28672 in 20.9 s and gqa on 640 rows of 64 heads x 8192 keys in 74.8 s give
# 2.6e-11 s per multiply-add and 5.4e-8 s per element (gated_mlp on 1024 rows: 65 s predicted,
# 61.1 s measured). Attention's scores are most of its check: counted by multiply-adds alone,
# five 128-row blocks of gqa at 70B looked cheaper than two 512-row blocks of a matmul.
ELEMENT_MACS = 2000


@dataclass(frozen=True)
class CheckedRows:
    """The rows (or columns) of a partial check, in the program's row (column) dimension."""

    dim: str
    rows: int  # the dimension's size
    block: int  # rows per checked block
    ranges: tuple[tuple[int, int], ...]  # [start, stop) of the rows checked, merged where adjacent
    kind: str = "rows"  # or "columns"

    @property
    def checked(self) -> int:
        return sum(e - s for s, e in self.ranges)

    def describe(self) -> str:
        shown = self.ranges if len(self.ranges) <= 4 else self.ranges[:2] + (None,) + self.ranges[-1:]
        spans = ", ".join("..." if r is None else f"{r[0]}:{r[1]}" for r in shown)  # all of them: to_json
        return (f"{self.dim} {self.kind} {spans} of {self.rows} ({self.checked // self.block} of "
                f"{self.rows // self.block} blocks of {self.block} {self.kind}: the first, the last and spread between)")

    def to_json(self) -> dict:
        return {"dim": self.dim, "of": self.rows, "block": self.block, "ranges": [list(r) for r in self.ranges]}


def reference_work(graph: Graph, sizes: Mapping[str, int]) -> float:
    """What the check's reference of `graph` costs at `sizes`, in multiply-adds: its matmuls',
    and ELEMENT_MACS for each element of every value it computes."""
    elements = sum(math.prod(d.evaluate_int(sizes) for d in n.shape)
                   for n in graph.nodes() if n.op not in (Op.INPUT, Op.CONST))
    return matmul_macs(graph, sizes) + ELEMENT_MACS * elements


def plan_rows(graph: Graph, cand: Candidate, sizes: Mapping[str, int], macs: float,
              budget: float, work: Optional[float] = None) -> Optional[CheckedRows]:
    """None when the whole case fits the budget of multiply-adds (or has a single block); else the
    row blocks to check: evenly spread, first and last included, as many as the budget allows of
    `work` (reference_work; default `macs`)."""
    if macs <= budget or cand.options.fold:  # folded heads: rows of one head are not contiguous
        return None
    dim = _row_symbol(graph)
    world, g, wsizes = packed_world(graph, cand.options.packed, sizes)
    rows_w = world.row.evaluate_int(wsizes)  # in the kernel's (packed) rows
    unit = math.lcm(*(p.tiling.row_tile * p.tiling.row_block for p in cand.passes))
    block_work = (macs if work is None else work) * unit / rows_w
    ranges = _spread_blocks(rows_w // unit, block_work, budget, unit * g)  # g program rows per packed row
    return None if ranges is None else CheckedRows(dim, sizes[dim], unit * g, ranges)


def plan_columns(graph: Graph, cand: Candidate, sizes: Mapping[str, int], macs: float,
                 budget: float, work: Optional[float] = None) -> Optional[CheckedRows]:
    """None when `macs` (what the checked rows cost) fits the budget, or when the candidate's
    columns cannot be checked in part; else the column blocks of the matmuls that make the outputs'
    columns to check (a multiple of each one's block), spread as plan_rows spreads rows over `work`
    (default `macs`). Those matmuls skip the other blocks; a row phase still reads whole rows, the
    skipped columns unwritten (the simulator's partial mode), which reach only skipped outputs."""
    if macs <= budget or cand.options.packed > 1 or cand.options.fold:
        return None
    dim = _column_symbol(graph)
    if dim is None:
        return None
    n_cols = sizes[dim]
    blocks = []
    for p in cand.passes:
        if p.tiling.kv_chunk:  # an online walk restricts no columns
            return None
        for ph in phases(RowWorld.of(graph), p.group):
            makes = [mm.shape[-1].as_symbol() == dim for mm in ph.matmuls]
            if any(makes) and not all(makes):
                return None
            if any(makes):
                blocks.append(p.tiling.n_block_for(n_cols))
    if not blocks:
        return None
    block = math.lcm(*blocks)
    ranges = _spread_blocks(n_cols // block, (macs if work is None else work) * block / n_cols, budget, block)
    return None if ranges is None else CheckedRows(dim, n_cols, block, ranges, "columns")


def _spread_blocks(n: int, block_macs: float, budget: float, width: int) -> Optional[tuple[tuple[int, int], ...]]:
    """[start, stop) ranges of the blocks (of `width`) to check of `n`: as many as the budget
    allows at `block_macs` each, at least MIN_BLOCKS, evenly spread with the first and the last;
    None when that is all of them."""
    k = min(n, max(MIN_BLOCKS, int(budget / block_macs)))
    if k >= n:
        return None
    ranges: list[list[int]] = []
    for b in sorted({round(i * (n - 1) / (k - 1)) for i in range(k)}):
        s, e = b * width, (b + 1) * width
        if ranges and ranges[-1][1] == s:
            ranges[-1][1] = e
        else:
            ranges.append([s, e])
    return tuple((s, e) for s, e in ranges)


def _column_symbol(graph: Graph) -> Optional[str]:
    """The outputs' column dimension when every operator keeps its index apart, else None."""
    syms = {o.shape[-1].as_symbol() if o.shape else None for o in graph.outputs}
    dim = syms.pop() if len(syms) == 1 else None
    if dim is None:
        return None
    where = batch.positions(graph, dim)
    if where is None or any(where[o] != o.rank - 1 for o in graph.outputs):
        return None
    return dim


def _row_symbol(graph: Graph) -> str:
    row = RowWorld.of(graph).row
    dim = row.as_symbol()
    if dim is None:
        raise UnsupportedError(f"the full-size check is too large and the row dimension {row} is not one symbol "
                               "to check part of")
    return dim


def _row_axis(shape, row) -> Optional[int]:
    axes = [i for i, d in enumerate(shape) if d == row]
    if len(axes) > 1:
        raise UnsupportedError(f"a tensor of shape {shape} has the row dimension on several axes")
    return axes[0] if axes else None


def _take(array: np.ndarray, axis: Optional[int], rows: Optional[CheckedRows]) -> np.ndarray:
    if axis is None or rows is None:
        return array
    # slices are views: the blocks are copied once, by the concatenation (at Llama sizes each copy
    # of a weight's columns is hundreds of MB of fresh memory)
    lead = (slice(None),) * axis
    return np.concatenate([array[lead + (slice(s, e),)] for s, e in rows.ranges], axis=axis)


def _shape(node, binding) -> tuple[int, ...]:
    return tuple(d.evaluate_int(binding) for d in node.shape)


def check(target, name: str, graph: Graph, cand: Candidate, sizes: Mapping[str, int], dtype: str, lowerer,
          data: Mapping[str, np.ndarray], rows: Optional[CheckedRows], outputs=None,
          columns: Optional[CheckedRows] = None, original: Optional[Graph] = None) -> Check:
    """Run `cand` (its kernel, or its kernel on `rows` and `columns` only) on `data` against the
    reference of `graph` (the variant it implements) under the bounds of its own precision model;
    `outputs`: what its full kernel already gave on `data` (then nothing runs). `original`: the
    program as written, when `graph` is a rewrite of it: where its value is finite, the variant's
    must be within the same bounds of it, or the check fails (a wrong rewrite is caught here even
    if its proof was wrong)."""
    world, g, wsizes = packed_world(graph, cand.options.packed, sizes, cand.options.fold)
    narrow = narrow_values(cand.passes, cand.options)

    def reference():
        if rows is None and columns is None:
            return _reference(graph, world.graph, g, cand, dict(data), sizes, dtype, narrow)
        return _reference_on_part(graph, world.graph, g, cand, data, sizes, dtype, narrow, rows, columns)
    def reference_of_the_program():
        want, tol = reference()
        if original is not None:
            differs = _differs_from_original(original, want, tol, data, sizes, rows, columns)
            if differs:
                return None, Check(False, float("inf"), 0.0, differs, tolerance=tol.summary())
        return want, tol
    if outputs is not None:
        want, tol = reference_of_the_program()
        return tol if want is None else compare(outputs, want, tol)
    source = cand.source
    outputs_of = None
    if rows is not None or columns is not None:
        row_axes = _out_axes(graph) if rows is not None else [None] * len(graph.outputs)
        col_axes = [o.rank - 1 if columns is not None else None for o in graph.outputs]
        block_rows = None if rows is None else tuple((s // g, e // g) for s, e in rows.ranges)
        block_cols = None if columns is None else (columns.dim, columns.ranges)
        source = emit(name, target, world, cand, wsizes, dtype, lowerer, rows=block_rows, columns=block_cols)
        outputs_of = lambda outs: [_take(_take(np.asarray(o), r, rows), c, columns)
                                   for o, r, c in zip(outs, row_axes, col_axes)]
    # the kernel runs in its sandbox while this process computes the reference: at Llama-70B
    # sizes each takes tens of seconds, and neither needs the other
    run = start_check_run(target, source, dict(data), partial=outputs_of is not None)
    try:
        want, tol = reference_of_the_program()
    except BaseException:
        run.cancel()
        raise
    if want is None:
        run.cancel()
        return tol
    return check_candidate(target, source, dict(data), want, tol, outputs_of, started=run)


def _differs_from_original(original: Graph, want, tol: Tolerance, data, sizes, rows: Optional[CheckedRows],
                           columns: Optional[CheckedRows]) -> str:
    """Where the program as written differs from the variant's reference by more than the bounds
    on its finite values, said in one line; "" where it does not, or where the checked part of it
    cannot be taken (its columns not independent)."""
    ref_in, binding, graph = dict(data), dict(sizes), original
    if rows is not None:
        try:
            row = RowWorld.of(original).row
            ref_in = {n.params.name: _take(ref_in[n.params.name], _row_axis(n.shape, row), rows)
                      for n in original.inputs}
            graph, _ = rows_window(original, rows.dim, rows.ranges, rows.rows)
        except UnsupportedError:  # no row structure to take a part of: the variant's check stands alone
            return ""
        binding[rows.dim] = rows.checked
    if columns is not None:
        where = batch.positions(original, columns.dim)
        if where is None:
            return ""
        ref_in = {n.params.name: _take(ref_in[n.params.name], where.get(n), columns) for n in original.inputs}
        binding[columns.dim] = columns.checked
    for i, (got, w, bound) in enumerate(zip(evaluate(graph, ref_in, binding), want, tol.bounds)):
        got = np.asarray(got, np.float64).reshape(np.shape(w))
        with np.errstate(invalid="ignore"):
            off = np.isfinite(got) & ~(np.abs(np.asarray(w, np.float64) - got) <= bound)
        if off.any():
            at = tuple(int(k) for k in np.argwhere(off)[0])
            return (f"the variant it implements differs from the program as written at output {i} {at} "
                    f"({float(np.asarray(w)[at]):.6g} vs {float(got[at]):.6g}, {int(off.sum())} element(s) past "
                    f"their bound): a rewrite it applies is wrong there")
    return ""


def _reference(graph: Graph, kernel_graph: Graph, g: int, cand: Candidate, ref_in: dict, sizes, dtype: str,
               narrow) -> tuple[tuple[np.ndarray, ...], Tolerance]:
    """The float64 reference of `kernel_graph` (`graph` as the kernel computes it: packed or
    folded views) on `ref_in` at `sizes`, shaped as `graph`'s outputs, and its error bounds."""
    _, _, binding = packed_world(graph, g, sizes, cand.options.fold)
    # a packed or folded graph computes on views of the same tensors ([m/g, g*c]; [.., 1, h*s, c])
    ref_in = {n.params.name: ref_in[n.params.name].reshape(_shape(n, binding)) for n in kernel_graph.inputs}
    want, tol = kernel_reference(kernel_graph, ref_in, dtype, narrow, binding)
    shapes = [_shape(o, sizes) for o in graph.outputs]
    return tuple(w.reshape(sh) for w, sh in zip(want, shapes)), tol.reshaped(shapes)


def _reference_on_part(graph, kernel_graph, g, cand, data, sizes, dtype, narrow, rows: Optional[CheckedRows],
                       columns: Optional[CheckedRows]):
    """The reference on the checked rows and columns only, all at once (at Llama sizes each run of
    rows would read the whole weight again): the program on those rows, with their positions where
    it reads them (rows_window), and on the inputs' same columns."""
    ref_in, sizes = dict(data), dict(sizes)
    if rows is not None:
        row = RowWorld.of(graph).row
        in_axes = {n.params.name: _row_axis(n.shape, row) for n in graph.inputs}
        ref_in = {k: _take(v, in_axes[k], rows) for k, v in ref_in.items()}
        kernel_graph, moved = rows_window(kernel_graph, rows.dim, rows.ranges, rows.rows)
        narrow = frozenset(moved.get(n, n) for n in narrow)
        sizes[rows.dim] = rows.checked
    if columns is not None:
        where = batch.positions(graph, columns.dim)
        at = {n.params.name: where.get(n) for n in graph.inputs}
        ref_in = {k: _take(v, at.get(k), columns) for k, v in ref_in.items()}
        sizes[columns.dim] = columns.checked
    return _reference(graph, kernel_graph, g, cand, ref_in, sizes, dtype, narrow)


def rows_window(graph: Graph, dim: str, ranges, rows: int) -> tuple[Graph, dict[Node, Node]]:
    """`graph` computing the rows `ranges` ((start, stop), ...) of its row dimension `dim` (of
    `rows`), one range after another, with `dim` then bound to their count; and the nodes it
    changed, old to new. Rows are independent, but a position of one (an arange of `dim`: a causal
    mask) and the size read as a number (the offset t - s) say where the row is: the first is the
    row's own index, the second stays `rows`."""
    moved: dict[Node, Node] = {}
    for node in graph.nodes():
        if node.op is Op.CONST and isinstance(node.params.value, Size) and dim in node.params.value.symbols:
            moved[node] = Node(Op.CONST, (), ConstParams(node.params.value.bind({dim: rows})), node.shape)
        elif node.op is Op.IOTA and dim in node.params.size.symbols:
            if node.params.size.as_symbol() != dim:
                raise UnsupportedError(f"arange({node.params.size}) cannot be checked on some rows of {dim}")
            moved[node] = _positions(node, ranges)
        elif any(i in moved for i in node.inputs):
            moved[node] = make_node(node.op, [moved.get(i, i) for i in node.inputs], node.params)
    outputs = tuple(moved.get(o, o) for o in graph.outputs)
    return Graph(graph.inputs, outputs, graph.constraints), moved


def _positions(iota: Node, ranges) -> Node:
    """The row positions of `ranges` laid end to end, from `iota` (0, 1, ... over them): i plus the
    shift of the range that i falls in, a step function of i (the ranges' shifts only grow)."""
    def const(v):
        return Node(Op.CONST, (), ConstParams(v), ())

    out, first, shift = iota, 0, 0  # first: where the range starts among the checked rows
    for start, stop in ranges:
        step = start - first - shift
        if step:
            jump = const(step) if first == 0 else make_node(Op.MUL, [const(step), make_node(Op.GE, [iota, const(first)])])
            out = make_node(Op.ADD, [out, jump])
        shift += step
        first += stop - start
    return out


def _out_axes(graph: Graph) -> list[Optional[int]]:
    row = RowWorld.of(graph).row
    return [_row_axis(o.shape, row) for o in graph.outputs]
