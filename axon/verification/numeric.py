"""Refutation by evaluation: both sides run in NumPy (float64) at small concrete sizes on random inputs.

This is the cheap first filter of every equivalence check and the only source of reported
counterexamples: a difference is reported only when the NumPy reference shows it. Size bindings
respect the graphs' divisibility preconditions and keep every intermediate size positive; the
first binding gives each dimension a distinct value (so a misplaced transpose of two symbolic
dimensions cannot hide behind equal sizes), later ones are random and may use 1 (broadcasts).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from axon.ir import Graph, Node, toposort
from axon.semantics.evaluate import evaluate
from axon.semantics.ops import Op
from axon.semantics.sizes import Size, bind_shape

# Outputs agree when |a - b| <= RTOL * scale, scale = max(1, largest finite magnitude of either output).
# float64 evaluation of the same real function at these sizes differs by ~1e-15 relative; 1e-9 leaves
# room for cancellation while still seeing a changed epsilon (1e-6 vs 1e-5) in a normalisation.
RTOL = 1e-9
MAX_ELEMENTS = 4096  # per input tensor: keeps one trial to milliseconds


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
    for size, divisor in constraints:
        value = size.evaluate(binding)
        if value.denominator != 1 or value.numerator % divisor:
            return False
    for node in nodes:
        for size in node.shape:
            value = size.evaluate(binding)
            if value.denominator != 1 or value < 1 or (max_size is not None and value > max_size):
                return False
    return True


def bindings(dims: Sequence[str], nodes: Sequence[Node], constraints, count: int,
             rng: np.random.Generator) -> list[dict[str, int]]:
    """Up to `count` valid size bindings: distinct values first, then random small ones."""
    found: list[dict[str, int]] = []
    candidates = [{d: 2 + i for i, d in enumerate(dims)}, {d: 2 * (2 + i) for i, d in enumerate(dims)}]
    for _ in range(200):
        candidates.append({d: int(rng.integers(1, 6)) for d in dims})
    for binding in candidates:
        if len(found) >= count:
            break
        if binding in found or not valid_binding(binding, nodes, constraints):
            continue
        if any(np.prod(bind_shape(n.shape, binding), dtype=np.int64) > MAX_ELEMENTS for n in nodes):
            continue
        found.append(binding)
    return found


def random_inputs(inputs: Sequence[Node], binding: Mapping[str, int], rng: np.random.Generator) -> dict:
    return {n.params.name: rng.standard_normal(bind_shape(n.shape, binding)) for n in inputs}


def first_difference(a: np.ndarray, b: np.ndarray) -> Optional[tuple[tuple[int, ...], float, float]]:
    """The first index where two same-shaped outputs differ beyond tolerance (NaN equals NaN)."""
    finite = np.concatenate([np.abs(a[np.isfinite(a)]).ravel(), np.abs(b[np.isfinite(b)]).ravel(), [1.0]])
    scale = float(finite.max())
    with np.errstate(invalid="ignore"):
        close = np.isclose(a, b, rtol=RTOL, atol=RTOL * scale, equal_nan=True)
    if close.all():
        return None
    index = tuple(int(i) for i in np.argwhere(~close)[0])
    return index, float(a[index]), float(b[index])


def refute(a: Graph, b: Graph, trials: int, seed: int, only: Optional[Sequence[dict]] = None) -> Optional[dict]:
    """A NumPy-confirmed counterexample to `a == b` (same output count and ranks assumed), or None."""
    nodes = toposort(a.outputs + b.outputs)
    inputs = {n.params.name: n for n in nodes if n.op is Op.INPUT}
    rng = np.random.default_rng(seed)
    constraints = a.constraints | b.constraints
    trial_bindings = list(only) if only is not None else bindings(node_dims(nodes), nodes, constraints, trials, rng)
    for binding in trial_bindings:
        arrays = random_inputs(list(inputs.values()), binding, rng)
        outs_a = evaluate(Graph(tuple(inputs.values()), a.outputs, a.constraints), arrays, binding)
        outs_b = evaluate(Graph(tuple(inputs.values()), b.outputs, b.constraints), arrays, binding)
        for k, (out_a, out_b) in enumerate(zip(outs_a, outs_b)):
            if out_a.shape != out_b.shape:
                return {"sizes": dict(binding), "output": k, "shape_a": out_a.shape, "shape_b": out_b.shape}
            diff = first_difference(out_a, out_b)
            if diff is not None:
                index, va, vb = diff
                return {"sizes": dict(binding), "output": k, "index": index, "a": va, "b": vb}
    return None
