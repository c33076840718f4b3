"""Numbers for rewrite candidates: a cheap screen before the solver, a double check after it.

Both evaluate `lhs` and `rhs` (terms over opaque INPUT operands) with the NumPy reference on random
operands at small concrete sizes, in float64. Neither ever proves anything:
  * `screen` looks for a counterexample at one size; a clear difference refutes the candidate
    without a solver call (most candidates propagation builds are false, so this is where the
    speed comes from). No counterexample means "ask the solver".
  * `double_check` runs every rewrite the solver PROVED at two or more sizes; a difference there is
    a soundness bug in the verifier or in an operator's encoding, and the caller reports it loudly.
A difference is counted only where both sides are finite, relative to the output's magnitude
(reassociation changes the last bits); if NaN/inf patterns disagree, positive operands are tried
(sqrt and log of negatives are real-valued only in the solver's uninterpreted world), and there
a side undefined where the other is not is a difference: a rewrite keeps the domain (where(m,
sqrt(c), -1) is no sqrt(where(m, c, -1)): the second is NaN wherever m is false). An operand a
`where` reads as its condition is drawn from {0, 1}, so both branches are taken.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from axon.ir import Graph, Node, toposort
from axon.rewriting.templates import dim_names, leaves
from axon.semantics.evaluate import evaluate
from axon.semantics.ops import Op
from axon.semantics.sizes import bind_shape

RTOL = 1e-9  # float64 reassociation error at these sizes is ~1e-14; an eps = 1e-6 term must still show

# Sizes to evaluate at: small, pairwise distinct within a binding, and different between bindings,
# so that a rewrite that only holds when two dimensions coincide (or equal 1) shows a difference.
_BINDINGS = ((3, 5, 4, 7, 6, 2, 8, 9), (6, 2, 7, 3, 5, 4, 9, 8), (4, 7, 2, 5, 3, 6, 8, 9))


@dataclass(frozen=True)
class Comparison:
    verdict: str  # "agree", "differ", or "inconclusive"
    sizes: dict
    detail: str = ""


def bindings(lhs: Node, rhs: Node, constraints=frozenset(), count: int = 2) -> list[dict[str, int]]:
    names = dim_names(lhs, rhs)
    out = []
    for values in _BINDINGS[:count]:
        binding = {n: values[i % len(values)] + (i // len(values)) for i, n in enumerate(names)}
        for _ in range(4):  # strided slices need multiples: scale until the preconditions hold
            if all(_holds(fact, binding) for fact in constraints):
                break
            binding = {n: v * 2 for n, v in binding.items()}
        out.append(binding)
    return out


def _holds(fact, binding) -> bool:
    try:
        return fact.holds(binding)
    except KeyError:
        return True


def compare(lhs: Node, rhs: Node, binding: dict[str, int], seed: int = 0) -> Comparison:
    operands = leaves(lhs, rhs)
    conditions = {n.inputs[0] for n in toposort([lhs, rhs]) if n.op is Op.WHERE}
    result = Comparison("inconclusive", binding, "no finite elements to compare")
    for positive in (False, True):
        rng = np.random.default_rng(seed)
        arrays = {}
        for node in operands:
            shape = bind_shape(node.shape, binding)
            arrays[node.params.name] = (rng.integers(0, 2, shape).astype(np.float64) if node in conditions else
                                        rng.uniform(0.5, 2.0, shape) if positive else rng.standard_normal(shape))
        (a,) = evaluate(Graph(tuple(operands), (lhs,)), arrays, binding)
        (b,) = evaluate(Graph(tuple(operands), (rhs,)), arrays, binding)
        result = _judge(a, b, binding, domain=positive)
        if result.verdict != "inconclusive":
            return result
    return result


def _judge(a: np.ndarray, b: np.ndarray, binding, domain: bool = False) -> Comparison:
    """`domain`: operands inside every operator's domain, where finite on one side only differs."""
    if a.shape != b.shape:
        return Comparison("differ", binding, f"shapes {a.shape} vs {b.shape}")
    both = np.isfinite(a) & np.isfinite(b)
    if domain and not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return Comparison("differ", binding, "finite on one side only, on operands in every operator's domain")
    if not both.any():
        return Comparison("inconclusive", binding, "no finite elements to compare")
    scale = 1.0 + max(np.abs(a[both]).max(), np.abs(b[both]).max())
    error = np.abs(a[both] - b[both]).max()
    if error > RTOL * scale:
        return Comparison("differ", binding, f"max difference {error:.3g} (scale {scale:.3g})")
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return Comparison("inconclusive", binding, "finite on one side only")
    return Comparison("agree", binding, f"max difference {error:.1e}")


def screen(lhs: Node, rhs: Node, constraints=frozenset()) -> Optional[Comparison]:
    """A counterexample at one size, or None (no difference found: the solver decides)."""
    (binding,) = bindings(lhs, rhs, constraints, count=1)
    result = compare(lhs, rhs, binding, seed=1)
    return result if result.verdict == "differ" else None


def double_check(lhs: Node, rhs: Node, constraints=frozenset(), shapes: int = 2) -> list[Comparison]:
    """The comparison at each of `shapes` sizes (>= 2), each with its own random operands."""
    return [compare(lhs, rhs, b, seed=100 + i) for i, b in enumerate(bindings(lhs, rhs, constraints, shapes))]
