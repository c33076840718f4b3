"""Symbolic tiling: tile / block / count parameters per dimension, constrained by the target.

Every pass (a `fusion.nodes.Group`) is tiled along its dimensions:

  row R        = count_r * block_r * tile_r   tile_r on the partitions (<= partitions);
                                              block_r row tiles resident at once (they share
                                              every weight block loaded for them)
  width N      = count_n * block_n * tile_n   per matmul: tile_n <= one accumulator bank,
                                              block_n columns of weights resident at once
  contraction K = count_p * k_block            tile_k <= the contraction limit; the weights stream
                = count_p * (k_block / tile_k) * tile_k  in pieces of k_block rows (0: all K
                                              resident), accumulating in a block-wide accumulator
  columns d    = count_c * col_chunk + tail     a pass that is one row phase may walk each row
                                              tile in column chunks of the last axis' symbol d
                                              (see fusion.nodes.chunk_plan): reductions
                                              accumulate per chunk, scans carry across chunks

The parameters are symbolic until `enumerate_tilings` binds them at concrete sizes; each binding
is checked against `Limits` (partition count, instruction free-size limits, accumulator banks)
and against on-chip capacity with `footprint`, the bytes per partition of everything live at
once. A binding that does not fit is rejected here, by the model, before any code is emitted.

Invariant: only `Limits` (numbers a target's hardware description supplies) is consulted; no
target module is imported.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from axon.fusion.nodes import Group, Phase, RowWorld, phases, view_source
from axon.ir import Node
from axon.semantics.ops import OP_SPECS, Op, OpKind
from axon.semantics.sizes import Size


@dataclass(frozen=True)
class Limits:
    """What tiling needs to know about a target (read off its hardware description)."""

    partitions: int  # row tile bound, and the contraction tile bound
    contraction_max: int  # K per matmul instruction
    stationary_free_max: int  # rows per matmul instruction
    moving_free_max: int  # output columns per matmul instruction
    free_max: int  # elements per partition of one element-wise instruction
    onchip_bytes: int  # on-chip scratch bytes per partition
    accum_bank_bytes: int  # accumulator bank bytes per partition
    accum_banks: int


@dataclass(frozen=True)
class Tiling:
    row_tile: int
    row_block: int  # row tiles per block
    n_tile: int  # output columns per matmul instruction
    n_block: int  # output columns per weight block (a multiple of n_tile); 0: whole width
    k_tile: int  # contraction rows per matmul instruction, at most (each matmul: k_tile_for)
    col_split: int = 1  # element-wise passes: each row tile in this many column chunks (pipelined)
    col_chunk: int = 0  # row passes: columns (of the last axis' symbol) per chunk, the last chunk
    # may be shorter; 0: whole rows
    k_block: int = 0  # matmul passes: contraction rows of each weight piece streamed through the
    # chip (a multiple of its k tile); 0: the whole K x n_block weight strip resident at once
    kv_chunk: int = 0  # an online-softmax pass (tiling.online): columns of the scores per chunk of
    # the walk; its weights whole on chip (n_block 0) or loaded per chunk (n_block = kv_chunk)

    def describe(self) -> dict:
        return {"row_tile": self.row_tile, "row_block": self.row_block, "n_tile": self.n_tile,
                "n_block": self.n_block, "k_tile": self.k_tile, "col_split": self.col_split,
                "col_chunk": self.col_chunk, "k_block": self.k_block, "kv_chunk": self.kv_chunk}

    def k_tile_for(self, k: int) -> int:
        """Contraction rows per matmul instruction for a matmul over k: the widest divisor of k
        within k_tile (attention at head dim 64 contracts q k^T over 64 rows, exp @ v over 128)."""
        return divisor_at_most(k, self.k_tile)

    def k_block_for(self, k: int) -> int:
        """Contraction rows per weight piece for a matmul over k: the largest multiple of its k
        tile that divides k and is at most k_block (k itself when nothing is streamed)."""
        if self.k_block == 0 or self.k_block >= k:
            return k
        kt = self.k_tile_for(k)
        for kb in range(self.k_block - self.k_block % kt, 0, -kt):
            if k % kb == 0:
                return kb
        return k

    def n_block_for(self, n: int) -> int:
        return n if self.n_block == 0 or self.n_block > n else self.n_block

    def n_tile_for(self, n: int) -> int:
        """Columns per matmul instruction for a matmul n wide: the widest divisor of n within n_tile
        (a pass's matmuls differ in width; each gets its own widest tile)."""
        return divisor_at_most(n, self.n_tile)


DEFAULT_ROW_BLOCKS = (1, 2, 4, 8)
DEFAULT_N_BLOCKS = (1, 2, 4, 8, 0)  # multiples of the n tile; 0: the whole width
DEFAULT_COL_SPLITS = (1, 2, 4, 8)  # column chunks per row tile in element-wise passes
MIN_CHUNK_BYTES = 512  # a chunk's contiguous bytes per partition: shorter DMAs are overhead-bound
DEFAULT_COL_CHUNKS = (1024, 2048, 4096, 8192, 16384)  # columns per chunk when rows are walked in chunks
DEFAULT_K_BLOCKS = (8192, 4096, 2048, 1024, 512, 256, 128)  # weight piece rows, tried largest first
DEFAULT_KV_CHUNKS = (4096, 2048, 1024, 512)  # score columns per chunk of an online-softmax walk
NARROW_N_TILES = (256, 128)  # output columns per matmul when no bank-wide tiling fits


def column_slice(view: Node, sizes: Mapping[str, int]) -> "tuple[int, int, int] | None":
    """(start, stop, step) of a slice that keeps every row and cuts only the columns (the last
    axis), at concrete sizes; None for a slice of rows or of a batch axis."""
    *rest, (start, stop, step) = view.params.slices
    if any(s != (0, None, 1) for s in rest):
        return None
    width = concrete(view.inputs[0].shape[-1], sizes)
    return concrete(start, sizes), width if stop is None else min(concrete(stop, sizes), width), step


def strided_columns(view: Node) -> bool:
    """A column slice over the whole row that starts inside its first step (x[:, 1::2]): each
    column chunk of it reads the same chunk of its source."""
    *rest, (start, stop, step) = view.params.slices
    whole = stop is None or stop == view.inputs[0].shape[-1]
    return all(s == (0, None, 1) for s in rest) and whole and isinstance(start, int) and 0 <= start < step


def col_splits(world: RowWorld, group: Group, sizes: Mapping[str, int], splits: Iterable[int] = DEFAULT_COL_SPLITS,
               dsize: int = 2) -> list[int]:
    """Column splits a pass admits: only element-wise operators (a chunk of columns is computed
    from the same chunk of every operand), every width divisible, strided views chunkable."""
    from axon.semantics.ops import OP_SPECS, OpKind

    widths = []
    for n in group.nodes:
        if OP_SPECS[n.op].kind is not OpKind.ELEMENTWISE:
            return [1]
        widths.append(concrete(n.shape[-1], sizes))
        for x in n.inputs:
            role = world.roles.get(x)
            if role == "view":
                if x.op is not Op.SLICE or not strided_columns(x):
                    return [1]
                widths.append(concrete(x.shape[-1], sizes))
            elif role in ("row", "vector") and concrete(x.shape[-1], sizes) > 1:
                widths.append(concrete(x.shape[-1], sizes))
            elif role not in ("row", "vector", "const"):
                return [1]
    return [s for s in splits if all(w % s == 0 and (s == 1 or (w // s) * dsize >= MIN_CHUNK_BYTES) for w in widths)]


def chunk_dim(world: RowWorld, group: Group) -> str:
    """The symbol d whose columns a pass may walk in chunks, or '' if it cannot be chunked: the pass
    is one row phase, every wide value (computed or read) is k*d columns wide, reductions keep their
    column, strided views start inside their step, and no output is stored transposed."""
    from axon.fusion.nodes import is_wide

    phs = phases(world, group)
    if len(phs) != 1 or phs[0].kind != "row":
        return ""
    members = set(group.nodes)
    if any(o.op is Op.TRANSPOSE and o.inputs[0] in members for o in world.graph.outputs):
        return ""
    values = list(group.nodes)
    for n in group.nodes:
        if OP_SPECS[n.op].kind is OpKind.REDUCE and is_wide(n) or n.op is Op.CONCAT:
            return ""  # a chunk of a concatenation is no concatenation of chunks
        for x in n.inputs:
            role = world.roles.get(x)
            if role == "view":
                if x.op is not Op.SLICE or not strided_columns(x):
                    return ""
                values += [x, x.inputs[0]]
            elif role in ("row", "vector"):
                values.append(x)
            elif role != "const" and x not in members:
                return ""
    syms = set()
    for v in values:
        w = v.shape[-1]
        if w == Size.of(1):
            continue
        if len(w.terms) != 1 or len(w.terms[0][0]) != 1 or w.terms[0][1].denominator != 1:
            return ""
        syms.add(w.terms[0][0][0])
    return syms.pop() if len(syms) == 1 else ""


def concrete(size, sizes: Mapping[str, int]) -> int:
    """A Size (or a plain int: a slice bound) at concrete sizes."""
    return size if isinstance(size, int) else size.evaluate_int(sizes)


def group_dims(world: RowWorld, group: Group, sizes: Mapping[str, int]) -> dict:
    """The concrete extents the parameters of a pass tile: R, and every matmul's N and K."""
    ns, ks = [], []
    for n in group.nodes:
        if n.op is Op.MATMUL:
            ns.append(concrete(n.shape[-1], sizes))
            ks.append(concrete(n.inputs[0].shape[-1], sizes))
    return {"R": concrete(world.row, sizes), "N": ns, "K": ks}


def divisor_at_most(n: int, bound: int) -> int:
    for d in range(min(n, bound), 0, -1):
        if n % d == 0:
            return d
    return 1


def enumerate_tilings(world: RowWorld, group: Group, sizes: Mapping[str, int], limits: Limits,
                      row_blocks: Iterable[int] = DEFAULT_ROW_BLOCKS,
                      n_blocks: Iterable[int] = DEFAULT_N_BLOCKS,
                      col_chunks: Iterable[int] = DEFAULT_COL_CHUNKS) -> tuple[list[Tiling], list[tuple[Tiling, str]]]:
    """All bindings of the pass's parameters: (those that fit, [(rejected, why)])."""
    dims = group_dims(world, group, sizes)
    R = dims["R"]
    row_tile = divisor_at_most(R, min(limits.partitions, limits.stationary_free_max))
    k_tile = max([divisor_at_most(k, limits.contraction_max) for k in dims["K"]] or [limits.partitions])
    n_tiles = sorted({divisor_at_most(n, limits.moving_free_max) for n in dims["N"]} or {limits.moving_free_max})
    fits, rejected = [], []
    seen = set()
    splits = col_splits(world, group, sizes) if not dims["N"] else [1]
    # the bank-wide n tile first (each matmul of the pass then takes its widest divisor of it);
    # narrower ones only when nothing fits with it
    widths = n_tiles[-1:] + [w for w in NARROW_N_TILES if w < n_tiles[-1] and all(n % w == 0 for n in dims["N"])]
    for nt in (widths if dims["N"] else n_tiles[:1]):
        if fits:
            break
        for rb in row_blocks:
            if (R // row_tile) % rb:
                continue
            for nbm in (n_blocks if dims["N"] else (1,)):
                nb = 0 if nbm == 0 else nt * nbm
                if nb and any(n % nb for n in dims["N"]):
                    continue
                if nb and all(nb >= n for n in dims["N"]):
                    nb = 0
                for cs in splits:
                    t = Tiling(row_tile, rb, nt, nb, k_tile, cs)
                    if t in seen:
                        continue
                    seen.add(t)
                    why = check(world, group, t, sizes, limits)
                    if why and dims["N"]:
                        t, why = _streamed(world, group, t, sizes, limits, why, dims["K"])
                    (rejected.append((t, why)) if why else fits.append(t))
    # column chunks: where whole rows do not fit, and for scans (one walk, so chunks cost no
    # extra traffic and let loads, the scan and stores of consecutive chunks overlap)
    d = chunk_dim(world, group) if not dims["N"] else ""
    if d and (not fits or _has_scan(group)):
        for rb in row_blocks:
            if (R // row_tile) % rb:
                continue
            for cc in col_chunks:
                if cc >= sizes[d]:
                    continue
                t = Tiling(row_tile, rb, n_tiles[0], 0, k_tile, 1, cc)
                why = check(world, group, t, sizes, limits)
                (rejected.append((t, why)) if why else fits.append(t))
    fits += _online_tilings(world, group, sizes, limits, row_tile, k_tile, n_tiles[-1], rejected)
    return fits, rejected


def _online_tilings(world: RowWorld, group: Group, sizes, limits: Limits, row_tile: int, k_tile: int, nt: int,
                    rejected: list) -> list[Tiling]:
    """An online-softmax pass (tiling.online) walked in chunks of its scores' columns: one row
    tile at a time, the weights whole on chip (shared by every row block) or loaded per chunk."""
    from axon.tiling.online import merge_lemma, online_softmax
    from axon.verification import Status

    form = online_softmax(world, group)
    if form is None:
        return []
    lemma = merge_lemma()
    if lemma.status is not Status.PROVED:  # never without the proof: the walk is only that merge
        rejected.append((Tiling(row_tile, 1, nt, 0, k_tile, kv_chunk=DEFAULT_KV_CHUNKS[0]),
                         f"online softmax: the merge of chunk states is {lemma.status.value} ({lemma.reason})"))
        return []
    T, out = sizes[form.dim], []
    # weights whole on chip pay off when several row tiles share them; loaded per chunk they move
    # the same bytes for one row tile, and the loads overlap the walk instead of preceding it
    shared = weights_shared_from(world, [form.scores, form.values], Tiling(row_tile, 1, nt, 0, k_tile), set(group.nodes),
                                 sizes, lambda n: n.op is Op.INPUT)
    sharing = concrete(world.row, sizes) // row_tile * math.prod(concrete(b, sizes) for b in world.batch[shared:])
    for ch in DEFAULT_KV_CHUNKS:
        if ch >= T or T % ch or ch % nt:
            continue
        whole = Tiling(row_tile, 1, nt, 0, k_tile, kv_chunk=ch)
        why = check(world, group, whole, sizes, limits) if sharing > 1 else "one row tile per weight load"
        if not why:
            out.append(whole)
            continue
        t = Tiling(row_tile, 1, nt, ch, k_tile, kv_chunk=ch)
        why = check(world, group, t, sizes, limits)
        (rejected.append((t, why)) if why else out.append(t))
    return out


def weights_shared_from(world: RowWorld, phs, t: Tiling, members, sizes, in_hbm) -> int:
    """The first batch loop none of a pass's matmul weights varies over (len(batch): none), when
    every weight is an HBM value (`in_hbm`) loaded whole (all of K, one block of N): the weight
    blocks are then loaded once, outside those loops, and shared by their iterations (the kv
    head's K and V, shared by the query heads of its group)."""
    wb = world.batch
    mms = [mm for ph in phs if ph.kind != "row" for mm in ph.matmuls]
    if not mms:
        return len(wb)
    first = 0
    for mm in mms:
        B = mm.inputs[1]
        src = view_source(B) if world.roles.get(B) == "view" else B
        K, N = concrete(mm.inputs[0].shape[-1], sizes), concrete(mm.shape[-1], sizes)
        if src in members or not in_hbm(src) or t.k_block_for(K) < K or t.n_block_for(N) < N:
            return len(wb)
        nb = src.rank - 2
        varies = [len(wb) - nb + j for j in range(nb) if concrete(src.shape[j], sizes) != 1]
        first = max([first] + [j + 1 for j in varies])
    return first


def _streamed(world: RowWorld, group: Group, t: Tiling, sizes, limits: Limits, why: str, ks,
              k_blocks: Iterable[int] = DEFAULT_K_BLOCKS) -> tuple[Tiling, str]:
    """A matmul tiling whose resident weight strips do not fit: the same tiling with the weights
    streamed along K in the largest pieces that fit (the first failure's reason if none does)."""
    for kb in k_blocks:
        if kb % t.k_tile or kb >= max(ks):
            continue
        s = Tiling(t.row_tile, t.row_block, t.n_tile, t.n_block, t.k_tile, t.col_split, t.col_chunk, kb)
        if not check(world, group, s, sizes, limits):
            return s, ""
    return t, why


def _has_scan(group: Group) -> bool:
    return any(OP_SPECS[n.op].kind is OpKind.SCAN for n in group.nodes)


def default_tiling(world: RowWorld, group: Group, sizes: Mapping[str, int], limits: Limits) -> Tiling:
    """The direct lowering's tiling: one row tile at a time, one bank-wide weight block."""
    dims = group_dims(world, group, sizes)
    R = dims["R"]
    row_tile = divisor_at_most(R, min(limits.partitions, limits.stationary_free_max))
    # the direct lowering: one contraction tile, the narrowest, for all of the pass's matmuls
    k_tile = min([divisor_at_most(k, limits.contraction_max) for k in dims["K"]] or [limits.partitions])
    nt = min([divisor_at_most(n, limits.moving_free_max) for n in dims["N"]] or [limits.moving_free_max])
    t = Tiling(row_tile, 1, nt, nt, k_tile)
    why = check(world, group, t, sizes, limits)
    if dims["N"] and why:  # the weight strip of a long contraction does not fit: stream it along K
        return _streamed(world, group, t, sizes, limits, why, dims["K"])[0]
    if not dims["N"] and why and chunk_dim(world, group):
        # whole rows do not fit: the widest column chunk that does (the direct lowering must run)
        for cc in sorted(DEFAULT_COL_CHUNKS, reverse=True):
            chunked = Tiling(row_tile, 1, nt, nt, k_tile, 1, cc)
            if not check(world, group, chunked, sizes, limits):
                return chunked
    return t


# --- constraints ---------------------------------------------------------------------------
def check(world: RowWorld, group: Group, t: Tiling, sizes: Mapping[str, int], limits: Limits,
          dsize: int = 2) -> str:
    """'' if the tiling fits the target, else the first constraint it breaks."""
    if t.kv_chunk:
        return _check_online(world, group, t, sizes, limits, dsize)
    if t.row_tile > limits.partitions:
        return f"row tile {t.row_tile} exceeds {limits.partitions} partitions"
    if t.n_tile > limits.moving_free_max:
        return f"matmul tile width {t.n_tile} exceeds {limits.moving_free_max}"
    if t.n_tile * 4 > limits.accum_bank_bytes:
        return f"matmul tile width {t.n_tile} does not fit one {limits.accum_bank_bytes}-byte accumulator bank"
    if t.k_block % t.k_tile:
        return f"weight piece of {t.k_block} rows is not a multiple of the contraction tile {t.k_tile}"
    used = footprint(world, group, t, sizes, dsize)
    if used > limits.onchip_bytes:
        return _misfit(world, group, t, sizes, used, limits, dsize)
    wid = _width_fn(world, group, t, sizes)
    bank_elems = limits.accum_bank_bytes // 4
    for ph in phases(world, group):
        if ph.kind == "matmul" and _streams(ph, t, sizes):
            # every output column of the block accumulates across the pieces: len(matmuls) block-wide
            # accumulators stay in the banks, plus two for transposes and broadcasts
            N = concrete(ph.matmuls[0].shape[-1], sizes)
            nt, nb = t.n_tile_for(N), t.n_block_for(N)
            if bank_elems % nt:
                return f"matmul tile width {nt} does not pack into {limits.accum_bank_bytes}-byte banks"
            banks = len(ph.matmuls) * -(-t.row_block * nb // bank_elems) + 2
            if banks > limits.accum_banks:
                return (f"{len(ph.matmuls)} streamed accumulators of {t.row_block} x {nb} columns need {banks} "
                        f"banks, more than {limits.accum_banks}")
        elif ph.kind == "matmul" and 2 * len(ph.matmuls) + 2 > limits.accum_banks:
            return f"{len(ph.matmuls)} accumulation groups in flight need more than {limits.accum_banks} banks"
        for n in ph.nodes if ph.kind == "row" else ():
            c = wid(n)
            if c > limits.free_max:
                return f"{n.op.value} processes {c} elements per partition, more than {limits.free_max}"
    return ""


def _check_online(world: RowWorld, group: Group, t: Tiling, sizes, limits: Limits, dsize: int) -> str:
    """An online-softmax walk fits when one chunk's pass does (its sizes with t = the chunk),
    with the running state beside it and, for weights kept whole, the whole weights."""
    from axon.tiling.online import online_softmax

    form = online_softmax(world, group)
    if form is None:
        return "not an online-softmax pass (max, exp, sum between two matmuls)"
    chunk = {**sizes, form.dim: t.kv_chunk}
    per_chunk = Tiling(t.row_tile, t.row_block, t.n_tile, 0, t.k_tile)
    why = check(world, group, per_chunk, chunk, limits, dsize)
    if why:
        return f"{why} (one chunk of {t.kv_chunk} {form.dim} columns)"
    used = footprint(world, group, per_chunk, chunk, dsize) + _online_extra_bytes(form, t, sizes, dsize)
    if used > limits.onchip_bytes:
        return (f"online softmax: on-chip footprint {used / 1024:.1f} KiB per partition (chunks of {t.kv_chunk}, "
                f"weights {'whole' if not t.n_block else 'per chunk'}) exceeds the {limits.onchip_bytes / 1024:.1f} KiB on chip")
    return ""


def _online_extra_bytes(form, t: Tiling, sizes, dsize: int) -> int:
    """Bytes per partition an online walk keeps beyond one chunk's pass: every chunk's state in
    its slots (two f32 columns and an f32 row of the output; the max at most f32), the running
    max and a merge's temporaries (at most a state, twice) and, with weights kept whole, the rest
    of both weights."""
    F32 = 4
    state = F32 * (2 + concrete(form.o.shape[-1], sizes))
    extra = 2 * state + sizes[form.dim] // t.kv_chunk * state
    if not t.n_block:
        T = sizes[form.dim]
        W1, W2 = form.scores.matmuls[0].inputs[1], form.o.inputs[1]
        # W1 [K, T] in K / k tiles of T columns; W2 [T, N] in T / k tiles of N columns
        rest, K = T - t.kv_chunk, concrete(W1.shape[-2], sizes)
        extra += -(-K // t.k_tile_for(K)) * rest * dsize
        extra += rest // t.k_tile_for(t.kv_chunk) * concrete(W2.shape[-1], sizes) * dsize
    return extra


def _misfit(world: RowWorld, group: Group, t: Tiling, sizes, used: int, limits: Limits, dsize: int) -> str:
    """Why a tiling does not fit on chip, naming the pass's widest operator and its row."""
    kib = lambda b: f"{b / 1024:.1f} KiB"
    widest = max(group.nodes, key=lambda n: concrete(n.shape[-1], sizes))
    if any(n.op is Op.MATMUL for n in group.nodes):
        what, how = "matmul", f"row_block={t.row_block}, n_block={t.n_block or 'all'}" + (
            f", k_block={t.k_block}" if t.k_block else ", whole contraction resident")
    else:
        what = widest.op.value
        how = (f"a row of {concrete(widest.shape[-1], sizes)} {dsize}-byte elements"
               + (f" in chunks of {t.col_chunk} columns" if t.col_chunk else
                  f" in {t.col_split} column chunks" if t.col_split > 1 else "")
               + f", row_block={t.row_block}")
    return f"{what}: on-chip footprint {kib(used)} per partition ({how}) exceeds the {kib(limits.onchip_bytes)} on chip"


def _width_fn(world: RowWorld, group: Group, t: Tiling, sizes: Mapping[str, int]):
    """node -> the columns of its tile in a row phase: a column chunk's, a column split's, or the row's."""
    if t.col_chunk:
        d = chunk_dim(world, group)
        csizes = {**sizes, d: min(t.col_chunk, sizes[d])}
        return lambda x: concrete(x.shape[-1], csizes)
    if t.col_split > 1:
        return lambda x: (lambda w: w // t.col_split if w > 1 else w)(concrete(x.shape[-1], sizes))
    return lambda x: concrete(x.shape[-1], sizes)


def _row_live(world: RowWorld, nodes, members, kept, wid, dsize: int) -> int:
    """Bytes per partition of one row phase's tiles (double-buffered): loaded operands in the
    kernel's dtype, computed values in f32 unless written over an operand in place."""
    from axon.tiling.build import inplace_plan  # the emitter's in-place reuse, counted alike

    inside = set(nodes)
    inputs = {x for n in nodes for x in n.inputs if x not in members and world.roles.get(x) in ("row", "view")}
    reuse = inplace_plan(nodes, kept & inside, set(), set(world.graph.outputs), set(), wid)
    own = [n for n in nodes if n not in reuse and n not in kept]
    return 2 * (sum(wid(x) * dsize for x in inputs) + sum(wid(n) * 4 for n in own))


def _streams(ph: Phase, t: Tiling, sizes) -> bool:
    """Whether a matmul phase streams its weights along K (tiling.k_block) under t."""
    K = concrete(ph.matmuls[0].inputs[0].shape[-1], sizes)
    return t.k_block_for(K) < K


def _stationary_bytes(ph: Phase, t: Tiling, sizes, dsize: int) -> int:
    """Bytes per partition of a matmul phase's transposed left operand: all of K, for the block's rows."""
    K = concrete(ph.matmuls[0].inputs[0].shape[-1], sizes)
    return -(-K // t.k_tile_for(K)) * t.row_block * t.row_tile * dsize


def footprint(world: RowWorld, group: Group, t: Tiling, sizes: Mapping[str, int], dsize: int = 2) -> int:
    """On-chip bytes per partition of everything live at once in the pass (double-buffered tiles)."""
    F32 = 4
    members = set(group.nodes)
    phs = phases(world, group)
    later_use: dict[Node, int] = {}
    for i, ph in enumerate(phs):
        for n in ph.nodes:
            for x in n.inputs:
                if n.op is Op.MATMUL and x is n.inputs[0]:
                    continue  # a stationary operand is kept only transposed (counted below), as the builder does
                later_use[x] = max(later_use.get(x, -1), i)
    total = 0
    # vectors are broadcast once per kernel, for every pass: all of them are live in each
    vectors = {x for n in world.compute_nodes() for x in n.inputs if world.roles.get(x) == "vector"}
    total += sum(concrete(v.shape[-1], sizes) * F32 for v in vectors)
    peak = 0
    for i, ph in enumerate(phs):
        live = 0
        if ph.kind == "row":
            wid = _width_fn(world, group, t, sizes)
            kept = {n for n in ph.nodes if later_use.get(n, -1) > i}
            sets = [ph.nodes]
            scans = [n for n in ph.nodes if OP_SPECS[n.op].kind is OpKind.SCAN]
            if t.col_chunk:  # one sweep's chunk tiles at a time, plus accumulator and carry columns
                from axon.fusion.nodes import chunk_plan

                needed = {n for n in ph.nodes if n in world.graph.outputs
                          or any(n in m.inputs for m in world.graph.nodes() if m not in members)}
                _, sweeps = chunk_plan(ph.nodes, needed)
                sets = [[n for n in ph.nodes if n in set(sw.wide) | set(sw.reduce)] for sw in sweeps]
                live += 2 * F32 * sum(len(sw.reduce) + len(sw.scans) for sw in sweeps)
                live += 2 * sum(wid(n) * dsize for n in scans)  # a carried scan is cast for its store
            live += max(_row_live(world, nodes, members, kept, wid, dsize) for nodes in sets)
            # a scan's identity operand may be a constant tile, set once per chunk width
            live += F32 * max((wid(n) for n in scans), default=0) * (2 if t.col_chunk else 1)
        else:
            K = concrete(ph.matmuls[0].inputs[0].shape[-1], sizes)
            N = concrete(ph.matmuls[0].shape[-1], sizes)
            nb = t.n_block_for(N)
            kb_count = -(-t.k_block_for(K) // t.k_tile_for(K))  # k tiles per resident weight piece
            live += 2 * len(ph.matmuls) * kb_count * nb * dsize  # weight pieces (double-buffered)
            live += 2 * (len(ph.matmuls) + len(ph.epilogue) + 1) * t.n_tile_for(N) * F32
            stored = [n for n in ph.nodes if n in world.graph.outputs
                      or any(n in m.inputs for m in world.graph.nodes() if m not in members)]
            live += len(stored) * nb * dsize  # output blocks packed for one store
        # transposed left operands: one computed in the pass is allocated when the row block starts,
        # one loaded from HBM when its phase starts; both stay until the row block ends
        live += sum(_stationary_bytes(ph2, t, sizes, dsize) for j, ph2 in enumerate(phs) if ph2.kind == "matmul"
                    and (j <= i or ph2.matmuls[0].inputs[0] in members))
        peak = max(peak, live)
    saved = 0
    for i, ph in enumerate(phs):
        for n in ph.nodes:
            if later_use.get(n, -1) > i:
                saved += t.row_block * concrete(n.shape[-1], sizes) * F32
    return total + peak + saved
