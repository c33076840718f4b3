"""Node fusion: which operators of a program share one pass over the data, and in which phases.

A kernel Axon builds is a loop over *row tiles*: one dimension of the program (the row dimension
R) is spread over the target's partitions, every other dimension of a row value lies along the
free axis. `RowWorld.of(graph)` finds R and classifies each node:

  * row values: shape (*batch, R, C): per row tile a [P, C] tile (C = 1 for a per-row column);
  * vectors: rank-1 inputs (or leading-unit rows) broadcast across rows, e.g. a norm's gain g[n];
  * weights: the right operand of a matmul, an input (or the transpose of one) without R;
  * views: transposes and strided slices of inputs, absorbed into the loads that read them;
  * indices: functions of positions only (`axon.arange`, its reshapes, comparisons and sums of
    them with constants, e.g. a causal mask): nothing is loaded, an instruction that evaluates
    an affine predicate of its tile's positions reads them (tiling.positions);
  * constants.

`groups(world, mode)` partitions the compute nodes into passes; values that cross passes make an
HBM round trip. Mode "fused" keeps everything in one pass (intermediates stay on chip), "split"
starts a new pass at each matmul whose left operand another matmul produced, "unfused" gives
every operator its own pass (the direct lowering).

Within a pass, `phases(group)` orders the work: a *row phase* computes row operators tile by tile;
a *matmul phase* runs one or more matmuls that share their left operand and output width (the
gated projections share x), with an *epilogue* of element-wise operators applied to each output
chunk while it is on chip (node fusion of consecutive operators with compatible tiling).

Invariant: nothing here knows a target; the shapes and operator kinds decide everything.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from axon.errors import UnsupportedError
from axon.ir import Graph, Node, make_node, positional
from axon.semantics.ops import OP_SPECS, Op, OpKind, ReshapeParams
from axon.semantics.sizes import Size

ONE = Size.of(1)


@dataclass(frozen=True)
class RowWorld:
    graph: Graph
    row: Size
    batch: tuple[Size, ...]  # leading loop dimensions (those of the deepest row value)
    roles: dict  # Node -> "row" | "vector" | "weight" | "view" | "const" | "input" | "index"

    @staticmethod
    def of(graph: Graph) -> "RowWorld":
        out = graph.outputs[0]
        base = _untranspose(out)
        if base.rank < 2:
            raise UnsupportedError(f"output of rank {base.rank}: Axon's kernels need a row and a column axis")
        row = base.shape[-2]
        batch = _broadcast_batch([_untranspose(o).shape[:-2] for o in graph.outputs if _untranspose(o).rank >= 2])
        for o in graph.outputs[1:]:
            b = _untranspose(o)
            if b.rank < 2 or b.shape[-2] != row:
                raise UnsupportedError("outputs with different row dimensions cannot share one kernel")
            if not _batch_fits(b.shape[:-2], batch):
                raise UnsupportedError("outputs with different batch dimensions cannot share one kernel")
        roles: dict[Node, str] = {}
        nodes = graph.nodes()
        index = positional(nodes)
        for node in nodes:
            roles[node] = "index" if node in index else _role(node, row, roles)
        # a weight is whatever feeds a matmul's right slot: a value without the row axis, or an
        # input read only there (self-attention's V: its t axis may have the size of the rows)
        only_moving = {n.inputs[1] for n in nodes if n.op is Op.MATMUL} - {
            x for n in nodes for slot, x in enumerate(n.inputs) if not (n.op is Op.MATMUL and slot == 1)}
        for node in graph.nodes():
            if node.op is Op.MATMUL:
                rhs = node.inputs[1]
                if roles.get(rhs) == "row" and (rhs.shape[-2] != row or (rhs.op is Op.INPUT and rhs in only_moving)):
                    roles[rhs] = "weight"
                if roles.get(rhs) not in ("weight", "input", "view"):
                    if rhs.op is Op.INPUT or rhs is node.inputs[0]:  # x @ x: the rows are the weight too
                        raise UnsupportedError(f"matmul's right operand {_named(rhs)} is also its row operand "
                                               "(x @ x): a kernel tiles one operand's rows and streams the other "
                                               "whole; pass the weight as its own input")
                    raise UnsupportedError(f"matmul's right operand {_named(rhs)} is computed on chip; "
                                           "only inputs (or their transposes) can be moving operands")
        return RowWorld(graph, row, batch, roles)

    def role(self, node: Node) -> str:
        return self.roles[node]

    def compute_nodes(self) -> list[Node]:
        return [n for n in self.graph.nodes() if self.roles[n] == "row" and n.op is not Op.INPUT]

    def is_column(self, node: Node) -> bool:
        return node.rank >= 2 and node.shape[-1] == ONE and node.shape[-2] == self.row


def _named(node: Node) -> str:
    return f"input {node.params.name}" if node.op is Op.INPUT else node.op.value


def _broadcast_batch(shapes) -> tuple:
    """The batch loops of several outputs: each axis the one that is not 1 (aligned right)."""
    out: list = []
    for shape in shapes:
        shape = list(shape)
        if len(shape) > len(out):
            out = [ONE] * (len(shape) - len(out)) + out
        for i, d in enumerate(shape):
            j = len(out) - len(shape) + i
            if out[j] == ONE:
                out[j] = d
    return tuple(out)


def _batch_fits(shape, batch) -> bool:
    """A value's leading axes run in the kernel's batch loops: equal to them, or 1 (aligned right)."""
    if len(shape) > len(batch):
        return False
    return all(d == b or d == ONE for d, b in zip(shape, batch[len(batch) - len(shape):]))


def _untranspose(node: Node) -> Node:
    """The row value an output stores: itself, or what it transposes or squeezes (`is_squeeze`)."""
    if node.op is Op.TRANSPOSE and node.params.perm[-2:] == (node.rank - 1, node.rank - 2):
        return node.inputs[0]
    if is_squeeze(node):
        return node.inputs[0]
    return node


def is_squeeze(node: Node) -> bool:
    """A reshape that drops a trailing unit axis: [.., m, 1] -> [.., m], how a column is stored as
    a rank-1 output (search.optimize makes one of a reduction without keepdims)."""
    return node.op is Op.RESHAPE and node.inputs[0].shape == node.shape + (ONE,)


def columns_for_vectors(graph: Graph) -> Graph:
    """`graph` with each output that a reduction over the last axis without keepdims computes
    (and element-wise operators on such, with constants: [m] or [b, s] of a [b, s, d]) computed as
    the [.., 1] column instead, then squeezed (`is_squeeze`), and each such vector made a column
    again inside (`x.mean(-1)[:, None]`) the column itself: the same values; a kernel stores and
    broadcasts columns. Unchanged where there is none."""
    lifted: dict[Node, Optional[Node]] = {}

    def column(n: Node) -> Optional[Node]:
        if n not in lifted:
            lifted[n] = None
            kind = OP_SPECS[n.op].kind
            if kind is OpKind.REDUCE and not n.params.keepdims and n.params.axis == n.inputs[0].rank - 1 \
                    and n.inputs[0].rank >= 2:
                lifted[n] = make_node(n.op, list(n.inputs), replace(n.params, keepdims=True))
            elif kind is OpKind.ELEMENTWISE and n.rank >= 1:
                ins = [x if x.rank == 0 else column(x) for x in n.inputs]
                if all(x is not None for x in ins):
                    lifted[n] = make_node(n.op, ins, n.params)
        return lifted[n]

    # inside: a vector made a column again (x.mean(-1)[:, None]) is the column itself
    swap = {n: c for n in graph.nodes() if n.op is Op.RESHAPE and tuple(n.shape) == tuple(n.inputs[0].shape) + (ONE,)
            and n.inputs[0].rank >= 1 and (c := column(n.inputs[0])) is not None}
    memo: dict[Node, Node] = {}

    def rebuilt(n: Node) -> Node:
        if n not in memo:
            if n in swap:
                memo[n] = rebuilt(swap[n])
            else:
                ins = [rebuilt(x) for x in n.inputs]
                memo[n] = n if all(a is b for a, b in zip(ins, n.inputs)) else make_node(n.op, ins, n.params)
        return memo[n]

    outputs = []
    for o in graph.outputs:
        c = column(o) if o.rank >= 1 else None
        outputs.append(rebuilt(o) if c is None else make_node(Op.RESHAPE, [rebuilt(c)], ReshapeParams(o.shape)))
    if all(a is b for a, b in zip(outputs, graph.outputs)):
        return graph
    return Graph(graph.inputs, tuple(outputs), graph.constraints)


def _role(node: Node, row: Size, roles: dict) -> str:
    if node.op is Op.CONST:
        return "const"
    if node.op is Op.INPUT:
        if node.rank >= 2 and node.shape[-2] == row:
            return "row"
        if node.rank == 1 or all(d == ONE for d in node.shape[:-1]):
            return "vector"
        return "input"
    if node.op in (Op.TRANSPOSE, Op.SLICE, Op.RESHAPE):
        src = node.inputs[0]
        if roles.get(src) in ("row", "input", "vector") and src.op is Op.INPUT:
            return "view"
        if node.op is Op.TRANSPOSE and roles.get(src) == "row":
            return "row"  # a transposed output (stored transposed)
        if is_squeeze(node) and roles.get(src) == "row":
            return "row"  # a column output stored as a rank-1 tensor
        raise UnsupportedError(f"{node.op.value} of a computed value is not supported inside a kernel")
    if node.rank >= 2 and node.shape[-2] == row:
        return "row"
    shape = ", ".join(map(str, node.shape))
    if any(roles.get(x) == "vector" for x in node.inputs) and all(roles.get(x) in ("vector", "const") for x in node.inputs):
        raise UnsupportedError(f"operator {node.op.value} computes a ({shape}) vector from vector inputs, without "
                               f"the row axis {row}: a kernel computes per row tile; compute it in the caller and "
                               f"pass it as an input")
    raise UnsupportedError(f"operator {node.op.value} with shape ({shape}) has no "
                           f"row axis {row}: it cannot be tiled over rows")


def view_source(node: Node) -> Node:
    """The input a view reads."""
    while node.op in (Op.TRANSPOSE, Op.SLICE, Op.RESHAPE):
        node = node.inputs[0]
    return node


# --- passes (node fusion) ------------------------------------------------------------------
FUSION_MODES = ("fused", "split", "unfused")


@dataclass(frozen=True)
class Group:
    nodes: tuple[Node, ...]  # compute nodes of this pass, in topological order


def groups(world: RowWorld, mode: str) -> list[Group]:
    nodes = [n for n in world.compute_nodes() if not _is_output_transpose(world, n)]
    if mode == "unfused":
        return [Group((n,)) for n in nodes]
    if mode == "fused":
        return [Group(tuple(nodes))]
    if mode != "split":
        raise ValueError(mode)
    out, cur = [], []
    made_by_matmul: set[Node] = set()
    for n in nodes:
        if n.op is Op.MATMUL and n.inputs[0] in made_by_matmul and cur:
            out.append(Group(tuple(cur)))
            cur = []
        cur.append(n)
        if n.op is Op.MATMUL or any(i in made_by_matmul for i in n.inputs):
            made_by_matmul.add(n)
    out.append(Group(tuple(cur)))
    return out


def _is_output_transpose(world: RowWorld, node: Node) -> bool:
    """An output stored through a view of the value a pass computes: transposed, or squeezed."""
    return (node.op is Op.TRANSPOSE or is_squeeze(node)) and node in world.graph.outputs


# --- phases inside a pass ------------------------------------------------------------------
@dataclass
class Phase:
    kind: str  # "row" or "matmul"
    nodes: list[Node] = field(default_factory=list)  # row ops, or matmuls then epilogue ops
    matmuls: list[Node] = field(default_factory=list)
    epilogue: list[Node] = field(default_factory=list)


def is_rowwise(node: Node) -> bool:
    """Operators that work on a [rows, C] tile: element-wise, reductions/scans over the last axis,
    concatenations along it."""
    kind = OP_SPECS[node.op].kind
    if kind is OpKind.ELEMENTWISE:
        return True
    if node.op is Op.CONCAT:  # along the columns: assembled in the row's tile (tiling.build)
        return node.params.axis == node.rank - 1
    if kind in (OpKind.REDUCE, OpKind.SCAN):
        return node.params.axis == node.inputs[0].rank - 1
    return False


def phases(world: RowWorld, group: Group) -> list[Phase]:
    members = set(group.nodes)
    done: set[Node] = set()
    remaining = list(group.nodes)
    out: list[Phase] = []

    def ready(n: Node) -> bool:
        return all(i in done or i not in members for i in n.inputs)

    while remaining:
        rows = []
        progress = True
        while progress:  # the closure of ready row operators
            progress = False
            for n in remaining:
                if n.op is not Op.MATMUL and ready(n):
                    if not is_rowwise(n):
                        raise UnsupportedError(f"operator {n.op.value} ({n.params}) cannot be computed row by row")
                    rows.append(n)
                    done.add(n)
                    remaining.remove(n)
                    progress = True
                    break
        if rows:
            out.append(Phase("row", rows))
            continue
        mm = next((n for n in remaining if n.op is Op.MATMUL and ready(n)), None)
        if mm is None:
            raise UnsupportedError("no operator is ready: the program has a cycle or an unsupported dependency")
        phase = Phase("matmul")
        for n in list(remaining):
            if (n.op is Op.MATMUL and ready(n) and n.inputs[0] == mm.inputs[0]
                    and n.shape[-1] == mm.shape[-1]):
                phase.matmuls.append(n)
                done.add(n)
                remaining.remove(n)
        chunked = set(phase.matmuls)
        progress = True
        while progress:  # epilogue: element-wise consumers of the chunks
            progress = False
            for n in remaining:
                if (OP_SPECS[n.op].kind is OpKind.ELEMENTWISE and ready(n)
                        and any(i in chunked for i in n.inputs)
                        and all(i in chunked or world.is_column(i) or world.roles.get(i) in ("const", "vector", "index")
                                for i in n.inputs)
                        and n.shape[-1] == mm.shape[-1]):
                    phase.epilogue.append(n)
                    chunked.add(n)
                    done.add(n)
                    remaining.remove(n)
                    progress = True
                    break
        phase.nodes = phase.matmuls + phase.epilogue
        out.append(phase)
    return out


# --- column chunks of a row phase ------------------------------------------------------------
# A row too wide for on-chip memory is walked in column chunks. Element-wise operators and scans
# work chunk by chunk (a scan carries its running value into the next chunk); a reduction over the
# row accumulates one partial per chunk into a column, which is complete only when the walk ends,
# so whatever reads it walks the row again (a later *sweep*, recomputing the wide values it needs
# from the inputs instead of keeping whole rows).
@dataclass(frozen=True)
class Sweep:
    wide: tuple  # wide operators computed per chunk (topological; recomputed if an earlier sweep had them)
    reduce: tuple  # reductions accumulated across this sweep's chunks
    scans: tuple  # scans carried from chunk to chunk (a subset of `wide`)
    after: tuple  # column operators computable once this sweep ends


def combine_op(node: Node) -> Op:
    """The element-wise operator merging two partial results of a reduction or scan (sum -> add)."""
    return Op[OP_SPECS[node.op].scalar.name]


def combine_identity(node: Node) -> float:
    """The value a reduction's accumulator starts from (0 for sum, -inf for max)."""
    from axon.semantics.scalar import SCALAR_SPECS

    return SCALAR_SPECS[OP_SPECS[node.op].scalar].fold_identity


def is_wide(node: Node) -> bool:
    return node.shape[-1] != ONE


def chunk_plan(nodes, needed) -> tuple[tuple, list[Sweep]]:
    """(column operators computable before any sweep, the sweeps) for a row phase's `nodes`
    (topological) walked in column chunks; wide nodes of `needed` are made in their first sweep."""
    members = set(nodes)
    ready: dict[Node, int] = {}
    for n in nodes:
        r = max((ready.get(i, 0) for i in n.inputs), default=0)
        ready[n] = r + 1 if OP_SPECS[n.op].kind is OpKind.REDUCE else r
    kind = lambda n: OP_SPECS[n.op].kind
    reductions = [n for n in nodes if kind(n) is OpKind.REDUCE]
    wide = [n for n in nodes if is_wide(n)]
    count = max([ready[n] + 1 for n in wide if n in needed] + [ready[r] for r in reductions], default=0)
    columns = [n for n in nodes if not is_wide(n) and kind(n) is not OpKind.REDUCE]
    before = tuple(c for c in columns if ready[c] == 0)
    sweeps = []
    for s in range(count):
        red = [r for r in reductions if ready[r] == s + 1]
        targets = {r.inputs[0] for r in red if r.inputs[0] in members} | {n for n in wide if n in needed and ready[n] == s}
        todo, closure = list(targets), set()
        while todo:
            n = todo.pop()
            if n in closure or n not in members or not is_wide(n):
                continue
            closure.add(n)
            todo.extend(n.inputs)
        ws = tuple(n for n in nodes if n in closure)
        sweeps.append(Sweep(ws, tuple(red), tuple(n for n in ws if kind(n) is OpKind.SCAN),
                            tuple(c for c in columns if ready[c] == s + 1)))
    return before, sweeps
