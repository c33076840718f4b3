"""Refutation by evaluation: both sides run in NumPy (float64) at small concrete sizes on random inputs.

This is the cheap first filter of every equivalence check and the only source of reported
counterexamples. float64 only *flags* candidate elements (a difference of more than SCREEN_ULPS
units in the last place of the operands' magnitude, or NaN/inf where the other side has a number);
each flagged element is then recomputed in high precision from the element rules
(axon/semantics/precise.py) and reported only if the two programs differ there too. So rounding
((x + 1e10) - 1e10, exp(x + 1000) * exp(-1000), softmax of 800 x) is never a counterexample, and
an exact difference that is small next to the output (x * 1e12 vs x * 1e12 + 1) is still seen.

Size bindings respect the graphs' `SizeFact`s and keep every intermediate size positive; the
first binding gives each dimension a distinct value (so a misplaced transpose of two symbolic
dimensions cannot hide behind equal sizes), later ones are random and may use 1 (broadcasts).
`domain_failures` evaluates a grid of the smallest sizes for divisors (and log arguments) that
are zero for every input: sizes the claim of a proof must leave out.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from axon.ir import Graph, Node, toposort
from axon.semantics import precise
from axon.semantics.evaluate import evaluate, evaluate_nodes
from axon.semantics.ops import Op
from axon.semantics.sizes import Size, bind_shape

SCREEN_ULPS = 64      # float64 flags |a - b| > SCREEN_ULPS * eps * (|a| + |b|) for a precise recheck
CONFIRM_PER_OUTPUT = 16  # flagged elements rechecked in high precision per output and binding
RUNGS = 4             # a difference is confirmed at up to 4 precisions: PRECISION_DIGITS, 2x, 4x, 8x
MAX_ELEMENTS = 4096   # per input tensor: keeps one trial to milliseconds
LARGE_ELEMENTS = 1 << 20  # the most a lone trial may take where no binding is under MAX_ELEMENTS
GRID = (1, 2, 3, 4)   # the sizes `domain_failures` tries along each dimension (1, 2, 3 past 2 dims)
ZERO = 1e-9           # |divisor| below this at one element on every draw of DRAWS: zero for every input
DIVISOR_OPERANDS = {Op.DIV: 1, Op.RECIPROCAL: 0, Op.RSQRT: 0, Op.LOG: 0}  # operand that must be != 0


# Inputs a divisor is tried on: a vanishing divisor must vanish on all of them. Two standard-normal
# draws, then all-positive and all-negative ones, so a divisor that is zero only on part of the
# input space (relu(y).sum() where a row is <= 0) is not mistaken for one that is zero everywhere.
DRAWS = (lambda rng, shape: rng.standard_normal(shape), lambda rng, shape: rng.standard_normal(shape),
         lambda rng, shape: np.abs(rng.standard_normal(shape)) + 0.5,
         lambda rng, shape: -np.abs(rng.standard_normal(shape)) - 0.5)


def node_dims(nodes: Iterable[Node]) -> list[str]:
    """Dimension names used by any shape or symbolic constant among `nodes`, in first-seen order."""
    names: list[str] = []
    for node in nodes:
        sizes = list(node.shape)
        if node.op is Op.CONST and isinstance(node.params.value, Size):
            sizes.append(node.params.value)
        for size in sizes:
            for s in sorted(size.symbols):
                if s not in names:
                    names.append(s)
    return names


def valid_binding(binding: Mapping[str, int], nodes: Sequence[Node], constraints,
                  max_size: Optional[int] = None) -> bool:
    """Every size of every node is a positive integer (at most `max_size`, if given) and every
    divisibility precondition holds."""
    if not all(fact.holds(binding) for fact in constraints):
        return False
    for node in nodes:
        for size in node.shape:
            value = size.evaluate(binding)
            if value.denominator != 1 or value < 1 or (max_size is not None and value > max_size):
                return False
    return True


def least_sizes(dims: Sequence[str], nodes: Sequence[Node]) -> dict[str, int]:
    """Per dimension, the least value every size of one dimension alone keeps positive: 17 for n
    where a program slices x[:, 16:] (size n - 16). Other sizes (m - n, m * n) are checked by
    `valid_binding` as they are."""
    least = {d: 1 for d in dims}
    for node in nodes:
        for size in node.shape:
            (name,) = size.symbols if len(size.symbols) == 1 else (None,)
            coeff = dict(size.terms).get((name,))
            if name in least and coeff is not None and coeff > 0 and len(size.terms) <= 2 and \
                    all(m in ((), (name,)) for m, _ in size.terms):
                least[name] = max(least[name], math.ceil((1 - size.constant) / coeff))
    return least


def bindings(dims: Sequence[str], nodes: Sequence[Node], constraints, count: int,
             rng: np.random.Generator, max_elements: Optional[int] = MAX_ELEMENTS) -> list[dict[str, int]]:
    """Up to `count` valid size bindings: distinct values first, then random small ones, each
    counted from the dimension's least size (`least_sizes`: a slice x[:, 16:] needs n >= 17),
    with at most `max_elements` in any value (None: any number, for shapes alone)."""
    found: list[dict[str, int]] = []
    base = {d: v - 1 for d, v in least_sizes(dims, nodes).items()}
    candidates = [{d: base[d] + 2 + i for i, d in enumerate(dims)}, {d: base[d] + 2 * (2 + i) for i, d in enumerate(dims)}]
    for _ in range(200):
        candidates.append({d: base[d] + int(rng.integers(1, 6)) for d in dims})
    smallest, smallest_elements = None, LARGE_ELEMENTS + 1
    for binding in candidates:
        if len(found) >= count:
            break
        if binding in found or not valid_binding(binding, nodes, constraints):
            continue
        elements = max((int(np.prod(bind_shape(n.shape, binding), dtype=np.int64)) for n in nodes), default=0)
        if max_elements is not None and elements > max_elements:
            if elements < smallest_elements:
                smallest, smallest_elements = binding, elements
            continue
        found.append(binding)
    # a literal size past MAX_ELEMENTS (a width of 6000) leaves no small binding: one larger trial
    # rather than none, so that such a program is checked numerically at all
    return found or ([smallest] if smallest is not None else [])


def random_inputs(inputs: Sequence[Node], binding: Mapping[str, int], rng: np.random.Generator) -> dict:
    return {n.params.name: rng.standard_normal(bind_shape(n.shape, binding)) for n in inputs}


def flagged(a: np.ndarray, b: np.ndarray) -> list[tuple[int, ...]]:
    """Indices where float64 cannot vouch that two same-shaped outputs agree, most suspicious first."""
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.abs(a - b)
        same = (np.isfinite(gap) & (gap <= SCREEN_ULPS * np.finfo(np.float64).eps * (np.abs(a) + np.abs(b)))) | (a == b)
        same |= np.isnan(a) & np.isnan(b)
        order = np.argsort(-np.where(np.isfinite(gap), gap / (np.abs(a) + np.abs(b) + 1e-300), np.inf), axis=None)
    bad = ~same.ravel()
    return [tuple(int(i) for i in np.unravel_index(k, a.shape)) for k in order if bad[k]][:CONFIRM_PER_OUTPUT]


def confirmed_difference(a: Graph, b: Graph, k: int, index,
                         elements: precise.Elements) -> Optional[tuple[float, float]]:
    """The two values of output `k` at `index` if they differ in high precision, else None. A
    difference must stay as the digits double (up to RUNGS times): one that shrinks by
    AGREE_DIGITS orders was the lower precision's, a tiny term absorbed by a large one
    ((exp(-400) + 1e12) - 1e12 is 0 at 100 digits, and a log of it -inf); an infinite gap is
    judged at the first precision where it is finite, or stays."""
    at, before = elements, None
    for rung in range(RUNGS):
        va, scale_a = at.at(a.outputs[k], index)
        vb, scale_b = at.at(b.outputs[k], index)
        if precise.agree(va, vb, max(scale_a, scale_b)):
            return None
        gap = precise.gap(va, vb)
        if before is not None and (precise.finite(before) or rung == RUNGS - 1):
            return None if precise.shrank(before, gap) else (float(va), float(vb))
        at, before = at.finer, gap
    return None


def refute(a: Graph, b: Graph, trials: int, seed: int, only: Optional[Sequence[dict]] = None,
           extra: Sequence[dict] = (), narrowed: Iterable = (), nonzero: Sequence[Size] = (),
           draws: Optional[Sequence] = None) -> Optional[dict]:
    """A counterexample to `a == b` (same output count and ranks assumed) confirmed in high
    precision, or None. Tries `trials` bindings of its own that meet the graphs' facts and
    `narrowed` and leave the sizes `nonzero` non-zero (or exactly `only`), then `extra`, with
    `draws` of the inputs (default: by the programs' divisors)."""
    nodes = toposort(a.outputs + b.outputs)
    inputs = {n.params.name: n for n in nodes if n.op is Op.INPUT}
    rng = np.random.default_rng(seed)
    constraints = a.constraints | b.constraints | frozenset(narrowed)
    trial_bindings = list(only) if only is not None else bindings(node_dims(nodes), nodes, constraints, trials, rng)
    trial_bindings += [x for x in extra if x not in trial_bindings]
    trial_bindings = [x for x in trial_bindings if all(s.evaluate(x) != 0 for s in nonzero)]
    # where the programs divide, all-positive and all-negative inputs too: a divisor made of relu or
    # max can vanish on a whole region of inputs that standard-normal draws rarely reach
    if draws is None:
        draws = DRAWS[1:] if divisor_nodes(nodes) else DRAWS[1:2]
    for binding, draw in itertools.product(trial_bindings, draws):
        arrays = {n.params.name: draw(rng, bind_shape(n.shape, binding)) for n in inputs.values()}
        outs_a = evaluate(Graph(tuple(inputs.values()), a.outputs, a.constraints), arrays, binding)
        outs_b = evaluate(Graph(tuple(inputs.values()), b.outputs, b.constraints), arrays, binding)
        for k, (out_a, out_b) in enumerate(zip(outs_a, outs_b)):
            if out_a.shape != out_b.shape:
                return {"sizes": dict(binding), "output": k, "shape_a": out_a.shape, "shape_b": out_b.shape}
            elements = precise.Elements(arrays, binding)  # shared by the elements confirmed on these inputs
            for index in flagged(out_a, out_b):
                values = confirmed_difference(a, b, k, index, elements)
                if values is not None:
                    return {"sizes": dict(binding), "output": k, "index": index, "a": values[0], "b": values[1]}
    return None


# Draws at the edges of the operators' domains: exact zeros (a divisor, a sqrt or log argument at
# 0) among negatives, and small integers (sums of them vanish too)
EDGE_DRAWS = (lambda rng, shape: np.where(rng.random(shape) < 0.3, 0.0, rng.standard_normal(shape)),
              lambda rng, shape: rng.integers(-2, 3, shape).astype(np.float64))


# What a solver's model is confirmed with: besides the screening's draws, ties and exact zeros
# (x > 0 against x >= 0) and magnitudes past a clamp (maximum(x, -40) against x)
CONFIRM_DRAWS = DRAWS[1:] + EDGE_DRAWS + (lambda rng, shape: 100.0 * rng.standard_normal(shape),)


def domain_difference(a: Graph, b: Graph, trials: int, seed: int) -> Optional[dict]:
    """Inputs at small sizes where one program is finite and the other is not, or None: the two
    are defined on different inputs, which a proof that assumes every divisor non-zero and every
    sqrt or log argument in range cannot see (where(m, c / d, 0) is 0 where m is 0 and d is 0;
    where(m, c, 0) / d is NaN there). Operands at the edges of the domains (EDGE_DRAWS); an input
    a `where` reads as its condition from {0, 1}, so both branches are taken."""
    nodes = toposort(a.outputs + b.outputs)
    inputs = {n.params.name: n for n in nodes if n.op is Op.INPUT}
    conditions = {n.inputs[0] for n in nodes if n.op is Op.WHERE}
    rng = np.random.default_rng(seed)
    found = bindings(node_dims(nodes), nodes, a.constraints | b.constraints, trials, rng)
    for binding, draw in itertools.product(found, EDGE_DRAWS):
        arrays = {name: (rng.integers(0, 2, bind_shape(n.shape, binding)).astype(np.float64) if n in conditions
                         else draw(rng, bind_shape(n.shape, binding))) for name, n in inputs.items()}
        outs_a = evaluate(Graph(tuple(inputs.values()), a.outputs, a.constraints), arrays, binding)
        outs_b = evaluate(Graph(tuple(inputs.values()), b.outputs, b.constraints), arrays, binding)
        for k, (out_a, out_b) in enumerate(zip(outs_a, outs_b)):
            one_sided = np.isfinite(out_a) != np.isfinite(out_b)
            if np.shape(out_a) == np.shape(out_b) and one_sided.any():
                index = tuple(int(i) for i in np.argwhere(one_sided)[0])
                return {"sizes": dict(binding), "output": k, "index": index,
                        "a": float(np.asarray(out_a)[index]), "b": float(np.asarray(out_b)[index])}
    return None


# --- sizes at which a program's divisors vanish --------------------------------------------
def grid(dims: Sequence[str], nodes: Sequence[Node], constraints) -> list[dict[str, int]]:
    """Every valid binding of the dimensions to the smallest sizes (GRID; 1..3 past two dimensions)."""
    values = GRID if len(dims) <= 2 else GRID[:3]
    out = []
    for combo in itertools.product(values, repeat=len(dims)):
        binding = dict(zip(dims, combo))
        if valid_binding(binding, nodes, constraints) and all(
                np.prod(bind_shape(n.shape, binding), dtype=np.int64) <= MAX_ELEMENTS for n in nodes):
            out.append(binding)
    return out


def divisor_nodes(nodes: Iterable[Node]) -> list[Node]:
    """The operands the programs divide by (or take the log of): each must be non-zero."""
    return [n.inputs[DIVISOR_OPERANDS[n.op]] for n in nodes if n.op in DIVISOR_OPERANDS]


def size_divisors(nodes: Iterable[Node]) -> tuple[Size, ...]:
    """The sizes the programs divide by (x / (n - 5)): zero at some sizes for every input."""
    found = {d.params.value for d in divisor_nodes(nodes)
             if d.op is Op.CONST and isinstance(d.params.value, Size) and not d.params.value.is_constant}
    shapes = {s for n in nodes for s in n.shape}  # a size some value has is positive already
    return tuple(sorted((s for s in found if s not in shapes and any(c < 0 for _, c in s.terms)), key=str))


def _vanishes(graph: Graph, divisors: Sequence[Node], inputs, binding, rng) -> bool:
    """Is some divisor zero at one element for every draw of DRAWS, over the reals? float64
    narrows the elements first (below ZERO on every draw); only those are confirmed in high
    precision (float64 underflows exp(-800) to zero; the reals do not), the cheap test first:
    high precision costs milliseconds per element where a divisor holds a matmul."""
    draws, near = [], None
    for draw in DRAWS:
        arrays = {n.params.name: draw(rng, bind_shape(n.shape, binding)) for n in inputs}
        env = evaluate_nodes(graph, arrays, binding)
        masks = [np.abs(env[d]) <= ZERO for d in divisors]
        near = masks if near is None else [z & m for z, m in zip(near, masks)]
        if not any(z.any() for z in near):
            return False
        draws.append(precise.Elements(arrays, binding))
    return any(all(precise.is_zero(d, index, elements) for elements in draws)
               for d, z in zip(divisors, near) for index in map(tuple, np.argwhere(z)[:CONFIRM_PER_OUTPUT]))


def domain_failures(a: Graph, b: Graph, constraints, seed: int) -> tuple[list[dict], list[dict]]:
    """(grid, failing): the smallest valid bindings, and those where some divisor of either
    program is zero at one element for every input tried (each of DRAWS)."""
    nodes = toposort(a.outputs + b.outputs)
    divisors = list(dict.fromkeys(divisor_nodes(nodes)))
    if not divisors:
        return [], []
    inputs = [n for n in nodes if n.op is Op.INPUT]
    graph = Graph(tuple(inputs), tuple(divisors))
    rng = np.random.default_rng(seed + 7)
    small = grid(node_dims(nodes), nodes, constraints)
    return small, [binding for binding in small if _vanishes(graph, divisors, inputs, binding, rng)]
