"""Whole-program variants out of a nuGraph: one e-node chosen per reachable class.

A variant is a choice function: every class the outputs reach gets one of its e-nodes, and the
same class gets the same e-node wherever it is used, so a shared subexpression stays shared (the
variant is a DAG, like the program). Choices must be acyclic (an e-graph may hold x = t(t(x))).
The number of choice functions grows as a product over classes, so enumeration is bounded: at
most `explore` complete choices are visited (depth first, the program's own e-node first in every
class), de-duplicated, ordered by how many rewrites they use, and the first `limit` returned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

from axon.ir import Graph
from axon.nugraph.egraph import ENode, NuGraph, ProofRecord


@dataclass(frozen=True)
class Variant:
    graph: Graph
    rewrites: tuple[int, ...]  # proof ids, in the order they were found
    choice: tuple[tuple[int, ENode], ...]  # (class id, chosen e-node), by class id

    def chain(self, nu: NuGraph) -> list[ProofRecord]:
        return [nu.proofs[i] for i in self.rewrites]


def extract_variants(nu: NuGraph, limit: int = 20, explore: Optional[int] = None) -> list[Variant]:
    nu.rebuild()
    explore = explore if explore is not None else max(1000, 50 * limit)
    seen: dict[Graph, Variant] = {}
    for choice in _choices(nu, explore):
        outputs = tuple(nu.term(r, choice) for r in nu.roots)
        graph = Graph(nu.inputs, outputs, nu.constraints)
        if graph in seen:
            continue
        origins = {nu.eclass(c).nodes[e] for c, e in choice.items()} - {None}
        seen[graph] = Variant(graph, _closure(nu, origins), tuple(sorted(choice.items())))
    ranked = sorted(seen.values(), key=lambda v: (len(v.rewrites), v.rewrites, v.graph.pretty()))
    return ranked[:limit]


def _closure(nu: NuGraph, origins: set[int]) -> tuple[int, ...]:
    todo, done = list(origins), set()
    while todo:
        pid = todo.pop()
        if pid not in done:
            done.add(pid)
            todo.extend(nu.proofs[pid].after)
    return tuple(sorted(done))


def _ordered(nu: NuGraph, cid: int) -> list[ENode]:
    """A class's e-nodes, the program's own first, then by the proof that added them."""
    nodes = nu.eclass(cid).nodes
    return sorted(nodes, key=lambda e: (nodes[e] is not None, nodes[e] or 0, repr(e)))


def _choices(nu: NuGraph, budget: int) -> Iterator[dict[int, ENode]]:
    """Acyclic choice functions over the classes the roots reach, depth first, at most `budget`."""
    count = 0
    chosen: dict[int, ENode] = {}

    def reaches(start: int, target: int) -> bool:
        """Does class `start` reach `target` through chosen e-nodes?"""
        stack, seen = [start], set()
        while stack:
            c = stack.pop()
            if c == target:
                return True
            if c in seen or c not in chosen:
                continue
            seen.add(c)
            stack.extend(nu.find(ch) for ch in chosen[c].children)
        return False

    def go(pending: list[int]) -> Iterator[dict[int, ENode]]:
        nonlocal count
        while pending and pending[-1] in chosen:
            pending = pending[:-1]
        if not pending:
            count += 1
            yield dict(chosen)
            return
        cid = pending[-1]
        for enode in _ordered(nu, cid):
            if count >= budget:
                return
            children = [nu.find(ch) for ch in enode.children]
            if any(ch == cid or reaches(ch, cid) for ch in children):
                continue  # this choice would make the term cyclic
            chosen[cid] = enode
            yield from go(pending[:-1] + [ch for ch in reversed(children) if ch not in chosen])
            del chosen[cid]

    yield from go([nu.find(r) for r in reversed(nu.roots)])
