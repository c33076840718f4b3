"""Kernel partitioning: a program that is not one kernel, as a sequence of kernels.

One Axon kernel is a loop over the row tiles of one row dimension (fusion.nodes.RowWorld): all
its outputs share that dimension, a matmul's moving operand comes from HBM, and a reshape of a
computed value has no place in it. A transformer block breaks each of these (the attention reads
projections as heads, its K is rotated on chip, the MLP's rows follow the attention's output), so
`partition` cuts the program into *pieces*, each a program that one kernel implements:

  * a piece is grown greedily: the next operator (in topological order) whose operands are ready
    joins the current piece when the piece still forms one RowWorld whose passes have phases;
    when none can, the piece is closed and its values that later pieces read are its outputs;
  * a reshape is never inside a piece. It is the *glue* between pieces: the value it reshapes is
    stored by one kernel, and the next kernel declares its input in the reshaped shape (row-major
    storage makes that free: the launcher passes `tensor.reshape(shape)`);
  * values of positions (a causal mask), constants and the views a kernel reads in place (a slice,
    a transpose of the last two axes, of a value stored before) are rebuilt in every piece that
    reads them.

Every piece is an ordinary program: it is optimized, proved and checked like any other, and the
pipeline is checked end to end against the whole program (search.pipeline).

Invariant: nothing here knows a target; RowWorld and phases decide what one kernel can be.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from axon.errors import ShapeError, UnsupportedError
from axon.fusion.nodes import FUSION_MODES, RowWorld, groups, phases
from axon.ir import Graph, Node, input_node, make_node, positional
from axon.semantics.ops import Op
from axon.semantics.sizes import Size


@dataclass(frozen=True)
class Feed:
    """A piece's input: the value `source` (a program input, or a value an earlier step stored),
    read in `shape` (a row-major reshape of the source: no data moves)."""

    source: str
    shape: tuple[Size, ...]


@dataclass(frozen=True)
class Piece:
    graph: Graph  # its inputs are named as the keys of `feeds`
    feeds: dict  # input name -> Feed
    outputs: tuple[str, ...]  # the names of the values it stores, one per graph output


@dataclass(frozen=True)
class Relayout:
    """`output` = `source` (read in `shape`) with its axes permuted by `perm`: a transpose between
    pieces that no reshape absorbs, made by a copy kernel."""

    source: Feed
    perm: tuple[int, ...]
    output: str


@dataclass(frozen=True)
class Partition:
    steps: tuple  # Piece and Relayout, in the order they run
    results: tuple[Feed, ...]  # the program's outputs, as values the steps stored

    @property
    def pieces(self) -> tuple[Piece, ...]:
        return tuple(s for s in self.steps if isinstance(s, Piece))


class _Cut(Exception):
    """A piece cannot take this operator."""


def partition(graph: Graph) -> Partition:
    """The program as steps, in order (one piece when it is one kernel)."""
    plan = _Plan(graph, positional(graph.nodes()))
    todo = [n for n in graph.nodes() if plan.computed(n)]
    made: set[Node] = set()
    while todo:
        current: list[Node] = []
        grown = True
        while grown:
            grown = False
            for n in todo:
                if all(plan.ready(i, made, current) for i in n.inputs) and plan.fits(current + [n]):
                    current.append(n)
                    todo.remove(n)
                    grown = True
                    break
        if not current:
            n = next(n for n in todo if all(plan.ready(i, made, []) for i in n.inputs))
            raise UnsupportedError(f"{_describe(n)} cannot be computed in any kernel Axon builds: "
                                   f"{plan.refusal([n])}")
        plan.add_piece(current)
        made.update(current)
    results = tuple(plan.commit(lambda: plan.resolve(o, set())) for o in graph.outputs)
    return Partition(tuple(plan.steps), results)


def _describe(n: Node) -> str:
    return f"{n.op.value} of shape ({', '.join(map(str, n.shape))})"


def _swap(n: Node) -> bool:
    """A transpose of the last two axes only: a kernel reads it as a view of its operand."""
    r = n.rank
    return n.op is Op.TRANSPOSE and r >= 2 and n.params.perm == (*range(r - 2), r - 1, r - 2)


class _Plan:
    def __init__(self, graph: Graph, index: set):
        self.graph, self.index = graph, index
        self.names: dict[Node, str] = {n: n.params.name for n in graph.inputs}
        self.stored_shape: dict[str, tuple] = {n.params.name: tuple(n.shape) for n in graph.inputs}
        self.steps: list = []
        self.pending: list[Relayout] = []  # relayouts the piece being planned needs
        self.users: dict[Node, set] = {}
        for n in graph.nodes():
            for i in n.inputs:
                self.users.setdefault(i, set()).add(n)

    # -- what a node is ---------------------------------------------------------------------
    def glue(self, n: Node) -> bool:
        """Layout between pieces: reshapes and transposes (not of positions)."""
        return n.op in (Op.RESHAPE, Op.TRANSPOSE) and n not in self.index

    def computed(self, n: Node) -> bool:
        return (n.op not in (Op.INPUT, Op.CONST) and n not in self.index and not self.glue(n)
                and not self.view(n))

    def view(self, n: Node) -> bool:
        """What a kernel reads in place of a stored value: a slice, a transpose of the last two axes."""
        return (n.op is Op.SLICE or _swap(n)) and n not in self.index

    def base(self, n: Node) -> Node:
        """The stored value a view or glue reads."""
        while self.glue(n) or self.view(n):
            n = n.inputs[0]
        return n

    def root(self, n: Node) -> Node:
        while self.glue(n):
            n = n.inputs[0]
        return n

    def ready(self, x: Node, made: set, current: list) -> bool:
        """An operand is ready once stored by an earlier piece (through any glue or view), or in
        this one."""
        r = self.base(x)
        return r in made or r.op in (Op.INPUT, Op.CONST) or r in self.index or (r is x and r in current)

    def _name(self, n: Node) -> str:
        """The name of the stored value n (the output of a piece or relayout)."""
        if n not in self.names:
            self.names[n] = f"v{len(self.names) - len(self.graph.inputs)}"
            self.stored_shape[self.names[n]] = tuple(n.shape)
        return self.names[n]

    # -- where a value comes from -----------------------------------------------------------
    def resolve(self, x: Node, members: set) -> Feed:
        """The stored value x is read from, and the shape it is read in; a transpose on the way
        is a relayout step (registered when the piece that needs it is added)."""
        if x.op is Op.RESHAPE and x not in self.index:
            return Feed(self.resolve(x.inputs[0], members).source, tuple(x.shape))
        if x.op is Op.TRANSPOSE and x not in self.index:
            if x not in self.names:
                src = self.resolve(x.inputs[0], members)
                if x.params.perm[-1] != x.rank - 1:
                    raise UnsupportedError(f"a transpose {x.params.perm} that moves the last axis, between "
                                           "kernels, that a reshape then reads")
                self.pending.append(Relayout(src, tuple(x.params.perm), self._name(x)))
            return Feed(self.names[x], tuple(x.shape))
        if self.view(x):  # read in place by a kernel; only a program output gets here
            if self.base(x) in members:
                raise _Cut()
            raise UnsupportedError(f"a program output that is a {x.op.value} of a computed value")
        if x in members:
            raise _Cut()
        return Feed(self._name(x), tuple(x.shape))

    def commit(self, make):
        """Run `make` and keep the relayouts it registered as steps."""
        self.pending = []
        out = make()
        self.steps.extend(self.pending)
        self.pending = []
        return out

    # -- a piece ----------------------------------------------------------------------------
    def fits(self, nodes: list[Node]) -> bool:
        return self.refusal(nodes) is None

    def refusal(self, nodes: list[Node]) -> Optional[str]:
        """Why one kernel cannot compute `nodes` (None: it can). Planning only: names and
        relayouts it makes are dropped."""
        names, shapes, pending = dict(self.names), dict(self.stored_shape), list(self.pending)
        try:
            graph = self._graph(nodes)[0]
            world = RowWorld.of(graph)
            for mode in FUSION_MODES:
                for group in groups(world, mode):
                    phases(world, group)
        except (UnsupportedError, ShapeError) as err:
            return str(err)
        except _Cut:
            return "it reads a reshape or transpose of its own result"
        finally:
            self.names, self.stored_shape, self.pending = names, shapes, pending
        return None

    def add_piece(self, nodes: list[Node]) -> None:
        graph, feeds, stored = self.commit(lambda: self._graph(nodes))
        self.steps.append(Piece(graph, feeds, tuple(self._name(n) for n in stored)))

    def _graph(self, nodes: list[Node]) -> tuple[Graph, dict, list[Node]]:
        members = set(nodes)
        env: dict[Node, Node] = {}
        inputs: dict[tuple, Node] = {}
        feeds: dict[str, Feed] = {}

        def value(x: Node) -> Node:
            if x in env:
                return env[x]
            if x.op is Op.CONST or x in self.index or (self.view(x) and self.base(x) not in members):
                # rebuilt in the piece: constants, positions, and the views a kernel reads in place
                env[x] = make_node(x.op, [value(i) for i in x.inputs], x.params)
                return env[x]
            feed = self.resolve(x, members)
            key = (feed.source, feed.shape)
            if key not in inputs:  # named as the stored value, unless read reshaped (or twice)
                as_stored = feed.shape == self.stored_shape[feed.source] and feed.source not in feeds
                name = feed.source if as_stored else _fresh(f"{feed.source}_view", set(feeds))
                inputs[key] = input_node(name, feed.shape)
                feeds[name] = feed
            env[x] = inputs[key]
            return env[x]

        for n in nodes:
            env[n] = make_node(n.op, [value(i) for i in n.inputs], n.params)
        outputs = {self.root(o) for o in self.graph.outputs}
        stored = [n for n in nodes if n in outputs or any(u not in members for u in self.users.get(n, ()))]
        return Graph(tuple(inputs.values()), tuple(env[n] for n in stored), self.graph.constraints), feeds, stored


def _fresh(name: str, taken: set[str]) -> str:
    out, i = name, 1
    while out in taken:
        out, i = f"{name}{i}", i + 1
    return out
