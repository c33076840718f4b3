"""Walk the operator table: every operator's NumPy reference agrees with its element rule,
interpreted one element at a time by the concrete algebra, on small shapes (including broadcasts)."""
import itertools

import numpy as np
import pytest

from axon.ir import Graph, Node, input_node, make_node
from axon.semantics.algebra import ConcreteAlgebra
from axon.semantics.evaluate import evaluate
from axon.semantics.ops import (OP_SPECS, AxisParams, ConcatParams, ConstParams, IotaParams, Op, OpKind, ReshapeParams,
                                SliceParams, TransposeParams)
from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.semantics.sizes import Size, shape_of

BINDING = {"m": 3, "k": 4, "n": 5, "h": 3}


def _cases():
    """Nodes applying every operator once or more, over INPUT and CONST leaves."""
    x, y = input_node("x", shape_of(("m", "n"))), input_node("y", shape_of(("m", "n")))
    row = input_node("r", shape_of(("m", 1)))
    col = input_node("c", shape_of(("n",)))
    w = input_node("w", shape_of(("n", "k")))
    b3 = input_node("b", shape_of((2, "m", "n")))
    w3 = input_node("v", shape_of((1, "n", "k")))
    e = input_node("e", (Size.of("m"), Size.of("h") * 2))
    zeros = input_node("zeros", shape_of(("m", "n")))  # drawn with zeros (see ARRAYS)
    rounded = input_node("rounded", shape_of(("m", "n")))
    for spec in OP_SPECS.values():
        if spec.kind is OpKind.ELEMENTWISE and spec.arity == 1:
            yield make_node(spec.op, [x])
        elif spec.kind is OpKind.ELEMENTWISE and spec.arity == 3:
            yield make_node(spec.op, [x, y, row])
            yield make_node(spec.op, [zeros, x, col])  # a condition that is 0 (false) somewhere
        elif spec.kind is OpKind.ELEMENTWISE:
            yield make_node(spec.op, [x, y])
            yield make_node(spec.op, [x, x])  # equal operands: where comparisons hold with =
            yield make_node(spec.op, [x, rounded])  # equal in some elements only
            yield make_node(spec.op, [x, row])  # broadcast over columns
            yield make_node(spec.op, [col, x])  # broadcast over rows, rank-1 operand
            yield make_node(spec.op, [x, Node_const(2.5)])
    for axis, keep in itertools.product((0, 1), (True, False)):
        yield make_node(Op.REDUCE_SUM, [x], AxisParams(axis, keep))
        yield make_node(Op.REDUCE_MAX, [x], AxisParams(axis, keep))
    yield make_node(Op.CUMSUM, [x], AxisParams(1))
    yield make_node(Op.CUMSUM, [x], AxisParams(0))
    yield make_node(Op.MATMUL, [x, w])
    yield make_node(Op.MATMUL, [b3, w3])  # batch broadcast
    yield make_node(Op.TRANSPOSE, [x], TransposeParams((1, 0)))
    yield make_node(Op.TRANSPOSE, [b3], TransposeParams((2, 0, 1)))
    yield make_node(Op.SLICE, [e], SliceParams(((0, None, 1), (1, None, 2))))
    yield make_node(Op.SLICE, [x], SliceParams(((1, None, 1), (0, 4, 3))))
    yield make_node(Op.RESHAPE, [x], ReshapeParams(shape_of(("m", 1, "n"))))
    yield make_node(Op.RESHAPE, [b3], ReshapeParams(shape_of(("m", 2, "n"))))
    yield make_node(Op.DIV, [x, Node_const(Size.of("n"))])  # a symbolic-size constant, as in mean
    yield make_node(Op.IOTA, [], IotaParams(Size.of("n")))
    yield make_node(Op.CONCAT, [x, y], ConcatParams(1))
    yield make_node(Op.CONCAT, [x, input_node("z", shape_of(("k", "n")))], ConcatParams(0))
    yield make_node(Op.SLICE, [e], SliceParams(((0, None, 1), (Size.of("h"), None, 1))))  # e[:, h:] of 2h
    yield make_node(Op.SLICE, [e], SliceParams(((1, None, 1), (1, Size.of("h") + 1, 1))))


def Node_const(value):
    return Node(Op.CONST, (), ConstParams(value), ())


CASES = list(_cases())


@pytest.mark.parametrize("node", CASES, ids=lambda n: f"{n.op.value}-{n.params}-{len(n.inputs)}")
def test_numpy_reference_matches_element_rule(node):
    rng = np.random.default_rng(1)
    leaves = [i for i in node.inputs if i.op is Op.INPUT]
    arrays = {leaf.params.name: rng.standard_normal(tuple(s.evaluate_int(BINDING) for s in leaf.shape)) + 1.5
              for leaf in leaves}
    if "zeros" in arrays:  # a 0/1 condition
        arrays["zeros"] = (arrays["zeros"] > 1.5).astype(float)
    if "rounded" in arrays:  # x's value where x rounds to itself at one decimal
        x = rng.standard_normal(arrays["rounded"].shape) + 1.5
        arrays["x"], arrays["rounded"] = x, np.where(x > 1.5, x, np.round(x, 1))
    graph = Graph(tuple(leaves), (node,))
    (expected,) = evaluate(graph, arrays, BINDING)
    alg = ConcreteAlgebra(BINDING)
    spec = OP_SPECS[node.op]
    in_shapes = tuple(i.shape for i in node.inputs)

    def read(i, idx):
        operand = node.inputs[i]
        if operand.op is Op.CONST:
            return alg.const(operand.params.value)
        return arrays[operand.params.name][tuple(int(j) for j in idx)]

    out_shape = tuple(s.evaluate_int(BINDING) for s in node.shape)
    assert expected.shape == out_shape
    for idx in np.ndindex(*out_shape):
        got = spec.element(alg, read, idx, in_shapes, node.params)
        np.testing.assert_allclose(got, expected[idx], rtol=1e-12, atol=1e-12, err_msg=f"{node} at {idx}")


@pytest.mark.parametrize("op", [s for s in ScalarOp if SCALAR_SPECS[s].definition is not None])
def test_scalar_definitions_match_numpy(op):
    """Each scalar definition (used by the SMT encoding) states the same function as its NumPy meaning."""
    spec = SCALAR_SPECS[op]
    alg = ConcreteAlgebra({})
    points = np.linspace(-6, 6, 41) + 0.05
    for args in (itertools.product(points[::4], repeat=spec.arity) if spec.arity > 1 else ((x,) for x in points)):
        if op in (ScalarOp.RSQRT,) and args[0] <= 0:
            continue
        expected = float(spec.numpy(*(np.float64(a) for a in args)))
        assert spec.definition(alg, *map(float, args)) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_every_operator_is_covered():
    covered = {n.op for n in CASES}
    assert covered == set(OP_SPECS) - {Op.INPUT, Op.CONST}
