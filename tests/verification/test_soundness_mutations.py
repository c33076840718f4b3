"""Soundness, measured: wrong rewrites generated from the 20 benchmarks and from small programs
(square shapes, so that misplaced transposes and wrong axes still type-check) must never be PROVED.

A mutation changes one node: a swapped operand of a non-commutative operator, another binary or
unary operator, sum <-> max, a wrong reduction or scan axis, a dropped keepdims (a broadcast lost),
a misplaced or dropped transpose, an off-by-one slice start, a changed constant, an operand
confused with another same-shaped value, a dropped operator. A mutant is *wrong* when NumPy shows
a difference (the verifier's own counterexample or an independent evaluation with another seed);
mutants NumPy cannot tell apart may be genuinely equivalent and are left out of the figure. Every
wrong mutant is checked twice: by the full verifier and by the symbolic prover alone (no NumPy
filter); neither may prove it.
"""
from __future__ import annotations

import itertools


import axon
import axon.frontend.functions as F
from axon.errors import ShapeError
from axon.ir import Graph, Node, make_node, toposort
from axon.semantics.ops import OP_SPECS, AxisParams, ConstParams, Op, SliceParams, TransposeParams
from axon.semantics.sizes import Size
from axon.suite import SUITE
from axon.verification import Status, Verifier
from axon.verification import numeric

BINARY_SWAP = {Op.ADD: [Op.SUB, Op.MUL], Op.SUB: [Op.ADD], Op.MUL: [Op.DIV, Op.ADD], Op.DIV: [Op.MUL],
               Op.MAXIMUM: [Op.MINIMUM], Op.MINIMUM: [Op.MAXIMUM]}
UNARY_SWAP = {Op.EXP: [Op.TANH, Op.SQUARE], Op.SQRT: [Op.EXP], Op.RSQRT: [Op.SQRT], Op.SILU: [Op.SIGMOID, Op.RELU],
              Op.RELU: [Op.SILU, Op.NEG], Op.NEG: [Op.RELU], Op.SQUARE: [Op.EXP], Op.RECIPROCAL: [Op.NEG],
              Op.SIGMOID: [Op.TANH], Op.TANH: [Op.SIGMOID], Op.LOG: [Op.EXP]}


# --- small programs: square shapes keep axis and transpose mutants well-typed -------------------
@axon.program(x=("n", "n"), w=("n", "n"))
def sq_softmax_matmul(x, w):
    e = F.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ w


@axon.program(x=("n", "n"), w=("n", "n"))
def sq_rms_matmul(x, w):
    return (x @ w) * F.rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)


@axon.program(x=("n", "n"), y=("n", "n"))
def sq_transpose_matmul(x, y):
    return y.T @ x.T


@axon.program(x=("n", "n"), c=("n", 1))
def sq_cumsum_scaled(x, c):
    return (x.T * c).cumsum(axis=1) + x.cumsum(axis=0)


@axon.program(x=("n", "n"), b=("n",))
def sq_bias_reduce(x, b):
    return (x + b).sum(axis=0, keepdims=True) - (x - b).max(axis=1, keepdims=True).T


@axon.program(x=("n", "2*n"))
def sq_rope_like(x):
    even, odd = x[:, 0::2], x[:, 1::2]
    return even * odd.T - odd


@axon.program(x=("n", "n", "n"))
def cube_perms(x):
    return x.transpose(1, 2, 0) + x.transpose(2, 0, 1).sum(axis=2, keepdims=True)


SMALL = [sq_softmax_matmul, sq_rms_matmul, sq_transpose_matmul, sq_cumsum_scaled, sq_bias_reduce, sq_rope_like,
         cube_perms]


# --- mutation ----------------------------------------------------------------------------------
def _rebuild(graph: Graph, target: Node, replacement: Node) -> Graph | None:
    memo: dict[Node, Node] = {}

    def go(n: Node) -> Node:
        if n == target:
            return replacement
        if n not in memo:
            inputs = tuple(go(i) for i in n.inputs)
            memo[n] = n if inputs == n.inputs else make_node(n.op, inputs, n.params)
        return memo[n]

    try:
        outputs = tuple(go(o) for o in graph.outputs)
    except (ShapeError, ValueError):
        return None
    constraints = set()
    for n in toposort(outputs):
        if n.inputs:
            constraints.update(OP_SPECS[n.op].constraints(tuple(i.shape for i in n.inputs), n.params))
    return Graph(graph.inputs, outputs, frozenset(constraints))


def _replacements(n: Node, same_shape: list[Node]):
    """Wrong variants of one node (each may fail to type-check; the caller drops those)."""
    ins = n.inputs
    if n.op in (Op.SUB, Op.DIV, Op.MATMUL) and ins[0] != ins[1]:
        yield "swap operands", (n.op, (ins[1], ins[0]), n.params)
    for other in BINARY_SWAP.get(n.op, []):
        yield f"{n.op.value}->{other.value}", (other, ins, None)
    for other in UNARY_SWAP.get(n.op, []):
        yield f"{n.op.value}->{other.value}", (other, ins, None)
    if n.op in (Op.REDUCE_SUM, Op.REDUCE_MAX):
        other = Op.REDUCE_MAX if n.op is Op.REDUCE_SUM else Op.REDUCE_SUM
        yield "sum<->max", (other, ins, n.params)
        for axis in range(ins[0].rank):
            if axis != n.params.axis:
                yield "wrong reduction axis", (n.op, ins, AxisParams(axis, n.params.keepdims))
        yield "keepdims toggled (broadcast lost)", (n.op, ins, AxisParams(n.params.axis, not n.params.keepdims))
    if n.op is Op.CUMSUM:
        for axis in range(ins[0].rank):
            if axis != n.params.axis:
                yield "wrong scan axis", (n.op, ins, AxisParams(axis))
    if n.op is Op.TRANSPOSE:
        for perm in itertools.permutations(range(n.rank)):
            if perm != n.params.perm:
                yield "misplaced transpose", (n.op, ins, TransposeParams(perm))
    if n.op is Op.SLICE:
        for axis, (start, stop, step) in enumerate(n.params.slices):
            if (start, stop, step) != (0, None, 1):
                shifted = list(n.params.slices)
                shifted[axis] = (start + 1, stop, step) if start == 0 else (start - 1, stop, step)
                yield "off-by-one slice", (n.op, ins, SliceParams(tuple(shifted)))
    if n.op is Op.CONST:
        value = n.params.value
        changed = value + 1 if isinstance(value, Size) else (value * 10 if value not in (0, 1) else value + 1)
        yield "changed constant", (Op.CONST, (), ConstParams(changed))
    for i, operand in enumerate(ins):
        if operand.shape == n.shape:
            yield "dropped operator", operand
        for other in same_shape:
            if other.shape == operand.shape and other != operand and other not in toposort([n])[:-1] + [n]:
                yield "confused operand", (n.op, ins[:i] + (other,) + ins[i + 1:], n.params)
                break


def mutants(graph: Graph):
    """(description, mutant graph) for every well-typed single-node mutation of `graph`."""
    nodes = toposort(graph.outputs)
    seen = set()
    for n in nodes:
        same_shape = [m for m in nodes if m.op is not Op.CONST]
        for what, spec in _replacements(n, same_shape):
            if isinstance(spec, Node):
                replacement = spec
            else:
                op, ins, params = spec
                try:
                    replacement = make_node(op, ins, params) if op is not Op.CONST else Node(op, (), params, ())
                except (ShapeError, ValueError):
                    continue
            mutant = _rebuild(graph, n, replacement)
            if mutant is None or mutant.outputs == graph.outputs or mutant.outputs in seen:
                continue
            seen.add(mutant.outputs)
            yield what, mutant


def _all_mutants():
    out = []
    for name, bench in SUITE.items():
        out += [(name, what, m) for what, m in mutants(bench.program.graph)]
    for prog in SMALL:
        out += [(prog.name, what, m) for what, m in mutants(prog.graph)]
    return out


def test_soundness_no_wrong_mutant_is_proved(capsys):
    full = Verifier(timeout_ms=2000, seed=0)
    prover_only = Verifier(timeout_ms=300, seed=0, numeric_trials=0)  # short: most of these are hard `sat`s
    counts = {"wrong": 0, "refuted": 0, "unknown": 0, "proved": 0, "prover_only_not_proved": 0,
              "indistinguishable": 0}
    by_kind: dict[str, int] = {}
    alone_counts: dict[str, int] = {}
    wrongly_proved = []
    for name, what, mutant in _all_mutants():
        original = SUITE[name].program.graph if name in SUITE else next(p for p in SMALL if p.name == name).graph
        verdict = full.check_graphs(original, mutant)
        wrong = verdict.status is Status.REFUTED or (
            original.outputs[0].rank == mutant.outputs[0].rank
            and all(a.shape == b.shape for a, b in zip(original.outputs, mutant.outputs))
            and numeric.refute(original, mutant, trials=6, seed=12345) is not None)
        if not wrong:
            counts["indistinguishable"] += 1
            continue
        counts["wrong"] += 1
        by_kind[what] = by_kind.get(what, 0) + 1
        counts[verdict.status.value] += 1
        alone = prover_only.check_graphs(original, mutant)
        if verdict.status is Status.PROVED or alone.status is Status.PROVED:
            wrongly_proved.append((name, what, verdict, alone))
        else:
            counts["prover_only_not_proved"] += 1
            alone_counts[alone.status.value] = alone_counts.get(alone.status.value, 0) + 1
    with capsys.disabled():
        print(f"\nsoundness: {counts['wrong']} wrong mutants: {counts['refuted']} refuted, {counts['unknown']} unknown, "
              f"{counts['proved']} proved; prover alone (no NumPy filter) proved none of "
              f"{counts['prover_only_not_proved']} ({alone_counts}); "
              f"{counts['indistinguishable']} mutants NumPy could not tell apart (left out); by kind: {by_kind}")
    assert not wrongly_proved, wrongly_proved[:3]
    assert counts["wrong"] >= 200
