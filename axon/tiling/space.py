"""Symbolic tiling: tile / block / count parameters per dimension, constrained by the target.

Every pass (a `fusion.nodes.Group`) is tiled along its dimensions:

  row R        = count_r * block_r * tile_r   tile_r on the partitions (<= partitions);
                                              block_r row tiles resident at once (they share
                                              every weight block loaded for them)
  width N      = count_n * block_n * tile_n   per matmul: tile_n <= one accumulator bank,
                                              block_n columns of weights resident at once
  contraction K = count_k * tile_k            tile_k <= the contraction limit; all K resident

The parameters are symbolic until `enumerate_tilings` binds them at concrete sizes; each binding
is checked against `Limits` (partition count, instruction free-size limits, accumulator banks)
and against on-chip capacity with `footprint`, the bytes per partition of everything live at
once. A binding that does not fit is rejected here, by the model, before any code is emitted.

Invariant: only `Limits` (numbers a target's hardware description supplies) is consulted; no
target module is imported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from axon.fusion.nodes import Group, Phase, RowWorld, phases
from axon.ir import Node
from axon.semantics.ops import Op
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
    k_tile: int
    col_split: int = 1  # element-wise passes: each row tile in this many column chunks (pipelined)

    def describe(self) -> dict:
        return {"row_tile": self.row_tile, "row_block": self.row_block, "n_tile": self.n_tile,
                "n_block": self.n_block, "k_tile": self.k_tile, "col_split": self.col_split}

    def n_block_for(self, n: int) -> int:
        return n if self.n_block == 0 or self.n_block > n else self.n_block

    def n_tile_for(self, n: int) -> int:
        return min(self.n_tile, n)


DEFAULT_ROW_BLOCKS = (1, 2, 4, 8)
DEFAULT_N_BLOCKS = (1, 2, 4, 8, 0)  # multiples of the n tile; 0: the whole width
DEFAULT_COL_SPLITS = (1, 2, 4, 8)  # column chunks per row tile in element-wise passes
MIN_CHUNK_BYTES = 512  # a chunk's contiguous bytes per partition: shorter DMAs are overhead-bound


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
                if x.op is not Op.SLICE:
                    return [1]
                start, _, step = x.params.slices[-1]
                if not (0 <= start < step):
                    return [1]
                widths.append(concrete(x.shape[-1], sizes))
            elif role in ("row", "vector") and concrete(x.shape[-1], sizes) > 1:
                widths.append(concrete(x.shape[-1], sizes))
            elif role not in ("row", "vector", "const"):
                return [1]
    return [s for s in splits if all(w % s == 0 and (s == 1 or (w // s) * dsize >= MIN_CHUNK_BYTES) for w in widths)]


def concrete(size: Size, sizes: Mapping[str, int]) -> int:
    return size.evaluate_int(sizes)


def group_dims(world: RowWorld, group: Group, sizes: Mapping[str, int]) -> dict:
    """The concrete extents the parameters of a pass tile: R, and every matmul's N and K."""
    ns, ks = [], []
    for n in group.nodes:
        if n.op is Op.MATMUL:
            ns.append(concrete(n.shape[-1], sizes))
            ks.append(concrete(n.inputs[0].shape[-1], sizes))
    return {"R": concrete(world.row, sizes), "N": ns, "K": ks}


def _divisor_at_most(n: int, bound: int) -> int:
    for d in range(min(n, bound), 0, -1):
        if n % d == 0:
            return d
    return 1


def enumerate_tilings(world: RowWorld, group: Group, sizes: Mapping[str, int], limits: Limits,
                      row_blocks: Iterable[int] = DEFAULT_ROW_BLOCKS,
                      n_blocks: Iterable[int] = DEFAULT_N_BLOCKS) -> tuple[list[Tiling], list[tuple[Tiling, str]]]:
    """All bindings of the pass's parameters: (those that fit, [(rejected, why)])."""
    dims = group_dims(world, group, sizes)
    R = dims["R"]
    row_tile = _divisor_at_most(R, min(limits.partitions, limits.stationary_free_max))
    k_tile = min([_divisor_at_most(k, limits.contraction_max) for k in dims["K"]] or [limits.partitions])
    n_tiles = sorted({_divisor_at_most(n, limits.moving_free_max) for n in dims["N"]} or {limits.moving_free_max})
    fits, rejected = [], []
    seen = set()
    splits = col_splits(world, group, sizes) if not dims["N"] else [1]
    for rb in row_blocks:
        if (R // row_tile) % rb:
            continue
        for nt in n_tiles[:1]:
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
                    (rejected.append((t, why)) if why else fits.append(t))
    return fits, rejected


def default_tiling(world: RowWorld, group: Group, sizes: Mapping[str, int], limits: Limits) -> Tiling:
    """The direct lowering's tiling: one row tile at a time, one bank-wide weight block."""
    dims = group_dims(world, group, sizes)
    R = dims["R"]
    row_tile = _divisor_at_most(R, min(limits.partitions, limits.stationary_free_max))
    k_tile = min([_divisor_at_most(k, limits.contraction_max) for k in dims["K"]] or [limits.partitions])
    nt = min([_divisor_at_most(n, limits.moving_free_max) for n in dims["N"]] or [limits.moving_free_max])
    return Tiling(row_tile, 1, nt, nt, k_tile)


# --- constraints ---------------------------------------------------------------------------
def check(world: RowWorld, group: Group, t: Tiling, sizes: Mapping[str, int], limits: Limits,
          dsize: int = 2) -> str:
    """'' if the tiling fits the target, else the first constraint it breaks."""
    if t.row_tile > limits.partitions:
        return f"row tile {t.row_tile} exceeds {limits.partitions} partitions"
    if t.n_tile > limits.moving_free_max:
        return f"matmul tile width {t.n_tile} exceeds {limits.moving_free_max}"
    if t.n_tile * 4 > limits.accum_bank_bytes:
        return f"matmul tile width {t.n_tile} does not fit one {limits.accum_bank_bytes}-byte accumulator bank"
    used = footprint(world, group, t, sizes, dsize)
    if used > limits.onchip_bytes:
        return (f"on-chip footprint {used} B per partition exceeds {limits.onchip_bytes} B "
                f"(row_block={t.row_block}, n_block={t.n_block or 'all'})")
    for ph in phases(world, group):
        if ph.kind == "matmul" and 2 * len(ph.matmuls) + 2 > limits.accum_banks:
            return f"{len(ph.matmuls)} accumulation groups in flight need more than {limits.accum_banks} banks"
        for n in ph.nodes if ph.kind == "row" else ():
            c = concrete(n.shape[-1], sizes)
            if c > limits.free_max:
                return f"{n.op.value} processes {c} elements per partition, more than {limits.free_max}"
    return ""


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
    vectors = {x for n in group.nodes for x in n.inputs if world.roles.get(x) == "vector"}
    total += sum(concrete(v.shape[-1], sizes) * F32 for v in vectors)
    peak = 0
    for i, ph in enumerate(phs):
        live = 0
        if ph.kind == "row":
            from axon.tiling.build import inplace_plan  # the emitter's in-place reuse, counted alike

            inputs = {x for n in ph.nodes for x in n.inputs if x not in members and world.roles.get(x) in ("row", "view")}
            kept = {n for n in ph.nodes if later_use.get(n, -1) > i}
            reuse = inplace_plan(ph.nodes, kept, set(), set(world.graph.outputs), set(),
                                 lambda x: concrete(x.shape[-1], sizes))
            own = [n for n in ph.nodes if n not in reuse and n not in kept]
            live += 2 * (sum(concrete(x.shape[-1], sizes) * dsize for x in inputs)
                         + sum(concrete(n.shape[-1], sizes) * F32 for n in own))
        else:
            K = concrete(ph.matmuls[0].inputs[0].shape[-1], sizes)
            N = concrete(ph.matmuls[0].shape[-1], sizes)
            nb = t.n_block_for(N)
            kt_count = -(-K // t.k_tile)
            live += 2 * len(ph.matmuls) * kt_count * nb * dsize  # weight blocks
            live += kt_count * t.row_block * t.row_tile * dsize  # the transposed left operand
            live += 2 * (len(ph.matmuls) + len(ph.epilogue) + 1) * t.n_tile_for(N) * F32
        peak = max(peak, live)
    saved = 0
    for i, ph in enumerate(phs):
        for n in ph.nodes:
            if later_use.get(n, -1) > i:
                saved += t.row_block * concrete(n.shape[-1], sizes) * F32
    return total + peak + saved
