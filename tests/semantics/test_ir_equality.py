"""Structural equality of IR terms: equal terms built apart compare equal, unequal ones do not,
and a comparison costs the distinct subterms, not the paths through a DAG to them."""
import pickle

from axon.ir import Node, const_node, input_node, make_node
from axon.semantics.ops import Op


def _tower(depth: int, leaf: float = 1.0) -> Node:
    """x * c, then each level adds the level below to itself: a DAG of `depth` + 3 distinct nodes
    with 2**depth paths from the top to x."""
    node = make_node(Op.MUL, (input_node("x", (4,)), const_node(leaf)))
    for _ in range(depth):
        node = make_node(Op.ADD, (node, node))
    return node


def test_equal_dags_built_apart_compare_in_time_linear_in_their_nodes(monkeypatch):
    calls = 0
    real = Node.__eq__

    def counted(self, other):
        nonlocal calls
        calls += 1
        return real(self, other)

    monkeypatch.setattr(Node, "__eq__", counted)
    a, b = _tower(20), _tower(20)
    assert a is not b and a == b  # 2**20 paths to x
    assert calls < 200
    calls = 0
    assert a == b and calls == 1  # the second time: by identity of their representatives


def test_unequal_dags_stay_unequal_after_equal_parts_were_compared():
    a, b, c = _tower(5), _tower(5), _tower(5, leaf=2.0)
    assert a == b and b != c and a != c and c != a
    assert hash(a) == hash(b) and {a: 1}[b] == 1


def test_a_pickled_node_is_its_term_alone():
    a, b = _tower(6), _tower(6)
    assert a == b
    copy = pickle.loads(pickle.dumps(b))
    assert copy == a and copy._same is None and len(pickle.dumps(b)) == len(pickle.dumps(_tower(6)))
