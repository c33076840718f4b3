"""From a tiled, fused program to kernel text, through a target's emitter.

`build_kernel(world, passes, sizes, lower, emitter, ...)` walks each pass (a fusion group and its
tiling) and drives the emitter's verbs: loops, on-chip allocations, DMA loads and stores, layout
moves (transposes onto the partition axis), matmul accumulation and, for every operator, the
instruction `Step`s of its lowering. Loop structure per pass:

    for batch...:                 (leading dimensions, e.g. kv heads and groups)
      for rb in row blocks:       (row_block row tiles of row_tile rows)
        row phase:    for r in row tiles: load, compute the row operators on [P, C] tiles,
                      keep what later phases need (block buffers, transposed stationaries);
                      with column chunks (tiling.col_chunk), per sweep of fusion.nodes.chunk_plan:
                        for c in chunks (and the shorter last one): load, compute, store; fold
                        reductions into accumulator columns, carry scans into the next chunk
                        then the column operators the sweep completed
        matmul phase: for nb in weight blocks: load weight blocks (shared by the block's rows)
                        for r, for nt: accumulate over K, apply the epilogue on the chunk,
                        pack and store / keep

Invariant: shared stage. Everything target-specific (instruction syntax, memories, how a
transpose or a broadcast is done) is behind the emitter's verbs; this module sees only shapes,
tilings and the lowerings' steps.
"""
from __future__ import annotations

import itertools
import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from axon.errors import UnsupportedError
from axon.fusion.nodes import (ONE, Group, RowWorld, chunk_plan, combine_identity, combine_op, is_squeeze, is_wide,
                               phases, view_source)
from axon.ir import Graph, Node, const_node, input_node, make_node
from axon.semantics.algebra import const_value
from axon.semantics.ops import AxisParams, Op
from axon.semantics.sizes import Size
from axon.tiling.online import (chunk_state, chunk_state_from_parts, merge_lemma, merge_nodes, online_softmax,
                                partial_max_lemma)
from axon.tiling.positions import masked_prefix, position_memories, predicate
from axon.tiling.space import (Tiling, chunk_dim, column_slice, concrete, divisor_at_most, strided_columns,
                               weights_shared_from)


@dataclass(frozen=True)
class Pass:
    group: Group
    tiling: Tiling


@dataclass(frozen=True)
class Options:
    stationary: str = "pe"  # how an input's rows reach the contraction layout: "pe" | "dma"
    # how an input a matmul reads transposed as its moving operand (attention's keys: k^T) reaches
    # the contraction layout: Tensor Engine transposes of the rows loaded ("pe") or DMA transposes
    # on the way in ("dma", where the target has them)
    weights: str = "pe"
    engines: str = "default"  # "default": each instruction on its usual engine; "balanced": the emitter
    # spreads element-wise instructions over the engines that can run them (where the target can)
    lowering: int = 0  # which lowering alternative of each phase's program (Lowerer.program `alt`)
    # wide intermediates (anything more than one column per row) in "f32" or in the "kernel"'s
    # dtype: half the bytes, and bf16 element-wise instructions take their fast paths; per-row
    # statistics and accumulators stay f32. The numerical check bounds it with those roundings
    # (narrow_values), so it is accepted when correct, and reports how much wider its bound is
    precision: str = "f32"
    packed: int = 1  # rows per partition (tiling.packing): the passes see [m/g, g*c] views of HBM
    fold: int = 0  # heads folded into the rows (tiling.packing.fold_heads): the passes see
    # [.., 1, h*s, c] views of the [.., h, s, c] row tensors; 0: not folded
    paired: bool = False  # an online walk over folded heads with two kv heads per row tile
    # (tiling.packing: head pairing; the row tensors seen as [.., kv/2, 1, 2*h*s, c])


# A causal pass's runs of row blocks are loop nests of their own, one after another: each fills
# and drains its pipeline and loads its keys, which finer runs pay for against the masked scores
# they skip. Measured (trn2 model, causal GQA, 128-row blocks, keys by DMA): s = t = 8192 takes
# 39.2 / 33.3 / 34.6 / 39.6 ms with 64 / 32 / 16 / 8 runs (64 also time 18% under their full run
# when loop-sampled); s = t = 2048 takes 1200.6 / 1266.8 / 1419.1 us with 16 / 8 / 4.
MAX_CAUSAL_RUNS = 32


def narrow_values(passes, options: Options) -> frozenset:
    """The computed values a kernel built from `passes` with `options` may hold in the kernel's
    dtype rather than float32: the precision model its numerical check bounds it by
    (axon.semantics.bounds). With precision "kernel", every one (wide tiles and block buffers take
    the kernel's dtype); otherwise those another pass reads back from HBM (scratch is in the
    kernel's dtype) and matmul stationary operands (transposed in the kernel's dtype for the
    Tensor Engine). Outputs are rounded by their store."""
    computed = [n for p in passes for n in p.group.nodes if n.op not in (Op.INPUT, Op.CONST)]
    if options.precision == "kernel":
        return frozenset(computed)
    owner = {n: pi for pi, p in enumerate(passes) for n in p.group.nodes}
    crossing = {x for pi, p in enumerate(passes) for n in p.group.nodes for x in n.inputs
                if x in owner and owner[x] != pi}
    stationary = {n.inputs[0] for n in computed if n.op is Op.MATMUL and n.inputs[0] in owner}
    return frozenset(n for n in crossing | stationary if n.op not in (Op.INPUT, Op.CONST))


def _ex(*terms) -> str:
    """A readable sum of index terms: _ex(("i_rb", 512), ("i_r", 128), 64) -> 'rb * 512 + r * 128 + 64'."""
    parts, const = [], 0
    for t in terms:
        if isinstance(t, tuple):
            var, k = t
            if k == 0:
                continue
            parts.append(var if k == 1 else f"{var} * {k}")
        else:
            const += t
    if const or not parts:
        parts.append(str(const))
    return " + ".join(parts)


def inplace_plan(nodes, block, trans, outputs, hbm, cols) -> dict:
    """node -> the operand computed earlier in the same phase whose f32 tile it may overwrite:
    same width, not kept for later phases, not stored, and read last by this node."""
    last: dict = {}
    for i, n in enumerate(nodes):
        for x in n.inputs:
            last[x] = i
    own = set(nodes)
    out = {}
    for i, n in enumerate(nodes):
        if n.op is Op.MATMUL:
            continue
        for x in n.inputs:
            if (x in own and last.get(x) == i and cols(x) == cols(n) and x not in block and x not in trans
                    and x not in outputs and x not in hbm):
                out[n] = x
                break
    return out


class KernelBuilder:
    def __init__(self, world: RowWorld, passes: list[Pass], sizes: Mapping[str, int],
                 lower: Callable[[Node], object], emitter, options: Options = Options(), rows=None,
                 columns=None):
        """`rows`: [start, stop) ranges of the row dimension, each a multiple of every pass's block:
        the kernel runs only the row blocks inside them (a numerical check's kernel: the same code
        and HBM addressing as the full kernel, on part of its rows). `columns`: (a column
        dimension, ranges of it), each a multiple of the column block of the matmuls whose columns
        it is: those matmuls run only the column blocks inside them."""
        self.w, self.passes, self.sizes, self.lower, self.em, self.opt = world, passes, dict(sizes), lower, emitter, options
        self.program_sizes = dict(sizes)  # never rebound (self.sizes is, for a causal pass's row blocks)
        self.seen = None  # in a causal pass's run of row blocks: (its Prefix, the run's first row)
        self.nests = 0  # loop nests (passes, causal runs) begun so far
        self.rows, self.columns = rows, columns
        self.head = None  # in a paired walk: the head (0, 1) of the pair whose weights are addressed
        self.lowerer = getattr(lower, "__self__", lower)  # the Lowerer (given, or behind its bound `lower`)
        if hasattr(emitter, "balance"):
            emitter.balance = options.engines == "balanced"
        if hasattr(emitter, "wide_dtype"):
            emitter.wide_dtype = options.precision
        self.hbm: dict[Node, str] = {}  # node -> HBM tensor name (inputs, scratch)
        self.outputs: dict[Node, tuple[str, bool]] = {}  # node -> (output name, stored transposed)
        self.vectors: dict[Node, str] = {}

    # -- sizes ------------------------------------------------------------------------------
    def c(self, size) -> int:
        return concrete(size, self.sizes)

    def cols(self, node: Node) -> int:
        return self.c(node.shape[-1])

    # -- the kernel -------------------------------------------------------------------------
    def build(self, name: str, header: list[str]) -> str:
        g = self.w.graph
        em = self.em
        params = [n.params.name for n in g.inputs]
        for n in g.inputs:
            self.hbm[n] = self._packed_view(n.params.name, n)
        em.begin(name, params, header, [self._caller_shape(n) for n in g.inputs])
        out_names = []
        for i, o in enumerate(g.outputs):
            oname = f"out{i}" if len(g.outputs) > 1 else "out"
            em.hbm(oname, self._caller_shape(o), "kernel", output=True)
            if is_squeeze(o):  # a column stored as a rank-1 tensor: the passes address its [.., m, 1] view
                src = o.inputs[0]
                self.outputs[src] = (f"{oname}.reshape(({', '.join(str(self.c(d)) for d in src.shape)}))", False)
                out_names.append(oname)
                continue
            src = o.inputs[0] if (o.op is Op.TRANSPOSE and self.w.roles[o] == "row") else o
            self.outputs[src] = (self._packed_view(oname, o), src is not o)
            out_names.append(oname)
        consumers: dict[Node, set[int]] = {}
        owner: dict[Node, int] = {}
        for pi, p in enumerate(self.passes):
            for n in p.group.nodes:
                owner[n] = pi
                for x in n.inputs:
                    consumers.setdefault(x, set()).add(pi)
        for n, users in consumers.items():
            if n in owner and any(u != owner[n] for u in users) and n not in self.hbm:
                self.hbm[n] = em.fresh("scratch")
                em.hbm(self.hbm[n], [self.c(s) for s in n.shape], "kernel", output=False)
        for v in sorted({x for p in self.passes for n in p.group.nodes for x in n.inputs
                         if self.w.roles.get(x) == "vector"}, key=lambda v: v.params.name):
            self.vectors[v] = em.fresh(f"{v.params.name}_rows")
            em.broadcast_vector(self.vectors[v], v.params.name, self.cols(v), self.rows_tile())
        for pi, p in enumerate(self.passes):
            prefix = self._masked_prefix(p)
            if p.tiling.kv_chunk:
                self.emit_pass_online(pi, p, consumers, owner)
            elif prefix is None:
                self.emit_pass(pi, p, consumers, owner)
            else:
                self.emit_pass_prefixed(pi, p, prefix, consumers, owner)
        return em.finish(out_names)

    def rows_tile(self) -> int:
        return self.passes[0].tiling.row_tile

    def _begin_region(self) -> None:
        """A loop nest of its own starts (a pass, a causal pass's run): the emitter balances its
        engines within it (where it balances at all). The first one shares its region with the
        kernel's set-up before it (broadcast vectors), which it waits for."""
        begin = getattr(self.em, "begin_region", None)
        if begin is not None and self.nests:
            begin()
        self.nests += 1

    # -- HBM indexing ---------------------------------------------------------------------------
    def hbm_ref(self, node: Node, rows: str, P: int, cols: str, transposed=False) -> str:
        """`name[b0, b1, rows, cols]` for an HBM tensor holding node's value (or an input it views)."""
        src = view_source(node) if self.w.roles.get(node) == "view" else node
        name = self.hbm[src]
        nb = src.rank - 2
        batch = []
        wb = self.w.batch
        for j in range(nb):
            wj = len(wb) - nb + j
            size = self.c(src.shape[j])
            batch.append("0" if size == 1 else self._batch_index(wj, src))
        r = f"{rows}:{rows} + {P}" if P > 1 else rows
        idx = batch + ([cols, r] if transposed else [r, cols])
        return f"{name}[{', '.join(idx)}]"

    # -- one pass ---------------------------------------------------------------------------
    def emit_pass(self, pi: int, p: Pass, consumers, owner, only=None, runs=None):
        """One pass: its batch loops, the weights they share, and the loop over row blocks (`only`:
        the blocks to emit, default all or a check's; `runs`: how many the full kernel runs)."""
        em, w, t = self.em, self.w, p.tiling
        self._begin_region()
        members = set(p.group.nodes)
        phs = phases(w, p.group)
        P, BM = t.row_tile, t.row_block
        R = self.c(w.row)
        matmul = any(n.op is Op.MATMUL for n in p.group.nodes)
        em.comment(f"pass {pi + 1}: " + ", ".join(n.op.value for n in p.group.nodes)
                   + f"  (rows {P} x {BM} per block"
                   + (f", n_tile {t.n_tile}, n_block {t.n_block or 'all'}" if matmul else "")
                   + (f", column chunks of {t.col_chunk})" if t.col_chunk else ")"))
        # which values later phases need, and how
        phase_of = {n: i for i, ph in enumerate(phs) for n in ph.nodes}
        stationary = {mm.inputs[0] for ph in phs for mm in ph.matmuls}
        later: dict[Node, bool] = {}
        for i, ph in enumerate(phs):
            for n in ph.nodes:
                for x in n.inputs:
                    if x in phase_of and phase_of[x] < i and not (n.op is Op.MATMUL and x is n.inputs[0]):
                        later[x] = True
        ctx = []
        shared_from = self._weights_shared_from(phs, t, members)
        self.shared_weights = {}
        for j, size in enumerate(w.batch):
            if j == shared_from:
                self._load_shared_weights(phs, t, self._dma_weights())
            ctx.append(em.loop(f"i_b{j}", self.c(size)))
            ctx[-1].__enter__()
        # a pass's tiles die with it: a one-block pass of several is still a (one-iteration) loop
        with em.loop("i_rb", R // (P * BM), scoped=len(self.passes) > 1, only=self._blocks(P * BM) if only is None
                     else only, runs=runs):
            rows0 = ("i_rb", P * BM)
            block: dict[Node, str] = {}
            trans: dict[Node, tuple[str, int, str]] = {}  # node -> (tile, k_tiles, layout)
            for n in later:
                block[n] = em.alloc(f"{self._nm(n)}_blk", P, BM * self.cols(n), "f32")
            for n in stationary:
                if n in members or self._transposed_in_row_phase(n, phs, t):
                    K = self.cols(n)
                    kt = t.k_tile_for(K)
                    trans[n] = (em.alloc(f"{self._nm(n)}_T", kt, (K // kt) * BM * P, "kernel"), K // kt, "i_r")
            for i, ph in enumerate(phs):
                if ph.kind == "row":
                    self.row_phase(ph, t, rows0, block, trans, members, stationary, consumers, owner, pi)
                else:
                    self.matmul_phase(ph, t, rows0, block, trans, members, consumers, owner, pi)
        for c in reversed(ctx):
            c.__exit__(None, None, None)

    # -- online softmax: the keys walked in chunks with a running state (tiling.online) ----------
    def emit_pass_online(self, pi: int, p: Pass, consumers, owner):
        """An online-softmax pass: per row tile, the scores' columns in chunks of t.kv_chunk, each
        chunk's state (its max, exp sum and exp @ W2) merged into a running one by the proved
        merge (tiling.online), then the second matmul's element-wise tail once, on the last state."""
        from axon.verification import Status

        em, w, t = self.em, self.w, p.tiling
        self._begin_region()
        form = online_softmax(w, p.group)
        if form is None:
            raise UnsupportedError("an online-softmax tiling of a pass without max, exp, sum between two matmuls")
        lemma = merge_lemma()
        if lemma.status is not Status.PROVED:
            raise UnsupportedError(f"online softmax: the merge of chunk states is not proved ({lemma.status.value})")
        members = set(p.group.nodes)
        paired = self.opt.paired
        if paired:  # a row tile holds the rows of two kv heads (tiling.packing: head pairing)
            if self.rows is not None:
                raise UnsupportedError("a paired walk runs its rows whole, not on row windows")
            t = replace(t, row_tile=2 * t.row_tile)
        P, CH, T = t.row_tile, t.kv_chunk, self.sizes[form.dim]
        R = self.c(w.row) * (2 if paired else 1)
        em.comment(f"pass {pi + 1}: " + ", ".join(n.op.value for n in p.group.nodes)
                   + f"  (rows {P} per block; {form.dim} walked in {T // CH} chunks of {CH} with a running "
                   "softmax state, weights " + ("whole on chip)" if not t.n_block else "loaded per chunk)")
                   + ("; two kv heads per row tile, q^T block-diagonal" if paired else ""))
        matmul_phases = [form.scores, form.values]
        shared_from = self._weights_shared_from(matmul_phases, t, members) if not t.n_block else len(w.batch)
        self.shared_weights = {}
        ctx = []
        dma = self._dma_weights()
        for j, size in enumerate(w.batch):
            if j == shared_from:
                self._load_shared_weights(matmul_phases, t, dma)
            pairs = paired and j == len(w.batch) - 2
            ctx.append(em.loop(f"i_b{j}", self.c(size) // (2 if pairs else 1)))
            ctx[-1].__enter__()
        with em.loop("i_rb", R // P, scoped=len(self.passes) > 1, only=self._blocks(P)), \
                em.loop("i_r", 1):
            rows0 = ("i_rb", P)
            A = form.scores.matmuls[0].inputs[0]
            trans = {}
            if A in members:
                kt = t.k_tile_for(self.cols(A))
                trans[A] = (em.alloc(f"{self._nm(A)}_T", kt, self.cols(A) // kt * P, "kernel"), self.cols(A) // kt, "i_r")
            for ph in form.lead:
                self.row_phase(ph, t, rows0, {}, trans, members, {A}, consumers, owner, pi)
            if paired:
                qT, tcol = self._paired_stationary(A, P // 2, rows0)
            else:
                qT, _, tcol = self._stationary(A, t, rows0, {}, trans, members)
            if not t.n_block and shared_from == len(w.batch):
                self._load_shared_weights(matmul_phases, t, dma)  # whole, once per row block
            # the chunks are independent (an affine loop the compiler pipelines: one chunk's
            # matmuls beside another's exp); each leaves its state in a slot, and a tree of small
            # merges gathers them into slot 0
            NCH, D = T // CH, self.cols(form.o)
            slots = {"n": em.alloc("n_chunks", P, NCH, em.wide_dtype), "l": em.alloc("l_chunks", P, NCH, "state"),
                     "o": em.alloc("o_chunks", P, NCH * D, "state")}
            try:
                self.sizes[form.dim] = CH
                with em.loop("i_ch", NCH):
                    self._online_chunk(form, t, T, qT, tcol, rows0, slots, members)
            finally:
                self.sizes[form.dim] = T
            reads_max = self._reads_max(form, consumers, owner, pi)
            self._online_merges(form, P, D, NCH, slots, reads_max)
            # the row's state is then slot 0's: l_0, o_0, and m = -n_0 where the tail or a store reads it
            state = {"l": em.view(slots["l"], P, "0", 1), "o": em.view(slots["o"], P, "0", D)}
            if reads_max:
                state["m"] = em.view(em.alloc("m_run", P, 1, "state"), P, "0", 1)
                n0 = merge_nodes(form.m, form.o)[0]["n"]
                neg = make_node(Op.NEG, (n0,))
                self.run_program([neg], [neg], lambda y: em.view(slots["n"], P, "0", 1), lambda n: state["m"], P)
            self._online_tail(form, t, rows0, state, members, consumers, owner, pi)
        for c in reversed(ctx):
            c.__exit__(None, None, None)

    def _online_chunk(self, form, t: Tiling, T: int, qT: str, tcol, rows0, slots: dict, members):
        """One chunk of an online-softmax walk (self.sizes binds t to the chunk): its scores and
        its state (n_c, l_c, o_c), written to slot i_ch of `slots`."""
        em = self.em
        P, CH, NT = t.row_tile, t.kv_chunk, t.n_tile_for(t.kv_chunk)
        rows = _ex(rows0, ("i_r", P))
        s_mm, v_mm = form.scores.matmuls[0], form.o
        x = form.m.inputs[0]
        D, K1 = self.cols(v_mm), self.cols(s_mm.inputs[0])
        KT, VT = t.k_tile_for(K1), t.k_tile_for(CH)  # q k^T over the head dim, exp @ W2 over the keys
        # weights: whole on chip (the chunk's columns / k tiles of them), or this chunk's block
        if self.opt.paired:  # both heads' keys on the contraction, their values side by side
            if s_mm in self.shared_weights or KT != K1:
                raise UnsupportedError("a paired walk loads each chunk's weights, one k tile of keys per head")
            w1, w2 = self._paired_keys(s_mm, K1, CH), self._paired_values(v_mm, CH, VT, D)
            c1, c2 = _ex(("i_kt", CH), ("i_nt", NT)), _ex(("i_kt", 2 * D))
            K1 = KT = 2 * K1
        elif s_mm in self.shared_weights:
            w1, c1 = self.shared_weights[s_mm], _ex(("i_kt", T), ("i_ch", CH), ("i_nt", NT))
            w2, c2 = self.shared_weights[v_mm], _ex(("i_ch", CH // VT * D), ("i_kt", D))
        else:
            dma = self._dma_weights()
            w1 = self._weight_piece(s_mm, K1, KT, CH, None, P, at=((), (("i_ch", CH),)), dma=dma)
            w2 = self._weight_piece(v_mm, CH, VT, D, None, P, at=((("i_ch", CH),), ()), dma=dma)
            c1, c2 = _ex(("i_kt", CH), ("i_nt", NT)), _ex(("i_kt", D))
        xs = em.alloc(f"{self._nm(x)}_chunk", P, CH, "f32")
        # each piece's max taken on its way out of PSUM by the instruction that takes it out
        # (the scores' element-wise tail, a scale, or a copy as x * 1), where the max of maxes is proved
        from axon.verification import Status

        by_parts = partial_max_lemma().status is Status.PROVED
        parts = em.alloc("max_parts", P, CH // NT, em.wide_dtype) if by_parts else None
        with em.loop("i_nt", CH // NT):
            acc = em.alloc("acc", P, NT, "accum")
            em.matmul(acc, qT, w1, P, KT, NT, K1 // KT, tcol("i_kt"), c1, step=self.lowerer.matmul(s_mm).steps[0])
            self._scores_out(form, x, em.view(acc, P, "0", NT), em.view(xs, P, _ex(("i_nt", NT)), NT),
                             parts, P, CH, NT, rows, members)
        # the chunk's own state: its negated max, exp(x - max) (only read transposed), the exp's sum
        # (a max of bf16 scores is one of them: the slots keep it in the scores' dtype)
        if by_parts:
            part_node = input_node("max_parts", x.shape[:-1] + (Size.of(CH // NT),))
            cs = chunk_state_from_parts(x, part_node)
        else:
            cs = chunk_state(x)
        tiles = {cs["n"]: em.view(slots["n"], P, "i_ch", 1), cs["l"]: em.view(slots["l"], P, "i_ch", 1),
                 cs["e"]: em.view(em.alloc(self._nm(form.e), P, CH, "kernel"), P, "0", CH)}
        upstream = set(Graph((), (x,)).nodes())
        nodes = [n for n in Graph((), (cs["n"], cs["l"])).nodes() if n not in upstream and n.op is not Op.INPUT]
        reads = {x: em.view(xs, P, "0", CH)}
        if by_parts:
            reads[part_node] = em.view(parts, P, "0", CH // NT)
        self.run_program(nodes, list(tiles), reads.__getitem__, lambda n: tiles[n], P)
        eT = em.alloc(f"{self._nm(form.e)}_T", VT, CH // VT * P, "kernel")
        em.transpose_into(eT, tiles[cs["e"]], P, VT, CH // VT, "i_r", "0")
        if self.opt.paired:  # each head keeps its diagonal block of [p_a; p_b] [v_a | v_b]
            acc_o = em.alloc("acc", P, 2 * D, "accum")
            em.matmul(acc_o, eT, w2, P, VT, 2 * D, CH // VT, _ex(("i_kt", P)), c2,
                      step=self.lowerer.matmul(v_mm).steps[0])
            H, col = P // 2, _ex(("i_ch", D))
            for h in range(2):
                em.copy(f"{slots['o']}[{h * H}:{h * H + H}, {col}:{col} + {D}]",
                        f"{acc_o}[{h * H}:{h * H + H}, {h * D}:{h * D + D}]")
            return
        acc_o = em.alloc("acc", P, D, "accum")
        em.matmul(acc_o, eT, w2, P, VT, D, CH // VT, _ex(("i_kt", P)), c2, step=self.lowerer.matmul(v_mm).steps[0])
        em.copy(em.view(slots["o"], P, _ex(("i_ch", D)), D), em.view(acc_o, P, "0", D))

    def _paired_stationary(self, A: Node, H: int, rows0) -> tuple[str, Callable]:
        """q^T of a pair of heads, block-diagonal (paired_heads_lemma): head h's [K, H] block at
        partitions h*K, columns h*H, through DMA transposes of its rows; zero elsewhere."""
        em, K = self.em, self.cols(A)
        tile = em.alloc("lhsT", 2 * K, 2 * H, "kernel")
        em.fill(em.view(tile, 2 * K, "0", 2 * H), 0.0)
        for h in range(2):
            em.dma_transpose(f"{tile}[{h * K}:{h * K + K}, {h * H}:{h * H + H}]",
                             self.hbm_ref(A, _ex(rows0, h * H), H, f"0:{K}"))
        return tile, lambda kt: _ex((kt, 2 * H))

    def _paired_keys(self, mm: Node, K: int, CH: int) -> str:
        """This chunk's keys of both heads of a pair, transposed on the way in: head h's [K, CH]
        at partitions h*K."""
        em = self.em
        src, jn = view_source(mm.inputs[1]), divisor_at_most(CH, em.dma_transpose_rows)
        wt = em.alloc("w", 2 * K, CH, "kernel")
        for h in range(2):
            with self._head(h), em.loop("i_j", CH // jn):
                col = _ex(("i_j", jn))
                em.dma_transpose(f"{wt}[{h * K}:{h * K + K}, {col}:{col} + {jn}]",
                                 self._ref_rows_cols(src, _ex(("i_ch", CH), ("i_j", jn)), jn, "0", K))
        return wt

    def _paired_values(self, mm: Node, CH: int, VT: int, D: int) -> str:
        """This chunk's values of both heads of a pair side by side: k tile q of head h at
        columns q*2D + h*D."""
        em = self.em
        wt = em.alloc("w", VT, CH // VT * 2 * D, "kernel")
        for h in range(2):
            with self._head(h), em.loop("i_kt", CH // VT):
                col = _ex(("i_kt", 2 * D), h * D)
                em.dma(f"{wt}[0:{VT}, {col}:{col} + {D}]",
                       self._ref_rows_cols(mm.inputs[1], _ex(("i_ch", CH), ("i_kt", VT)), VT, "0", D))
        return wt

    @contextmanager
    def _head(self, h: int):
        """HBM references to one kv head's tensors address head h of the pair (_batch_index)."""
        self.head = h
        try:
            yield
        finally:
            self.head = None

    def _scores_out(self, form, x, acc: str, dst: str, parts, P: int, CH: int, NT: int, rows, members):
        """One accumulator tile of a chunk's scores, out of PSUM into `dst`: through the scores'
        element-wise tail, or copied, and with `parts` its max too (one instruction does both)."""
        em, s_mm = self.em, form.scores.matmuls[0]
        here = {s_mm: acc}
        nodes, out = list(form.scores.epilogue), {}
        if parts is not None and not nodes:
            # a copy the max rides on: x * 1, which the synthesizer lowers as one multiply-and-reduce
            one = const_node(1.0)
            here[one] = 1.0
            x = make_node(Op.MUL, (s_mm, one))
            nodes = [x]
        elif not nodes:
            em.copy(dst, acc)
            return
        if parts is not None:
            mx = make_node(Op.REDUCE_MAX, (x,), AxisParams(x.rank - 1, True))
            nodes.append(mx)
            out = {x: dst, mx: em.view(parts, P, "i_nt", 1)}
        col0 = _ex(("i_ch", CH), ("i_nt", NT))
        self.run_program(nodes, list(out) or [x],
                         lambda y: self.operand(y, here, {}, members, "i_r", P, rows, chunk=(col0, NT)),
                         lambda n: out.get(n) or (dst if n == x else
                                                  em.view(em.alloc(self._nm(n), P, NT, "f32"), P, "0", NT)),
                         P, chunk=(CH, NT), memories={s_mm: "psum"})

    def _online_merges(self, form, P: int, D: int, NCH: int, slots: dict, reads_max: bool):
        """The chunks' states gathered into slot 0 by a tree of the proved merge (merge_lemma: the
        merged states of two adjacent runs of chunks are the state of the run they make up): at
        each level slot i + s goes into slot i for every pair left, so the row's state waits for
        ceil(log2 NCH) merges, not NCH - 1. The pairs of a level are independent, but each is a
        short dependent chain over three engines: kept in order (sequential_range), one pair's
        chain does not wait behind the others' interleaved instructions (the performance model:
        decode with 16 rows against 32768 keys 470.4 us with the pairs in an affine loop, 439.1
        in order; head dim 64, 115.8 and 114.3). The last merge keeps its max only where
        `reads_max` (no instruction writes what nothing reads)."""
        step, count = 1, NCH
        while count > 1:
            with self.em.loop("i_m", count // 2, sequential=True):
                self._merge_slots(form, P, D, slots, 2 * step, step, keep_max=count > 2 or reads_max)
            step, count = 2 * step, -(-count // 2)

    def _merge_slots(self, form, P: int, D: int, slots: dict, stride: int, gap: int, keep_max: bool):
        """Slot i_m * stride + gap merged into slot i_m * stride. n' goes to a fresh column, then
        over n (the old n is read after it); l' and o' over l and o (each old value feeds only its
        own new one, so the instruction writing it comes last)."""
        em = self.em
        ins, merged = merge_nodes(form.m, form.o)
        at = lambda off, width: _ex(("i_m", stride * width), off * width)
        given = {ins["n"]: em.view(slots["n"], P, at(0, 1), 1), ins["l"]: em.view(slots["l"], P, at(0, 1), 1),
                 ins["o"]: em.view(slots["o"], P, at(0, D), D),
                 ins["n_c"]: em.view(slots["n"], P, at(gap, 1), 1), ins["l_c"]: em.view(slots["l"], P, at(gap, 1), 1),
                 ins["o_c"]: em.view(slots["o"], P, at(gap, D), D)}
        n_new = em.view(em.alloc("n_new", P, 1, "state"), P, "0", 1)
        out = {merged["n"]: n_new, merged["l"]: given[ins["l"]], merged["o"]: given[ins["o"]]}
        nodes = [n for n in Graph((), tuple(merged.values())).nodes() if n.op is not Op.INPUT]
        wide, em.wide_dtype = em.wide_dtype, "f32"  # the merge's temporaries carry the state: f32
        try:
            self.run_program(nodes, list(out), lambda y: given[y], lambda n: out[n], P)
        finally:
            em.wide_dtype = wide
        if keep_max:
            em.copy(given[ins["n"]], n_new)

    def _reads_max(self, form, consumers, owner, pi) -> bool:
        """Whether anything after an online walk reads the row max: the second matmul's tail or a store."""
        return (any(form.m in n.inputs for n in form.values.epilogue)
                or bool(self._needs_store(form.m, consumers, owner, pi)))

    def _online_tail(self, form, t: Tiling, rows0, state: dict, members, consumers, owner, pi):
        """The second matmul's element-wise tail on the walk's last state, and the stores."""
        em = self.em
        P = t.row_tile
        rows = _ex(rows0, ("i_r", P))
        here = {form.o: state["o"], form.l: state["l"]}
        if "m" in state:
            here[form.m] = state["m"]
        tail = form.values.epilogue
        if tail:
            needed = [n for n in tail if self._needs_store(n, consumers, owner, pi)]
            only_stored = lambda n: pi not in consumers.get(n, ())
            here.update(self.run_program(
                tail, needed, lambda y: self.operand(y, here, {}, members, "i_r", P, rows),
                lambda n: em.view(em.alloc(self._nm(n), P, self.cols(n), "kernel" if only_stored(n) else "f32"),
                                  P, "0", self.cols(n)), P))
        for n in form.values.nodes:
            for oname, transposed in self._needs_store(n, consumers, owner, pi):
                self.store(n, here[n], oname, transposed, rows, P, "0", self.cols(n))

    # -- causal passes: each row block computes only the columns it can see -------------------
    def _masked_prefix(self, p: Pass):
        """tiling.positions.masked_prefix of a pass (None: the pass computes whole rows)."""
        stored = {n for n in p.group.nodes if n in self.hbm or n in self.outputs}
        return masked_prefix(self.w, p.group, self.sizes, stored)

    def emit_pass_prefixed(self, pi: int, p: Pass, prefix, consumers, owner):
        """A causal pass once per run of row blocks that see the same columns, with the column
        symbol bound to that width: the masked tiles beyond it are neither loaded nor computed.
        The runs are the outermost loops: each is a long pipelined loop nest, where runs inside
        the batch loops (sharing the weights loaded there) would each drain the pipeline."""
        t = p.tiling
        block = t.row_tile * t.row_block
        only = self._blocks(block)
        full = self.sizes[prefix.dim]
        # widths in whole contraction tiles (and weight blocks), at most MAX_CAUSAL_RUNS of them
        base = math.lcm(t.k_tile, t.n_block if 0 < t.n_block < full else 1)
        quantum = base * -(-full // (base * MAX_CAUSAL_RUNS))
        widths = [prefix.width(b * block, block, full, quantum) for b in range(self.c(self.w.row) // block)]
        try:
            for width, run in itertools.groupby(enumerate(widths), key=lambda e: e[1]):
                run = [b for b, _ in run]
                emitted = run if only is None else [b for b in run if b in only]
                if not emitted:
                    continue
                self.em.comment(f"rows {run[0] * block}:{(run[-1] + 1) * block} see {prefix.dim} columns "
                                f"0:{width} of {full}: the masked tiles beyond are skipped")
                self.sizes[prefix.dim], self.seen = width, (prefix, run[0] * block)
                self.emit_pass(pi, p, consumers, owner, emitted, len(run))
        finally:
            self.sizes[prefix.dim], self.seen = full, None

    def _column_tile_runs(self, ph, N: int, NB: int, NT: int) -> list[tuple[tuple, "Node | None"]]:
        """The i_nt values of a matmul phase's output tiles in runs, each with the masking where
        its epilogue may skip (None: none): in a causal pass, the leading tiles that every row of
        the run's row blocks sees whole need no mask (where(mask, x, masked) is x there), so only
        the tiles the diagonal crosses pay for it."""
        tiles = tuple(range(NB // NT))
        w = self._unmasked_where(ph, N, NB)
        if w is None:
            return [(tiles, None)]
        prefix, r0 = self.seen
        k = min(len(tiles), prefix.whole_tiles(r0, NT))
        return [(run, bare) for run, bare in ((tiles[:k], w), (tiles[k:], None)) if run]

    def _unmasked_where(self, ph, N: int, NB: int):
        """The causal mask's where of a matmul phase's epilogue, when it masks that matmul's
        output directly and the phase's tiles are its columns from 0 (one block of all N)."""
        if self.seen is None or NB != N:
            return None
        prefix = self.seen[0]
        wheres = [n for n in ph.epilogue if n.op is Op.WHERE and self.w.roles.get(n.inputs[0]) == "index"]
        if len(wheres) != 1:
            return None
        w = wheres[0]
        ok = w.inputs[1] in ph.matmuls and w.shape[-1].as_symbol() == prefix.dim
        return w if ok else None

    def _dma_weights(self) -> bool:
        """Whether a transposed input weight comes through DMA transposes (Options.weights)."""
        return self.opt.weights == "dma"

    def _weights_shared_from(self, phs, t: Tiling, members) -> int:
        return weights_shared_from(self.w, phs, t, members, self.sizes, lambda n: n in self.hbm)

    def _load_shared_weights(self, phs, t: Tiling, dma: bool = False) -> None:
        em = self.em
        for ph in phs:
            if ph.kind == "row":
                continue
            K = self.cols(ph.matmuls[0].inputs[0])
            with em.loop("i_nb", 1):
                for mm in ph.matmuls:
                    self.shared_weights[mm] = self._weight_piece(mm, K, t.k_tile_for(K), self.cols(mm), None,
                                                                 t.row_tile, dma=dma)

    def _blocks(self, block_rows: int):
        """The row blocks of `block_rows` rows a check's kernel runs (None: all of them)."""
        if self.rows is None:
            return None
        if any(s % block_rows or e % block_rows for s, e in self.rows):
            raise UnsupportedError(f"checked rows {self.rows} are not whole blocks of {block_rows} rows")
        return tuple(b for s, e in self.rows for b in range(s // block_rows, e // block_rows))

    def _column_blocks(self, ph, NB: int):
        """The column blocks of `NB` a check's kernel runs of the matmul phase `ph` (None: all)."""
        if self.columns is None:
            return None
        dim, ranges = self.columns
        if not all(mm.shape[-1].as_symbol() == dim for mm in ph.matmuls):
            return None
        if any(s % NB or e % NB for s, e in ranges):
            raise UnsupportedError(f"checked columns {ranges} are not whole blocks of {NB} columns")
        return tuple(b for s, e in ranges for b in range(s // NB, e // NB))

    def _nm(self, n: Node) -> str:
        return self.em.fresh(n.params.name if n.op is Op.INPUT else n.op.value)

    def _transposed_in_row_phase(self, x: Node, phs, t: Tiling) -> bool:
        """An input that is a matmul's stationary operand and that a row phase of the pass loads
        whole anyway (rms(x) @ w as diag(1/rms) (x @ w)): the row phase transposes the tile it
        loaded, so the rows are not loaded twice and the Tensor Engine starts before the statistics."""
        return (x.op is Op.INPUT and self.opt.stationary == "pe" and not t.col_chunk and t.col_split == 1
                and any(x in n.inputs for ph in phs if ph.kind == "row" for n in ph.nodes))

    def _needs_store(self, n: Node, consumers, owner, pi) -> list[tuple[str, bool]]:
        out = []
        if n in self.outputs:
            out.append(self.outputs[n])
        if n in self.hbm and n.op is not Op.INPUT:
            out.append((self.hbm[n], False))
        return out

    # -- operands ---------------------------------------------------------------------------
    def operand(self, x: Node, here: dict, block, members, r: str, P: int, rows: str, chunk=None, split: int = 1,
                chunk_of=None):
        """Tile expression (or a number) for operand x of an operator in the current row tile
        (its columns `chunk` = (start, width); `split`: the row phase's column chunks; `chunk_of`:
        node -> its (start, width) when the row is walked in column chunks)."""
        w, em = self.w, self.em
        role = w.roles.get(x)
        if x in here:
            return here[x]
        if role == "const":
            return const_value(x.params.value, self.sizes)
        if role == "index":  # no tile: the predicate of this tile's positions
            c0, width = chunk if chunk else ("0", self.cols(x))
            return predicate(x, self.program_sizes, rows, c0, width)
        if role == "vector":
            c0, width = chunk if chunk else ("0", self.cols(x))
            return em.view(self.vectors[x], P, c0, width)
        if x in block:
            C = self.cols(x)
            if chunk and C != 1:
                return em.view(block[x], P, _ex((r, C)) + f" + {chunk[0]}", chunk[1])
            return em.view(block[x], P, _ex((r, C)), C)
        # from HBM: an input, a view of one, or another pass's result
        C = self.cols(x)
        if chunk and C != 1:
            c0, width = chunk
            cols = f"{c0}:{c0} + {width}"
        else:
            width, cols = C, f"0:{C}"
        if role == "view" and x.op is Op.SLICE:
            # load the whole rows of the input once; the slice is a (strided) view of that tile
            cut = column_slice(x, self.sizes)
            if cut is None:
                raise UnsupportedError("a slice of an input's rows or batch axes inside a kernel")
            start, stop, step = cut
            src = view_source(x)
            src_chunk = None
            if split > 1 or chunk_of is not None:  # a chunk of the slice reads the same chunk of its source
                if not strided_columns(x):
                    raise UnsupportedError("column chunks of a slice that does not span its row")
                W = self.cols(src) // split
                src_chunk = chunk_of(src) if chunk_of is not None else (f"i_c * {W}", W)
                stop = src_chunk[1]
            whole = self.operand(src, here, block, members, r, P, rows, chunk=src_chunk)
            tile = whole.split("[", 1)[0]
            here[x] = f"{tile}[0:{P}, {start}:{stop}:{step}]" if step != 1 else f"{tile}[0:{P}, {start}:{stop}]"
            return here[x]
        if role == "view" and x.op is not Op.SLICE:
            raise UnsupportedError(f"{x.op.value} of an input used by a row operator")
        tile = em.alloc(f"{self._hbm_name(x)}_t", P, width, "kernel")
        em.dma(em.view(tile, P, "0", width), self.hbm_ref(x, rows, P, cols))
        here[x] = em.view(tile, P, "0", width)
        return here[x]

    def _hbm_name(self, x: Node) -> str:
        src = view_source(x) if self.w.roles.get(x) == "view" else x
        return self.hbm.get(src, "v").split(".", 1)[0]

    def _caller_shape(self, node: Node) -> list[int]:
        """An input's or output's shape as the caller holds it: the passes may address a view of it
        (`_packed_view`): [m/g, g*c] of an [m, c] tensor, [.., 1, h*s, c] of an [.., h, s, c] one."""
        shape = [self.c(s) for s in node.shape]
        if self.opt.packed > 1:
            return [shape[0] * self.opt.packed, shape[1] // self.opt.packed]
        if self.opt.fold and (node.op is not Op.INPUT or self.w.roles.get(node) == "row"):
            return shape[:-3] + [self.opt.fold, shape[-2] // self.opt.fold, shape[-1]]
        return shape

    def _packed_view(self, name: str, node: Node) -> str:
        """An HBM tensor as the passes address it: itself, its [m/g, g*c] view (Options.packed) or,
        for a row tensor, its [.., 1, h*s, c] view (Options.fold), [.., kv/2, 1, 2*h*s, c] with
        the kv heads paired (Options.paired: a pair's rows are consecutive)."""
        if self.opt.packed == 1 and not (self.opt.fold and self.w.roles.get(node) == "row"):
            return name
        shape = [self.c(s) for s in node.shape]
        if self.opt.paired and self.w.roles.get(node) == "row":
            shape[-4], shape[-2] = shape[-4] // 2, 2 * shape[-2]
        return f"{name}.reshape(({', '.join(map(str, shape))}))"

    def run_program(self, nodes, needed, operand, dst_for, P: int, chunk=None, memories=None, split: int = 1,
                    chunk_dims=None):
        """Emit the synthesized program of `nodes` (one straight-line instruction sequence, fused
        where proved cheaper); `operand(x)` gives an operand's tile, `dst_for(n)` a needed node's
        destination; `split`: every width is cut in this many column chunks (element-wise passes);
        `chunk_dims` = (d, c): widths are those with the symbol d bound to c (a column chunk).
        Returns node -> tile for the needed nodes."""
        positions = position_memories(self.w, nodes)
        if positions:
            memories = {**(memories or {}), **positions}
        prog = self.lowerer.program(nodes, needed, memories, alt=self.opt.lowering)
        ops = [operand(x) for x in prog.operands]
        binding = prog.binding(self.sizes)
        wbinding = prog.binding({**self.sizes, chunk_dims[0]: chunk_dims[1]}) if chunk_dims else binding
        full, part = chunk if chunk else (None, None)

        def width_of(size) -> int:
            w = concrete(size, wbinding)
            if split > 1:
                return w // split if w > 1 else w
            return part if full is not None and w == full else w

        dsts, here = {}, {}
        copies = []
        for n, arg in prog.outputs:
            key = (arg.index, arg.output)
            here[n] = dst_for(n)
            if key in dsts:
                copies.append((here[n], dsts[key]))
            else:
                dsts[key] = here[n]
        note = f"{', '.join(n.op.value for n in nodes)}: {len(prog.steps)} instruction(s), {prog.status}"
        if prog.fusions:
            note += "; fused " + ", ".join(prog.fusions)
        if prog.second_round:
            note += "; second round " + prog.second_round
        self.em.comment(note)
        self.em.program(prog, ops, dsts, P, width_of, binding)
        for dst, src in copies:
            self.em.copy(dst, src)
        return here

    # -- row phase --------------------------------------------------------------------------
    def row_phase(self, ph, t: Tiling, rows0, block, trans, members, stationary, consumers, owner, pi):
        if t.col_chunk:
            return self.row_phase_chunked(ph, t, rows0, members, consumers, owner, pi)
        em = self.em
        P, BM, CS = t.row_tile, t.row_block, t.col_split
        # an element-wise pass may walk each row tile in CS column chunks (tiling's col_split), so
        # the loads, instructions and stores of consecutive chunks overlap
        chunk = (lambda x: (f"i_c * {self.cols(x) // CS}", self.cols(x) // CS)) if CS > 1 else (lambda x: None)
        with em.loop("i_r", BM), (em.loop("i_c", CS) if CS > 1 else nullcontext()):
            rows = _ex(rows0, ("i_r", P))
            here: dict[Node, str] = {}
            needed = [n for n in ph.nodes if n in block or n in trans or n in stationary
                      or self._needs_store(n, consumers, owner, pi)]

            def dst_for(n):
                C = self.cols(n) // CS
                only_t = n in stationary and n not in block and n not in self.outputs and n not in self.hbm
                # a value only stored (no reader in this pass) is written in the kernel's dtype at once:
                # the store rounds it there anyway, and no cast instruction is needed
                only_stored = (pi not in consumers.get(n, ()) and n not in stationary and n not in block
                               and n not in trans and bool(self._needs_store(n, consumers, owner, pi)))
                if n in block:
                    return em.view(block[n], P, _ex(("i_r", C)), C)
                kind = "kernel" if only_t or only_stored else "f32"
                return em.view(em.alloc(self._nm(n), P, C, kind), P, "0", C)

            operand = lambda x: self.operand(x, here, block, members, "i_r", P, rows, chunk=chunk(x), split=CS)
            made = self._run_with_concats(ph.nodes, needed, operand, dst_for, here, P, CS)
            for n in ph.nodes:
                if n not in made:
                    continue
                dst = here[n] = made[n]
                C, c0 = self.cols(n) // CS, (chunk(n)[0] if CS > 1 else "0")
                if n in trans:
                    tile, kts, _ = trans[n]
                    em.transpose_into(tile, dst, P, self.cols(n) // kts, kts, "i_r", _ex(("i_r", kts * P)))
                for oname, transposed in self._needs_store(n, consumers, owner, pi):
                    self.store(n, dst, oname, transposed, rows, P, c0, C)
            for x, (tile, kts, _) in trans.items():
                if x.op is Op.INPUT and x in here:  # see _transposed_in_row_phase
                    em.transpose_into(tile, here[x], P, self.cols(x) // kts, kts, "i_r", _ex(("i_r", kts * P)))

    def _run_with_concats(self, nodes, needed, operand, dst_for, here, P: int, split: int) -> dict:
        """`run_program` over a row phase whose concatenations (along the columns) are assembled in
        place: the operators before each run as one program, writing the operands a concatenation
        takes straight into its tile's column ranges; an operand made elsewhere is copied there."""
        cats = [n for n in nodes if n.op is Op.CONCAT]
        if not cats:
            return self.run_program(nodes, needed, operand, dst_for, P, split=split)
        if split > 1:
            raise UnsupportedError("column chunks of a concatenation")
        slot: dict[Node, list[tuple[Node, str]]] = {}  # concatenation -> (operand, its columns)
        for c in cats:
            base, start = self._split_view(dst_for(c))
            here_c, off = [], 0
            for x in c.inputs:
                w = self.cols(x)
                here_c.append((x, self.em.view(base, P, _ex(*start, off), w)))
                off += w
            slot[c] = here_c
            here[c] = self.em.view(base, P, _ex(*start), self.cols(c))
        into = {x: view for c in cats for x, view in slot[c] if x in nodes and x.op is not Op.CONCAT}
        made: dict = {}
        run: list = []
        for n in nodes + [None]:
            if n is not None and n.op is not Op.CONCAT:
                run.append(n)
                continue
            if run:
                rest = nodes[nodes.index(run[-1]) + 1:]
                want = [m for m in run if m in needed or m in into or any(m in r.inputs for r in rest)]
                made.update(self.run_program(run, want, operand, lambda m: into.get(m) or dst_for(m), P))
                here.update(made)
                run = []
            if n is not None:
                for x, view in slot[n]:
                    if here.get(x) != view:
                        v = operand(x)
                        self.em.fill(view, v) if isinstance(v, (int, float)) else self.em.copy(view, v)
                made[n] = here[n]
        return made

    def _split_view(self, view: str) -> tuple[str, tuple]:
        """'t[0:P, a + 3:...]' -> ('t', (<a + 3>,)): a tile and the start of its columns, as _ex terms."""
        base, cols = view.split("[", 1)
        start = cols.split(", ", 1)[1].split(":", 1)[0]
        return base, ((start, 1),) if start != "0" else ()

    # -- row phase in column chunks ---------------------------------------------------------------
    def row_phase_chunked(self, ph, t: Tiling, rows0, members, consumers, owner, pi):
        """The row phase of a one-phase pass, each row tile walked in chunks of `t.col_chunk` columns
        of the symbol d (the last chunk shorter when they do not divide), sweep by sweep."""
        em = self.em
        P, BM, CW = t.row_tile, t.row_block, t.col_chunk
        d = chunk_dim(self.w, _group_of(ph))
        D = self.sizes[d]
        count, tail = D // CW, D % CW
        needed = {n for n in ph.nodes if self._needs_store(n, consumers, owner, pi)}
        before, sweeps = chunk_plan(ph.nodes, needed)
        with em.loop("i_r", BM):
            rows = _ex(rows0, ("i_r", P))
            cols: dict[Node, str] = {}  # finished column values -> [P, 1] tiles
            stored: set = set()
            self._columns(before, cols, members, rows, P, consumers, owner, pi)
            for sw in sweeps:
                acc = {r: self._column_tile("acc", combine_identity(r), P) for r in sw.reduce}
                carry = {s: self._column_tile("carry", 0.0, P) for s in sw.scans}
                home = [n for n in sw.wide if n in needed and n not in stored]
                stored.update(home)
                sequential = bool(sw.reduce or sw.scans)  # the chunks depend on each other
                if count:
                    with em.loop("i_c", count, sequential=sequential):
                        self._chunk(sw, d, ("i_c", CW), CW, cols, acc, carry, home, members, rows, P, consumers, owner, pi)
                if tail:
                    with em.loop("i_t", 1, sequential=sequential, scoped=True):  # its own scope: its tiles die with it
                        self._chunk(sw, d, count * CW, tail, cols, acc, carry, home, members, rows, P, consumers,
                                    owner, pi)
                for r, tile in acc.items():
                    cols[r] = tile
                    self._store_column(r, tile, rows, P, consumers, owner, pi)
                self._columns(sw.after, cols, members, rows, P, consumers, owner, pi)

    def _column_tile(self, prefix: str, value: float, P: int) -> str:
        tile = self.em.view(self.em.alloc(prefix, P, 1, "f32"), P, "0", 1)
        self.em.fill(tile, value)
        return tile

    def _store_column(self, n: Node, tile: str, rows: str, P: int, consumers, owner, pi):
        for oname, transposed in self._needs_store(n, consumers, owner, pi):
            self.store(n, tile, oname, transposed, rows, P, "0", 1)

    def _columns(self, nodes, cols, members, rows, P, consumers, owner, pi):
        """Column operators whose operands are complete, once per row tile."""
        if not nodes:
            return
        em = self.em
        made = self.run_program(nodes, nodes, lambda x: self.operand(x, cols, {}, members, "i_r", P, rows),
                                lambda n: em.view(em.alloc(self._nm(n), P, 1, "f32"), P, "0", 1), P)
        for n in nodes:
            cols[n] = made[n]
            self._store_column(n, made[n], rows, P, consumers, owner, pi)

    def _chunk(self, sw, d: str, c0, width: int, cols, acc, carry, home, members, rows, P, consumers, owner, pi):
        """One column chunk of a sweep: c0 is ("i_c", step) in the chunk loop or a number (the last
        chunk). Scans read their carry (cumsum(x) + carry is what the chunk stores), reductions
        fold their chunk's partial into the accumulator (acc = combine(acc, reduce(x)))."""
        em = self.em
        csizes = {**self.sizes, d: width}
        unit = {**self.sizes, d: 1}

        def chunk_of(x):
            k = concrete(x.shape[-1], unit)  # x is k*d columns wide
            start = _ex((c0[0], k * c0[1])) if isinstance(c0, tuple) else str(k * c0)
            return start, concrete(x.shape[-1], csizes)

        here = dict(cols)
        sub: dict[Node, Node] = {}
        nodes: list[Node] = []
        dst: dict[Node, str] = {}
        for n in sw.wide:
            m = n if not any(i in sub for i in n.inputs) else make_node(n.op, [sub.get(i, i) for i in n.inputs], n.params)
            nodes.append(m)
            if n in carry:
                cin = input_node(f"carry{len(here)}", n.shape[:-1] + (ONE,))
                here[cin] = carry[n]
                m = make_node(Op.ADD, [m, cin])
                nodes.append(m)
            if m is not n:
                sub[n] = m
        combined = {}
        for r in sw.reduce:
            m = make_node(r.op, [sub.get(r.inputs[0], r.inputs[0])], r.params)
            ain = input_node(f"acc{len(here)}", r.shape)
            here[ain] = acc[r]
            comb = make_node(combine_op(r), [ain, m])
            nodes += [m, comb]
            dst[comb] = acc[r]
            combined[r] = comb
        want = [sub.get(n, n) for n in home] + [sub[s] for s in carry] + list(combined.values())
        readers = {x for m in nodes for x in m.inputs}
        carried = {sub[s] for s in carry}

        def dst_for(m):
            if m in dst:
                return dst[m]
            w = concrete(m.shape[-1], csizes)
            kind = "kernel" if m not in readers and m not in carried else "f32"
            return em.view(em.alloc(self._nm(m), P, w, kind), P, "0", w)

        made = self.run_program(nodes, want, lambda x: self.operand(x, here, {}, members, "i_r", P, rows,
                                                                    chunk=chunk_of(x) if is_wide(x) else None,
                                                                    chunk_of=chunk_of),
                                dst_for, P, chunk_dims=(d, width))
        for s, tile in carry.items():  # the chunk's last running value starts the next chunk (first:
            y = made[sub[s]].split("[", 1)[0]  # the next chunk waits on it, not on this one's store)
            w = concrete(s.shape[-1], csizes)
            em.copy(tile, em.view(y, P, str(w - 1), 1))
        for n in home:
            start, w = chunk_of(n)
            for oname, transposed in self._needs_store(n, consumers, owner, pi):
                self.store(n, made[sub.get(n, n)], oname, transposed, rows, P, start, w)

    def store(self, n: Node, tile: str, oname: str, transposed: bool, rows: str, P: int, c0: str, width: int):
        em = self.em
        if transposed:
            em.store_transposed(oname, tile, rows, P, c0, width, self._batch_prefix(n))
        else:
            src = tile
            if em.needs_cast_for_store(tile):
                cast = em.alloc("st", P, width, "kernel")
                em.copy(em.view(cast, P, "0", width), tile)
                src = em.view(cast, P, "0", width)
            ref = self._out_ref(n, oname, rows, P, f"{c0}:{c0} + {width}" if c0 != "0" else f"0:{width}")
            em.dma(ref, src)

    def _batch_prefix(self, n: Node) -> list[str]:
        nb = n.rank - 2
        wb = self.w.batch
        return [self._batch_index(len(wb) - nb + j, n) if self.c(n.shape[j]) != 1 else "0" for j in range(nb)]

    def _batch_index(self, wj: int, node: Node) -> str:
        """The index of batch axis wj of the world in an HBM reference to `node`: its loop variable,
        or in a paired walk, for a tensor of one kv head (not a row tensor, whose view pairs the
        heads), the pair's head `self.head`."""
        if self.head is not None and wj == len(self.w.batch) - 2 and self.w.roles.get(node) != "row":
            return f"i_b{wj} * 2 + {self.head}"
        return f"i_b{wj}"

    def _out_ref(self, n: Node, oname: str, rows: str, P: int, cols: str) -> str:
        idx = self._batch_prefix(n) + [f"{rows}:{rows} + {P}", cols]
        return f"{oname}[{', '.join(idx)}]"

    # -- matmul phase -----------------------------------------------------------------------
    def matmul_phase(self, ph, t: Tiling, rows0, block, trans, members, consumers, owner, pi):
        em, w = self.em, self.w
        P, BM = t.row_tile, t.row_block
        A = ph.matmuls[0].inputs[0]
        K = self.cols(A)
        KT = t.k_tile_for(K)
        N = self.cols(ph.matmuls[0])
        kts = K // KT
        if K % KT:
            raise UnsupportedError(f"contraction {K} is not a multiple of the tile {KT}")
        NB, NT = t.n_block_for(N), t.n_tile_for(N)
        if N % NB or NB % NT:
            raise UnsupportedError(f"width {N} does not split into blocks of {NB} and tiles of {NT}")
        tile, layout, tcol = self._stationary(A, t, rows0, block, trans, members)
        KB = t.k_block_for(K)
        if KB < K:
            return self._matmul_streamed(ph, t, tile, layout, K, N, NB, NT, KB, rows0, block, trans, members,
                                         consumers, owner, pi)
        with em.loop("i_nb", N // NB, only=self._column_blocks(ph, NB)):
            wblk = {mm: self.shared_weights.get(mm) or self._weight_piece(mm, K, KT, NB, None, P,
                                                                          dma=self._dma_weights())
                    for mm in ph.matmuls}
            with em.loop("i_r", BM):
                rows = _ex(rows0, ("i_r", P))
                packs = self._packs(ph, NB, P, consumers, owner, pi)
                for tiles, bare in self._column_tile_runs(ph, N, NB, NT):
                    with em.loop("i_nt", NB // NT, only=tiles, runs=len(tiles)):
                        here: dict[Node, str] = {}
                        for mm in ph.matmuls:
                            acc = em.alloc("acc", P, NT, "accum")
                            em.matmul(acc, tile, wblk[mm], P, KT, NT, kts, tcol("i_kt"),
                                      _ex(("i_kt", NB), ("i_nt", NT)), step=self.lowerer.matmul(mm).steps[0])
                            here[mm] = em.view(acc, P, "0", NT)
                        self._epilogue(ph, t, here, rows, N, NB, NT, block, trans, members, consumers, owner, pi,
                                       packs, bare)
                for (n, oname), pk in packs.items():
                    em.dma(self._out_ref(n, oname, rows, P, f"i_nb * {NB}:i_nb * {NB} + {NB}"), em.view(pk, P, "0", NB))

    def _stationary(self, A: Node, t: Tiling, rows0, block, trans, members):
        """A matmul's stationary operand A^T in K-tiles of [KT, P] for the block's rows: (tile,
        layout, k tile -> its columns in the tile)."""
        em, w = self.em, self.w
        P, BM, KT = t.row_tile, t.row_block, t.k_tile_for(self.cols(A))
        kts = self.cols(A) // KT
        if A in trans:
            tile, _, layout = trans[A]
        elif w.roles.get(A) == "view" and A.op is Op.TRANSPOSE:
            tile, layout = em.alloc("lhsT", KT, kts * BM * P, "kernel"), "k"
            src = view_source(A)
            with em.loop("i_kt", kts):
                em.dma(em.view(tile, KT, _ex(("i_kt", BM * P)), BM * P),
                       self._ref_rows_cols(src, f"i_kt * {KT}", KT, _ex(rows0), BM * P))
        else:
            tile, layout = em.alloc("lhsT", KT, kts * BM * P, "kernel"), "i_r"
            with em.loop("i_r", BM):
                rows = _ex(rows0, ("i_r", P))
                if self.opt.stationary == "dma" and (A.op is Op.INPUT or A in self.hbm):
                    with em.loop("i_kt", kts):
                        em.dma_transpose(em.view(tile, KT, _ex(("i_r", kts * P), ("i_kt", P)), P),
                                         self.hbm_ref(A, rows, P, f"i_kt * {KT}:i_kt * {KT} + {KT}"))
                else:
                    here: dict = {}
                    src = self.operand(A, here, block, members, "i_r", P, rows)
                    em.transpose_into(tile, src, P, KT, kts, "i_r", _ex(("i_r", kts * P)))
        if layout == "i_r":
            return tile, layout, lambda kt: _ex(("i_r", kts * P), (kt, P))
        return tile, layout, lambda kt: _ex((kt, BM * P), ("i_r", P))

    def _weight_piece(self, mm: Node, K: int, KT: int, NB: int, KB, P: int, at=None, dma: bool = False) -> str:
        """Load the weight block of columns i_nb * NB (all K rows, or with KB the piece of KB rows
        starting at i_kb * KB) as [KT, (rows / KT) * NB]: k tile q at columns q * NB. `at`: the
        block's first (row, column) in the weight as index terms, instead of (i_kb * KB, i_nb * NB);
        `dma`: a transposed input weight comes through DMA transposes (an online walk's keys)."""
        em, w = self.em, self.w
        rows = KB or K
        r_at, c_at = at or (((("i_kb", KB),) if KB else ()), (("i_nb", NB),))
        B = mm.inputs[1]
        wt = em.alloc("w", KT, (rows // KT) * NB, "kernel")
        if w.roles.get(B) == "view" and B.op is Op.TRANSPOSE and dma:
            src = view_source(B)  # [.., N, K]: the DMA engine transposes blocks of its rows on the way in
            jn = divisor_at_most(NB, self.em.dma_transpose_rows)
            with em.loop("i_kt", rows // KT), em.loop("i_j", NB // jn):
                em.dma_transpose(em.view(wt, KT, _ex(("i_kt", NB), ("i_j", jn)), jn),
                                 self._ref_rows_cols(src, _ex(*c_at, ("i_j", jn)), jn, _ex(*r_at, ("i_kt", KT)), KT))
        elif w.roles.get(B) == "view" and B.op is Op.TRANSPOSE:
            src = view_source(B)  # [.., N, K]: rows of src are output columns
            # weight rows per transpose: up to a contraction tile's partitions, even for a short row tile
            jn = next(d for d in range(min(max(P, KT), NB), 0, -1) if NB % d == 0)
            with em.loop("i_j", NB // jn):
                rt = em.alloc("wrows", jn, rows, "kernel")
                em.dma(em.view(rt, jn, "0", rows), self._ref_rows_cols(src, _ex(*c_at, ("i_j", jn)), jn, _ex(*r_at), rows))
                em.transpose_into(wt, em.view(rt, jn, "0", rows), jn, KT, rows // KT, "k", _ex(("i_j", jn)), stride=NB)
        else:
            with em.loop("i_kt", rows // KT):
                em.dma(em.view(wt, KT, _ex(("i_kt", NB)), NB),
                       self._ref_rows_cols(B, _ex(*r_at, ("i_kt", KT)), KT, _ex(*c_at), NB))
        return wt

    def _packs(self, ph, NB: int, P: int, consumers, owner, pi) -> dict:
        """One [P, NB] tile per value the phase stores untransposed: a block's columns go out in one DMA."""
        packs = {}
        for n in ph.nodes:
            for oname, tr in self._needs_store(n, consumers, owner, pi):
                if not tr:
                    packs[(n, oname)] = self.em.alloc("o", P, NB, "kernel")
        return packs

    def _matmul_streamed(self, ph, t: Tiling, tile, layout, K, N, NB, NT, KB, rows0, block, trans, members,
                         consumers, owner, pi):
        """A matmul phase whose weights stream along K: per weight block, one accumulator of
        row_block x NB columns per matmul stays in the banks while pieces of KB weight rows are
        loaded (each shared by the block's rows) and accumulated; the epilogue runs once all of K is in."""
        em = self.em
        P, BM, KT = t.row_tile, t.row_block, t.k_tile_for(K)
        kts, kps = K // KT, KB // KT
        if layout == "i_r":
            lcol = _ex(("i_r", kts * P), ("i_kb", kps * P), ("i_kt", P))
        else:
            lcol = _ex(("i_kb", kps * BM * P), ("i_kt", BM * P), ("i_r", P))
        slot = _ex(("i_r", NB), ("i_nt", NT))
        with em.loop("i_nb", N // NB, only=self._column_blocks(ph, NB)):
            # never zeroed: the first piece's matmuls overwrite, the later ones add (emitter.matmul)
            accs = {mm: em.alloc("acc", P, BM * NB, "accum") for mm in ph.matmuls}
            with em.loop("i_kb", K // KB):
                wblk = {mm: self._weight_piece(mm, K, KT, NB, KB, P) for mm in ph.matmuls}
                with em.loop("i_r", BM), em.loop("i_nt", NB // NT):
                    for mm in ph.matmuls:
                        em.matmul(accs[mm], tile, wblk[mm], P, KT, NT, kps, lcol, _ex(("i_kt", NB), ("i_nt", NT)),
                                  step=self.lowerer.matmul(mm).steps[0], acc_col=slot)
            with em.loop("i_r", BM):
                rows = _ex(rows0, ("i_r", P))
                packs = self._packs(ph, NB, P, consumers, owner, pi)
                with em.loop("i_nt", NB // NT):
                    here = {mm: em.view(acc, P, slot, NT) for mm, acc in accs.items()}
                    self._epilogue(ph, t, here, rows, N, NB, NT, block, trans, members, consumers, owner, pi, packs)
                for (n, oname), pk in packs.items():
                    em.dma(self._out_ref(n, oname, rows, P, f"i_nb * {NB}:i_nb * {NB} + {NB}"), em.view(pk, P, "0", NB))

    def _epilogue(self, ph, t: Tiling, here, rows, N, NB, NT, block, trans, members, consumers, owner, pi, packs,
                  bare=None):
        """Output tile (i_r, i_nt) of a weight block, its matmuls' accumulators in `here`: the
        epilogue on it, then keep (block buffer, transposed stationary) and store / pack. `bare`:
        a where whose mask keeps every position of these tiles, so its value is its input's."""
        em = self.em
        P = t.row_tile
        col0 = _ex(("i_nb", NB), ("i_nt", NT))
        kept = lambda n: em.view(block[n], P, _ex(("i_r", N), ("i_nb", NB), ("i_nt", NT)), NT)
        epilogue = ph.epilogue
        if bare is not None:
            em.comment(f"{bare.op.value}: the mask keeps every position of these tiles")
            here[bare] = here[bare.inputs[1]]
            epilogue = [n for n in epilogue if n is not bare]
        if epilogue:
            needed = [n for n in epilogue if n in block or n in trans
                      or self._needs_store(n, consumers, owner, pi)]
            # a value only kept for a later phase is written into its block buffer at once
            only_kept = lambda n: n in block and n not in trans and not self._needs_store(n, consumers, owner, pi)

            def packed(n):
                """A value only stored, untransposed, and read by nothing in this pass is written
                straight into its output block (the instruction casts to the kernel's dtype as the
                copy would)."""
                stores = self._needs_store(n, consumers, owner, pi)
                if (len(stores) != 1 or stores[0][1] or n in block or n in trans
                        or pi in consumers.get(n, ()) or n in ph.matmuls):
                    return None
                return em.view(packs[(n, stores[0][0])], P, _ex(("i_nt", NT)), NT)
            here.update(self.run_program(
                epilogue, needed,
                lambda x: self.operand(x, here, block, members, "i_r", P, rows, chunk=(col0, NT)),
                lambda n: (kept(n) if only_kept(n) else packed(n) or
                           em.view(em.alloc(self._nm(n), P, NT, "f32"), P, "0", NT)), P,
                chunk=(N, NT), memories={mm: "psum" for mm in ph.matmuls}))
        for n in ph.nodes:
            if n in block and here[n] != kept(n):
                em.copy(kept(n), here[n])
            if n in trans:
                ttile, tk, _ = trans[n]
                KT = self.cols(n) // tk  # n's k tile as a later matmul's stationary operand
                if NT % KT:
                    raise UnsupportedError(f"output tiles of {NT} columns are not whole contraction tiles of {KT}")
                em.transpose_into(ttile, here[n], P, KT, NT // KT, "i_r",
                                  _ex(("i_r", tk * P), ("i_nb", NB // KT * P), ("i_nt", NT // KT * P)))
            for oname, tr in self._needs_store(n, consumers, owner, pi):
                if tr:
                    em.store_transposed(oname, here[n], rows, P, col0, NT, self._batch_prefix(n))
                elif here[n] != em.view(packs[(n, oname)], P, _ex(("i_nt", NT)), NT):
                    em.copy(em.view(packs[(n, oname)], P, _ex(("i_nt", NT)), NT), here[n])

    def _ref_rows_cols(self, node: Node, r0: str, nr: int, c0: str, nc: int) -> str:
        """HBM block node[.., r0:r0+nr, c0:c0+nc] (batch indices from the loops); of a column
        slice of an input (a fused gate-and-up weight's half), the block of the input it reads."""
        if node.op is Op.SLICE and self.w.roles.get(node) == "view":
            cut = column_slice(node, self.sizes)
            if cut is None or cut[2] != 1:
                raise UnsupportedError("a matmul operand that is a slice of rows or a strided slice of an input")
            c0 = _ex((c0, 1), cut[0]) if cut[0] else c0
        src = view_source(node) if self.w.roles.get(node) == "view" else node
        if src not in self.hbm:  # e.g. a transpose of a value made on chip, as a moving operand
            raise UnsupportedError(f"a matmul operand {src.op.value} that no pass stores in HBM")
        name = self.hbm[src]
        idx = self._batch_prefix(src) + [f"{r0}:{r0} + {nr}", f"{c0}:{c0} + {nc}"]
        return f"{name}[{', '.join(idx)}]"


def _group_of(phase) -> Group:
    return Group(tuple(phase.nodes))
