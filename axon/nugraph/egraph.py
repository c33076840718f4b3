"""The nuGraph: one e-graph holding every proved-equivalent variant of a whole program.

An e-class is a set of e-nodes that compute the same tensor; an e-node is an operator applied to
e-classes (`ENode(op, params, children)`). Invariants kept after every `rebuild()`:
  * hash-consing: each canonical e-node is in exactly one class, so a shared subexpression of the
    program (x in gated_mlp's x@w1 and x@w2) is one class however many variants use it;
  * congruence: two e-nodes with the same operator, parameters and (canonical) children are in the
    same class; `union` may break this, `rebuild` restores it;
  * every class has one shape (equivalence is proved shape and all), and its e-nodes are canonical.

Each `union` made by a rewrite carries a `ProofRecord` (which rewrite, the equation, the solver's
verdict and time); each e-node remembers the proof that introduced it (`origin`, None for the
program's own nodes), which is how a variant names the rewrites that led to it. Later stages
(tiling, instruction selection, fusion) attach their choices to classes in `EClass.annotations`.
Only `term` (turning a choice of e-nodes back into IR) knows the operators, through the `make`
function the nuGraph is given (the tensor IR's `make_node` by default), so the same structure can
serve an instruction-level graph.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from axon.ir import Graph, Node, input_node, make_node, toposort
from axon.semantics.ops import Op, Params
from axon.semantics.sizes import Shape


@dataclass(frozen=True)
class ENode:
    """An operator applied to e-classes (children are class ids, canonical after rebuild)."""
    op: Any
    params: Params
    children: tuple[int, ...]


@dataclass
class ProofRecord:
    """One checked rewrite `lhs == rhs`: what was tried, what the verifier said, at what cost.

    `status` is the verdict's status name (PROVED, REFUTED, UNKNOWN); only PROVED records with a
    passing `numeric` double check join classes. `after` names the proofs whose e-nodes the lhs used,
    so a variant's chain of rewrites is the closure over `after`.
    """
    rewrite: str
    lhs: str
    rhs: str
    status: str
    operands: str = ""  # the opaque operands with their shapes: "a(m, k), b(m, 1), c(k, n)"
    reason: str = ""
    query: str = ""
    solver_time_s: float = 0.0
    cached: bool = False
    numeric: str = ""  # the soundness double check's summary ("" if not run)
    after: tuple[int, ...] = ()
    id: int = -1  # position in NuGraph.proofs, set when recorded

    @property
    def proved(self) -> bool:
        return self.status == "PROVED"

    def equation(self) -> str:
        return f"{self.lhs} = {self.rhs}"


@dataclass
class EClass:
    id: int
    shape: Shape
    nodes: dict[ENode, Optional[int]] = field(default_factory=dict)  # e-node -> origin proof id
    annotations: dict[str, Any] = field(default_factory=dict)  # for tiling/instruction/fusion choices
    shared: bool = False  # some variant reads this class more than once (a common subexpression)


class NuGraph:
    def __init__(self, inputs: tuple[Node, ...] = (), constraints: frozenset = frozenset(), make=make_node):
        self.make = make  # (op, operands, params) -> checked IR node
        self.inputs = tuple(inputs)  # the program's INPUT nodes, in parameter order
        self.constraints = constraints  # the program's size preconditions
        self.roots: tuple[int, ...] = ()  # output classes
        self.proofs: list[ProofRecord] = []
        self._parent: list[int] = []  # union-find over class ids
        self._classes: dict[int, EClass] = {}  # canonical id -> class
        self._memo: dict[ENode, int] = {}  # hash-cons: canonical e-node -> class id
        self._dirty = False

    # -- construction ---------------------------------------------------------------------
    @staticmethod
    def from_graph(graph: Graph, make=make_node) -> "NuGraph":
        nu = NuGraph(graph.inputs, graph.constraints, make)
        nu.roots = tuple(nu.add(out) for out in graph.outputs)
        reads: dict[int, int] = {}
        for node in toposort(graph.outputs):
            for child in node.inputs:
                cid = nu.add(child)
                reads[cid] = reads.get(cid, 0) + 1
        for cid in nu.roots:
            reads[cid] = reads.get(cid, 0) + 1
        for cid, count in reads.items():
            if count > 1:
                nu.mark_shared(cid)
        return nu

    def add(self, node: Node, origin: Optional[int] = None) -> int:
        """The class of an IR term, adding what is new (shared subterms are found, not copied)."""
        ids: dict[Node, int] = {}
        for n in toposort([node]):
            ids[n] = self.add_enode(ENode(n.op, n.params, tuple(ids[i] for i in n.inputs)), n.shape, origin)
        return ids[node]

    def add_enode(self, enode: ENode, shape: Shape, origin: Optional[int] = None) -> int:
        enode = self.canonicalize(enode)
        found = self._memo.get(enode)
        if found is not None:
            return self.find(found)
        cid = len(self._parent)
        self._parent.append(cid)
        self._classes[cid] = EClass(cid, shape, {enode: origin})
        self._memo[enode] = cid
        return cid

    def lookup(self, enode: ENode) -> Optional[int]:
        """The class holding this e-node, or None; adds nothing."""
        found = self._memo.get(self.canonicalize(enode))
        return None if found is None else self.find(found)

    def mark_shared(self, cid: int) -> None:
        """Note that a variant reads this class in more than one place (kept through unions)."""
        self.eclass(cid).shared = True

    def record(self, proof: ProofRecord) -> ProofRecord:
        """Keep a checked rewrite (proved or not) and give it its id."""
        if proof.id < 0:
            proof.id = len(self.proofs)
            self.proofs.append(proof)
        return proof

    def union(self, a: int, b: int, proof: Optional[ProofRecord] = None) -> int:
        """Merge two classes known equal; `proof` says why. Call `rebuild` before reading again."""
        if proof is not None and not proof.proved:
            raise ValueError(f"refusing to union on an unproved rewrite ({proof.status}): {proof.equation()}")
        a, b = self.find(a), self.find(b)
        if self._classes[a].shape != self._classes[b].shape:
            raise ValueError(f"union of classes with shapes {self._classes[a].shape} and {self._classes[b].shape}")
        if proof is not None:
            self.record(proof)
        if a == b:
            return a
        keep, gone = min(a, b), max(a, b)  # the older id survives: deterministic, stable names
        self._parent[gone] = keep
        merged = self._classes.pop(gone)
        for enode, origin in merged.nodes.items():
            self._classes[keep].nodes.setdefault(enode, origin)
        for key, value in merged.annotations.items():
            self._classes[keep].annotations.setdefault(key, value)
        self._classes[keep].shared |= merged.shared
        self._dirty = True
        return keep

    def rebuild(self) -> None:
        """Restore hash-consing and congruence after unions (a full pass per merge wave).

        Programs here have fewer than ~100 e-nodes, so re-canonicalising every class is cheaper to
        get right than egg's parent worklist; revisit if e-graphs grow to many thousands of nodes.
        """
        while self._dirty:
            self._dirty = False
            memo: dict[ENode, int] = {}
            for cid in sorted(self._classes):
                eclass = self._classes.get(cid)
                if eclass is None:  # merged away during this pass
                    continue
                nodes: dict[ENode, Optional[int]] = {}
                for enode, origin in eclass.nodes.items():
                    canon = self.canonicalize(enode)
                    _keep_first(nodes, canon, origin)
                eclass.nodes = nodes
                for canon in nodes:
                    other = memo.get(canon)
                    if other is not None and self.find(other) != self.find(cid):
                        self.union(other, cid)  # congruence: same operator on equal children
                    memo[canon] = cid
            self._memo = {self.canonicalize(n): self.find(c) for n, c in memo.items()}

    # -- queries --------------------------------------------------------------------------
    def find(self, cid: int) -> int:
        root = cid
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[cid] != root:  # path compression
            self._parent[cid], cid = root, self._parent[cid]
        return root

    def canonicalize(self, enode: ENode) -> ENode:
        children = tuple(self.find(c) for c in enode.children)
        return enode if children == enode.children else ENode(enode.op, enode.params, children)

    def classes(self) -> list[EClass]:
        """The canonical classes, by id."""
        return [self._classes[c] for c in sorted(self._classes)]

    def eclass(self, cid: int) -> EClass:
        return self._classes[self.find(cid)]

    def shape(self, cid: int) -> Shape:
        return self.eclass(cid).shape

    @property
    def num_classes(self) -> int:
        return len(self._classes)

    @property
    def num_enodes(self) -> int:
        return sum(len(c.nodes) for c in self._classes.values())

    def users(self) -> dict[int, set[int]]:
        """For each class, the classes with an e-node that reads it (outputs count as a user, -1)."""
        users: dict[int, set[int]] = {cid: set() for cid in self._classes}
        for eclass in self._classes.values():
            for enode in eclass.nodes:
                for child in enode.children:
                    users[self.find(child)].add(eclass.id)
        for root in self.roots:
            users[self.find(root)].add(-1)
        return users

    def term(self, cid: int, choice: dict[int, ENode]) -> Node:
        """The IR term of a class under a choice of one e-node per class (must be acyclic)."""
        built: dict[int, Node] = {}

        def build(c: int) -> Node:
            c = self.find(c)
            if c not in built:
                enode = choice[c]
                if enode.op is Op.INPUT:
                    built[c] = input_node(enode.params.name, self.shape(c))
                elif enode.op is Op.CONST:
                    built[c] = Node(Op.CONST, (), enode.params, self.shape(c))
                else:
                    built[c] = self.make(enode.op, [build(ch) for ch in enode.children], enode.params)
            return built[c]

        return build(cid)

    def summary(self) -> str:
        proved = sum(p.proved for p in self.proofs)
        return f"{self.num_classes} e-classes, {self.num_enodes} e-nodes, {proved} proved rewrites"

    def extract_variants(self, limit: int = 20):
        """Distinct whole-program variants, fewest rewrites first (see axon.nugraph.extract)."""
        from axon.nugraph.extract import extract_variants
        return extract_variants(self, limit)


def _keep_first(nodes: dict, enode: ENode, origin: Optional[int]) -> None:
    """Two e-nodes became one: keep the earliest origin (the program's own node beats a rewrite's)."""
    if enode not in nodes:
        nodes[enode] = origin
    elif origin is None or (nodes[enode] is not None and origin < nodes[enode]):
        nodes[enode] = origin


