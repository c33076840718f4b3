"""The tensor IR: an immutable, structurally hashed DAG of operator applications.

A `Node` is one operator applied to input nodes, with its parameters and its symbolic output
shape. Nodes compare and hash by structure (op, params, inputs), so equal subexpressions are one
key in every table a later stage builds (the nuGraph's hash-consing relies on this). A `Graph`
is a program: named inputs, outputs, and the size preconditions its operators need.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Iterable, Iterator, Mapping

from axon.semantics.ops import OP_SPECS, ConstParams, InputParams, IotaParams, Op, Params, ReshapeParams, SliceParams
from axon.semantics.sizes import Shape, Size, SizeFact, format_shape


@dataclass(frozen=True, eq=False)
class Node:
    op: Op
    inputs: tuple["Node", ...]
    params: Params
    shape: Shape
    _hash: int = field(init=False, repr=False, compare=False)
    # a node found structurally equal to this one (union-find: `_representative`): equal terms built
    # apart are compared in full once, then by identity; without it a comparison of two DAGs with
    # shared subterms walks each path to them, exponentially many
    _same: "Node | None" = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.op, self.params, self.shape, self.inputs)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, Node) or self._hash != other._hash:
            return False
        a, b = self._representative(), other._representative()
        if a is b:
            return True
        if a.op is b.op and a.params == b.params and a.shape == b.shape and a.inputs == b.inputs:
            object.__setattr__(b, "_same", a)
            return True
        return False

    def __getstate__(self) -> dict:
        # a pickled node carries its own term only (the class default stands for `_same`)
        return {k: v for k, v in self.__dict__.items() if k != "_same"}

    def _representative(self) -> "Node":
        node = self
        while node._same is not None:
            node = node._same
        if node is not self and self._same is not node:
            object.__setattr__(self, "_same", node)  # path compression
        return node

    @property
    def rank(self) -> int:
        return len(self.shape)

    def replace(self, **changes) -> "Node":
        return replace(self, **changes)

    def __repr__(self) -> str:
        if self.op is Op.INPUT:
            return self.params.name
        if self.op is Op.CONST:
            return str(self.params.value)
        args = ", ".join(repr(i) for i in self.inputs)
        extra = "" if self.params is None else f"; {self.params}"
        return f"{self.op.value}({args}{extra})"


def make_node(op: Op, inputs: Iterable[Node], params: Params = None) -> Node:
    """Apply an operator, checking its precondition and computing its shape from its spec."""
    inputs = tuple(inputs)
    shape = OP_SPECS[op].shape(tuple(i.shape for i in inputs), params)
    return Node(op, inputs, params, shape)


def input_node(name: str, shape: Shape) -> Node:
    return Node(Op.INPUT, (), InputParams(name), shape)


def const_node(value) -> Node:
    return Node(Op.CONST, (), ConstParams(value), ())


def rename_size(size: Size, dims: Mapping[str, str]) -> Size:
    return Size({tuple(sorted(dims.get(s, s) for s in monomial)): coeff for monomial, coeff in size.terms})


def rename(nodes: tuple[Node, ...], dims: Mapping[str, str], tensors: Mapping[str, str] = {}) -> tuple[Node, ...]:
    """The same terms with symbolic dimensions and input tensors renamed (shapes recomputed)."""
    out: dict[Node, Node] = {}
    for node in toposort(nodes):
        if node.op is Op.INPUT:
            name = node.params.name
            out[node] = input_node(tensors.get(name, name), tuple(rename_size(s, dims) for s in node.shape))
        elif node.op is Op.CONST:
            value = node.params.value
            params = ConstParams(rename_size(value, dims)) if isinstance(value, Size) else node.params
            out[node] = Node(Op.CONST, (), params, node.shape)
        else:
            params = node.params
            if isinstance(params, ReshapeParams):
                params = ReshapeParams(tuple(rename_size(s, dims) for s in params.shape))
            elif isinstance(params, IotaParams):
                params = IotaParams(rename_size(params.size, dims))
            elif isinstance(params, SliceParams) and params.symbolic:
                bound = lambda b: rename_size(b, dims) if isinstance(b, Size) else b  # noqa: E731
                params = SliceParams(tuple((bound(a), bound(b), c) for a, b, c in params.slices))
            out[node] = make_node(node.op, [out[i] for i in node.inputs], params)
    return tuple(out[n] for n in nodes)


def toposort(outputs: Iterable[Node]) -> list[Node]:
    """Every node reachable from `outputs`, each once, inputs before users (iterative: no recursion limit)."""
    order: list[Node] = []
    seen: set[Node] = set()
    stack: list[tuple[Node, bool]] = [(n, False) for n in reversed(list(outputs))]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((i, False) for i in reversed(node.inputs) if i not in seen)
    return order


def positional(nodes: Iterable[Node]) -> set:
    """The values of positions only among `nodes` (topological): an arange, and what is built from
    aranges and constants (a causal mask). A kernel evaluates them as integers, never from data."""
    out: set = set()
    for n in nodes:
        if n.op is Op.IOTA or (n.op is not Op.INPUT and n.inputs and any(i in out for i in n.inputs)
                               and all(i in out or i.op is Op.CONST for i in n.inputs)):
            out.add(n)
    return out


def format_params(params) -> str:
    """`axis=1 keepdims=True` rather than the dataclass repr."""
    if is_dataclass(params):
        return " ".join(f"{f.name}={_format_value(getattr(params, f.name))}" for f in fields(params))
    return str(params)


def _format_value(value) -> str:
    if isinstance(value, tuple) and value and isinstance(value[0], Size):
        return format_shape(value)
    return str(value)


@dataclass(frozen=True)
class Graph:
    inputs: tuple[Node, ...]  # INPUT nodes in parameter order
    outputs: tuple[Node, ...]
    # the size preconditions of its operators (strided slices, constant slice stops)
    constraints: frozenset[SizeFact] = frozenset()

    def nodes(self) -> list[Node]:
        return toposort(self.outputs)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes())

    @property
    def dims(self) -> list[str]:
        names: list[str] = []
        for node in self.inputs:
            for size in node.shape:
                for s in sorted(size.symbols):
                    if s not in names:
                        names.append(s)
        return names

    def pretty(self) -> str:
        """A readable listing, one equation per line (like a jaxpr)."""
        names: dict[Node, str] = {n: n.params.name for n in self.inputs}
        lines = ["inputs: " + ", ".join(f"{n.params.name}{format_shape(n.shape)}" for n in self.inputs)]
        for node in self.nodes():
            if node in names:
                continue
            if node.op is Op.CONST:
                names[node] = str(node.params.value)
                continue
            names[node] = f"t{len(lines) - 1}"
            args = ", ".join(names[i] for i in node.inputs)
            extra = "" if node.params is None else "  " + format_params(node.params)
            lines.append(f"  {names[node]}{format_shape(node.shape)} = {node.op.value}({args}){extra}")
        lines.append("outputs: " + ", ".join(names[o] for o in self.outputs))
        return "\n".join(lines)
