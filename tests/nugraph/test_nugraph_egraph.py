"""The nuGraph's invariants: hash-consing, congruence after union, bounded acyclic extraction."""
import pytest

import axon
from axon.ir import Graph, input_node, make_node
from axon.nugraph import ENode, NuGraph, ProofRecord
from axon.rewriting import discover
from axon.semantics.ops import Op, TransposeParams
from axon.semantics.sizes import shape_of
from axon.suite import SUITE

PROVED = ProofRecord(rewrite="test", lhs="l", rhs="r", status="PROVED")


def fresh_proof(**kw):
    return ProofRecord(**{"rewrite": "test", "lhs": "l", "rhs": "r", "status": "PROVED", **kw})


def test_shared_subexpressions_are_one_class():
    graph = SUITE["gated_mlp"].program.graph
    nu = NuGraph.from_graph(graph)
    assert nu.num_classes == nu.num_enodes == len(graph.nodes()) == 9
    x = graph.inputs[0]
    assert nu.add(x) == nu.add(x) and nu.num_classes == 9
    assert nu.eclass(nu.add(x)).shared  # read by both projections
    assert not nu.eclass(nu.add(graph.outputs[0].inputs[0])).shared


def test_adding_an_existing_term_adds_nothing():
    graph = SUITE["softmax_matmul"].program.graph
    nu = NuGraph.from_graph(graph)
    before = (nu.num_classes, nu.num_enodes)
    assert nu.add(graph.outputs[0]) == nu.roots[0]
    assert (nu.num_classes, nu.num_enodes) == before


def test_congruence_after_union():
    a, b = input_node("a", shape_of(("m", "k"))), input_node("b", shape_of(("m", "k")))
    nu = NuGraph()
    fa, fb = nu.add(make_node(Op.EXP, [a])), nu.add(make_node(Op.EXP, [b]))
    ga, gb = nu.add(make_node(Op.NEG, [make_node(Op.EXP, [a])])), nu.add(make_node(Op.NEG, [make_node(Op.EXP, [b])]))
    assert len({fa, fb, ga, gb}) == 4
    nu.union(nu.add(a), nu.add(b), fresh_proof())
    nu.rebuild()
    assert nu.find(fa) == nu.find(fb) and nu.find(ga) == nu.find(gb)  # exp(a) = exp(b), then neg(...)
    assert nu.num_classes == 3
    for eclass in nu.classes():  # hash-consing holds again: every e-node canonical and in one class
        for enode in eclass.nodes:
            assert nu.canonicalize(enode) == enode and nu.lookup(enode) == eclass.id


def test_union_demands_a_proved_record_and_equal_shapes():
    nu = NuGraph()
    a, b = nu.add(input_node("a", shape_of(("m",)))), nu.add(input_node("b", shape_of(("n",))))
    c = nu.add(input_node("c", shape_of(("m",))))
    with pytest.raises(ValueError, match="unproved"):
        nu.union(a, c, fresh_proof(status="UNKNOWN"))
    with pytest.raises(ValueError, match="shapes"):
        nu.union(a, b, fresh_proof())


def test_proofs_are_recorded_with_ids_and_annotations_survive_union():
    nu = NuGraph()
    a, c = nu.add(input_node("a", shape_of(("m",)))), nu.add(input_node("c", shape_of(("m",))))
    nu.eclass(c).annotations["tiling"] = {"tile": 128}
    proof = fresh_proof(solver_time_s=0.01, query="(assert ...)")
    keep = nu.union(a, c, proof)
    nu.rebuild()
    assert nu.proofs == [proof] and proof.id == 0
    assert nu.eclass(keep).annotations == {"tiling": {"tile": 128}}


def test_extraction_avoids_cycles():
    x = input_node("x", shape_of(("m", "k")))
    t = make_node(Op.TRANSPOSE, [x], TransposeParams((1, 0)))
    tt = make_node(Op.TRANSPOSE, [t], TransposeParams((1, 0)))
    nu = NuGraph.from_graph(Graph((x,), (make_node(Op.EXP, [tt]),)))
    nu.union(nu.add(x), nu.add(tt), fresh_proof())  # x = (x.T).T: the class of x now reaches itself
    # one e-node per class: choosing (x.T).T for x's class would need x's class inside itself, so
    # the only acyclic choice is x itself (and the enumeration terminates)
    variants = nu.extract_variants(10)
    assert [v.graph.outputs[0] for v in variants] == [make_node(Op.EXP, [x])]


def test_extraction_is_bounded_deduplicated_and_original_first(checker):
    @axon.program(x=("m", "k"), y=("m", "k"), s=("m", 1), w=("k", "n"))
    def combo(x, y, s, w):
        return (((x + y) / s) @ w).T

    nu, _ = discover(combo.graph, checker)
    assert len(nu.extract_variants(1000)) > 20  # many variants ...
    variants = nu.extract_variants(7)
    assert len(variants) == 7  # ... but only as many as asked for
    assert variants[0].graph.outputs == combo.graph.outputs and variants[0].rewrites == ()
    assert len({v.graph for v in variants}) == 7
    for v in variants:
        assert all(nu.proofs[r].proved for r in v.rewrites)
        assert [p.id for p in v.chain(nu)] == list(v.rewrites)


def test_no_blow_up_with_shared_subexpressions(checker):
    @axon.program(x=("m", "k"), s=("m", 1), w1=("k", "n"), w2=("k", "n"), w3=("k", "n"))
    def fanout(x, s, w1, w2, w3):
        d = x / s  # read by three matmuls: the single-user guard keeps it where it is
        return d @ w1 + d @ w2 + d @ w3

    nu, stats = discover(fanout.graph, checker)
    assert stats.fixed_point and nu.num_classes <= 2 * len(fanout.graph.nodes())
    for name in ("gated_mlp", "gated_projection", "gqa", "layernorm"):
        graph = SUITE[name].program.graph
        nu, stats = discover(graph, checker)
        assert stats.fixed_point and nu.num_classes <= 3 * len(graph.nodes()), name
        assert len(nu.extract_variants(50)) <= 50


def test_enodes_remember_the_proof_that_added_them(checker):
    nu, _ = discover(SUITE["softmax_matmul"].program.graph, checker)
    origins = {origin for c in nu.classes() for origin in c.nodes.values()}
    assert None in origins  # the program's own nodes
    assert all(nu.proofs[o].proved for o in origins if o is not None)
    rewritten = [v for v in nu.extract_variants(10) if v.rewrites]
    assert rewritten and "(c / d) @ b = (c @ b) / d" in rewritten[0].chain(nu)[0].equation()


def test_enode_is_a_value():
    assert ENode(Op.EXP, None, (1,)) == ENode(Op.EXP, None, (1,))
    assert len({ENode(Op.EXP, None, (1,)), ENode(Op.EXP, None, (1,)), ENode(Op.NEG, None, (1,))}) == 2
