"""The reference evaluator: a graph interpreted with each operator's NumPy meaning.

Evaluation is in float64 whatever the input dtype, so the reference is as exact as NumPy can
make it; callers round the result to the dtype they compare in. `bind_sizes` reads the concrete
size of every dimension off the input arrays and rejects inputs that disagree with the program.
"""
from __future__ import annotations

from typing import Mapping

import ml_dtypes
import numpy as np

from axon.errors import InputError
from axon.ir import Graph, Node, make_node
from axon.semantics import batch
from axon.semantics.algebra import const_value
from axon.semantics.ops import OP_SPECS, ConstParams, Op, concrete_params
from axon.semantics.sizes import bind_shape, format_shape

FLOAT_DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float64": np.dtype(np.float64),
}


def dtype_named(name) -> np.dtype:
    key = name if isinstance(name, str) else np.dtype(name).name
    if key not in FLOAT_DTYPES:
        raise InputError(f"unsupported dtype {key!r}; expected one of {', '.join(FLOAT_DTYPES)}")
    return FLOAT_DTYPES[key]


def bind_sizes(graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """Concrete dimension sizes from concrete input shapes; errors name the operand and the sizes."""
    binding: dict[str, int] = {}
    source: dict[str, str] = {}
    for node in graph.inputs:
        name = node.params.name
        if name not in shapes:
            raise InputError(f"missing input {name!r}")
        actual = tuple(shapes[name])
        declared = format_shape(node.shape)
        if len(actual) != len(node.shape):
            raise InputError(f"input {name!r} has shape {actual} (rank {len(actual)}); expected rank "
                             f"{len(node.shape)} with dims {declared}")
        for size, n in zip(node.shape, actual):
            fixed = size.as_int()
            if fixed is not None:
                if n != fixed:
                    raise InputError(f"input {name!r} has shape {actual}; expected {declared}: a dimension of size "
                                     f"{fixed} got {n}")
                continue
            # declared dims are `name` or `c*name` (see frontend/program.py)
            ((monomial, coeff),) = size.terms
            (dim,) = monomial
            if n % coeff:
                raise InputError(f"input {name!r} has shape {actual}; expected {declared}: {n} is not a multiple "
                                 f"of {coeff}")
            value = int(n // coeff)
            if dim in binding and binding[dim] != value:
                raise InputError(f"input {name!r} has shape {actual}; expected {declared} with {dim}={binding[dim]} "
                                 f"(from input {source[dim]!r})")
            binding.setdefault(dim, value)
            source.setdefault(dim, name)
    check_constraints(graph, binding)
    return binding


def check_constraints(graph: Graph, binding: Mapping[str, int]) -> None:
    for fact in sorted(graph.constraints, key=str):
        if not fact.holds(binding):
            raise InputError(f"this program needs {fact.describe()}, but {fact.size} = {fact.size.evaluate(binding)}")
    for dim, value in binding.items():
        if value <= 0:
            raise InputError(f"dimension {dim} = {value} must be positive")


def evaluate(graph: Graph, arrays: Mapping[str, np.ndarray], binding: Mapping[str, int] | None = None) -> tuple[np.ndarray, ...]:
    """All outputs of `graph` on `arrays`, in float64: each value released after its last use,
    a large graph over slices of a batch axis (batch.in_slices: gqa's reference on 256 rows at
    Llama-3-70B sizes took 49 s whole, as long as its error bounds did in slices)."""
    if binding is None:
        binding = bind_sizes(graph, {k: np.shape(v) for k, v in arrays.items()})

    def whole(arrays, binding):
        env: dict = {}
        with np.errstate(all="ignore"):
            _fill(env, graph, arrays, binding, release=True)
        return tuple(env[o] for o in graph.outputs)
    return batch.in_slices(graph, arrays, binding, whole,
                           lambda parts, at: tuple(np.concatenate(vs, axis=at) for vs in zip(*parts)))


def evaluate_nodes(graph: Graph, arrays: Mapping[str, np.ndarray],
                   binding: Mapping[str, int] | None = None) -> dict:
    """The float64 value of every node of `graph` on `arrays`."""
    if binding is None:
        binding = bind_sizes(graph, {k: np.shape(v) for k, v in arrays.items()})
    env: dict = {}
    with np.errstate(all="ignore"):  # infinities and NaNs are results, as in NumPy without warnings
        _fill(env, graph, arrays, binding)
    return env


def _fill(env: dict, graph: Graph, arrays, binding, release: bool = False) -> None:
    """The value of every node into `env`; with `release`, each dropped after its last use
    (outputs kept)."""
    nodes = graph.nodes()
    last = {x: i for i, n in enumerate(nodes) for x in n.inputs}
    for i, node in enumerate(nodes):
        if node.op is Op.INPUT:
            env[node] = np.asarray(arrays[node.params.name], dtype=np.float64)
        elif node.op is Op.CONST:
            env[node] = np.float64(const_value(node.params.value, binding))
        else:
            args = [env[i] for i in node.inputs]
            params = concrete_params(node.params, binding)
            env[node] = np.asarray(OP_SPECS[node.op].numpy(args, params, bind_shape(node.shape, binding)),
                                   dtype=np.float64)
        if release:
            for x in set(node.inputs):
                if last[x] == i and x not in graph.outputs:
                    del env[x]


def fold_constants(graph: Graph, binding: Mapping[str, int]) -> Graph:
    """`graph` at the sizes `binding` with every computation on constants alone (1 / sqrt(d) of a
    size d: `axon.rsqrt(q.shape[-1])`) replaced by its float64 value: equal to `graph` at those
    sizes. A kernel takes such a value as an immediate; unchanged when there is none."""
    new: dict = {}
    for node in graph.nodes():
        ins = [new.get(i, i) for i in node.inputs]
        if node.op not in (Op.INPUT, Op.CONST, Op.IOTA) and ins and all(i.op is Op.CONST for i in ins):
            args = [np.float64(const_value(i.params.value, binding)) for i in ins]
            with np.errstate(all="ignore"):
                value = OP_SPECS[node.op].numpy(args, concrete_params(node.params, binding), ())
            if np.isfinite(value):  # else left as it is: the stage that cannot take it says so
                new[node] = Node(Op.CONST, (), ConstParams(float(value)), ())
                continue
        if any(i is not j for i, j in zip(ins, node.inputs)):
            new[node] = make_node(node.op, ins, node.params)
    if not new:
        return graph
    return Graph(graph.inputs, tuple(new.get(o, o) for o in graph.outputs), graph.constraints)
