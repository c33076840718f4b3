"""Sketches: one instruction with its holes and operand slots filled from a pool of values.

The pool holds what a slot may read: the pattern's operands, their transposes and partition
broadcasts (layout moves, offered only when the pattern moves data across partitions or
broadcasts a row), the constants of the pattern and of its operators' definitions, and the
outputs of earlier steps. `instances` enumerates one instruction's fillings, pruned before any
meaning is built by (1) hole domains restricted to the pattern's basic operations, (2) the
basic operations the filled instruction could at most contribute (it must cover what is still
missing), (3) memories and shape letters shared between slots, (4) the spec's own validity
rule (operator/flag symmetries).

Invariant: pruning only removes sketches whose meaning cannot be the target (coverage) or that
the hardware rejects (memory, shapes), or duplicates of another sketch (symmetry).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Optional

from axon.errors import ShapeError
from axon.ir import Node, input_node
from axon.semantics.ops import Op
from axon.semantics.scalar import SCALAR_SPECS
from axon.semantics.sizes import Size
from axon.synthesis.lowering import Arg
from axon.synthesis.spec import Form, Inexpressible, InstructionSpec, basic_ops, const_node, scalar_basics

ONE = Size.of(1)


@dataclass(frozen=True, eq=False)
class Value:
    """Something a slot can be filled with: where it comes from, its meaning, where it lives."""

    arg: Arg
    node: Node
    memory: str
    view: tuple  # the shape slots unify with; None on an axis a broadcast fills in
    ops: frozenset = frozenset()  # basic operations the value itself adds (a transposed view: TRANSPOSE)

    @property
    def is_const(self) -> bool:
        return self.arg.kind == "const"


def hole_domain(hole, allowed: frozenset) -> tuple:
    """A hole's values, keeping only operators made of the pattern's allowed basic operations."""
    if hole.kind not in ("func", "alu", "reduce"):
        return hole.domain
    return tuple(v for v in hole.domain if v is None or scalar_basics(v)[0] <= allowed)


def _fits(slot, value: Value) -> Optional[Form]:
    """The form in which `value` can fill `slot`, or None."""
    if value.is_const:
        if Form.IMMEDIATE in slot.forms:
            return Form.IMMEDIATE
        return Form.FILL if Form.FILL in slot.forms else None
    if value.memory not in slot.memories or len(value.view) != 2:
        return None
    if Form.TILE in slot.forms:
        return Form.TILE
    if Form.COLUMN in slot.forms and value.view[1] == ONE:
        return Form.COLUMN
    return None


def _unify(spec: InstructionSpec, filled: Mapping[str, tuple[Value, Form]]) -> bool:
    """Shape letters shared by the slots bind to one size each; literal 1s must be 1."""
    env: dict = {}
    for slot in spec.slots:
        if slot.name not in filled:
            continue
        value, form = filled[slot.name]
        if form in (Form.IMMEDIATE, Form.FILL):
            continue
        letters = (slot.shape[0], 1) if form is Form.COLUMN else slot.shape
        for letter, size in zip(letters, value.view):
            if size is None:
                continue
            if isinstance(letter, int):
                if size != Size.of(letter):
                    return False
            elif env.setdefault(letter, size) != size:
                return False
    return True


class OpsCache:
    """The basic operations of an instruction for given holes and present slots, read off its
    meaning applied to placeholder operands (so they are never written down twice)."""

    def __init__(self):
        self._table: dict = {}

    def upper(self, spec: InstructionSpec, holes: Mapping, present: frozenset) -> Optional[frozenset]:
        key = (spec.name, tuple(sorted(holes.items(), key=lambda kv: kv[0])), present)
        if key not in self._table:
            self._table[key] = self._compute(spec, holes, present)
        return self._table[key]

    @staticmethod
    def _compute(spec, holes, present) -> Optional[frozenset]:
        args = {}
        for slot in spec.slots:
            if slot.name not in present:
                args[slot.name] = None
            elif Form.TILE in slot.forms:
                args[slot.name] = input_node(f"_{slot.name}", tuple(Size.of(s) for s in slot.shape))
            elif Form.COLUMN in slot.forms:
                args[slot.name] = input_node(f"_{slot.name}", (Size.of(slot.shape[0]), ONE))
            else:
                args[slot.name] = const_node(2.0)  # not an identity element of any operator
        try:
            outs = spec.meaning(holes, args)
        except (Inexpressible, ShapeError):
            return None  # depends on the operands (e.g. a scan with a ones tile): no pruning
        from axon.ir import toposort

        return ops_with_layout(toposort(tuple(outs.values())))


def ops_with_layout(nodes) -> frozenset:
    """Basic scalar operations plus Op.TRANSPOSE when data moves across partitions."""
    ops, _ = basic_ops(nodes)
    if any(n.op is Op.TRANSPOSE for n in nodes):
        ops = ops | {Op.TRANSPOSE}
    return ops


def hole_combinations(spec: InstructionSpec, allowed: frozenset) -> Iterator[dict]:
    """Hole assignments, a flag tied to an operator (`of`) set only for a non-commutative one."""
    names = [h.name for h in spec.holes]
    for combo in itertools.product(*(hole_domain(h, allowed) for h in spec.holes)):
        holes = dict(zip(names, combo))
        if all(not holes[h.name] or not commutes(holes[h.of]) for h in spec.holes if h.of is not None):
            yield holes


def instances(spec: InstructionSpec, pool: list[Value], allowed: frozenset, need: Callable[[frozenset], bool],
              must_use: Optional[set], ops_cache: OpsCache, stats: dict) -> Iterator[tuple[dict, dict]]:
    """Every (holes, slot -> Value) filling of `spec` from `pool` that survives the pruning rules.

    `need(ops)`: whether an instruction contributing `ops` can complete the sequence's basic
    operations; `must_use`: ids of values at least one slot must read (a later step reads the
    previous one). Absent optional slots come first, so the simplest filling of a value is met first.
    """
    fits = {slot.name: [(v, f) for v in pool if (f := _fits(slot, v)) is not None] for slot in spec.slots}
    view_ops = frozenset().union(*(v.ops for v in pool))
    everything = frozenset(s.name for s in spec.slots)
    for holes in hole_combinations(spec, allowed):
        upper_all = ops_cache.upper(spec, holes, everything)
        if upper_all is not None and not need(upper_all | view_ops):
            stats["pruned_ops"] += 1
            continue
        options = []
        for s in spec.slots:
            if s.hole is not None and holes.get(s.hole) is None:
                options.append([None])
            else:
                options.append(([None] if s.optional and s.hole is None else []) + fits[s.name])
        for choice in _choices(options, must_use):
            filled = {s.name: c for s, c in zip(spec.slots, choice) if c is not None}
            stats["sketches"] += 1
            if not spec.valid(holes, {k: v.arg for k, (v, _) in filled.items()}):
                stats["pruned_symmetry"] += 1
                continue
            upper = ops_cache.upper(spec, holes, frozenset(filled))
            if upper is not None and not need(upper.union(*(v.ops for v, _ in filled.values()))):
                stats["pruned_ops"] += 1
                continue
            if not _unify(spec, filled):
                stats["pruned_shape"] += 1
                continue
            yield holes, {k: v for k, (v, _) in filled.items()}


def _choices(options: list, must_use: Optional[set]):
    """The product of the slot options; with `must_use`, only fillings that read one of those
    values (enumerated by the first slot that does, so none is produced twice)."""
    if must_use is None:
        yield from itertools.product(*options)
        return
    uses = lambda o: o is not None and id(o[0]) in must_use
    for k in range(len(options)):
        first = [o for o in options[k] if uses(o)]
        if not first:
            continue
        before = [[o for o in opts if not uses(o)] for opts in options[:k]]
        yield from itertools.product(*before, first, *options[k + 1:])


def commutes(op) -> bool:
    return op is None or SCALAR_SPECS[op].commutative
