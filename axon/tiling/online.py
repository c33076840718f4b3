"""Attention walked in chunks of its keys with a running softmax state (the online softmax of
flash attention), so a row of scores never has to be on chip whole.

A pass of the form

    x = A @ W1  (then element-wise ops)       scores, t columns
    m = max(x);  e = exp(x - m);  l = sum(e)   the softmax state of the row
    o = e @ W2  (then element-wise ops of o, l, m and row inputs: o / l)

can walk t in chunks: each chunk runs the pass's own phases at t = chunk, which gives the chunk's
state in its slot (n_c = -m_c, l_c, o_c), its max kept negated (the Scalar Engine adds it as
exp's bias, so the fused max-and-exp lowering makes it anyway). Two slots merge as

    n' = min(n, n_c);  a = exp(n' - n),  b = exp(n' - n_c);  l' = l a + l_c b;  o' = o a + o_c b

The states of two adjacent runs of chunks of any lengths, so merged, are the state of the run
they make up (`merge_lemma`, proved by Axon's verifier with lemmas fold_cases and
extremum_negate). The chunks do not depend on each other: each writes its state to a slot, and a
tree of merges gathers the slots into slot 0 (by induction over the tree it holds the whole
row's state: m = -n_0, l_0, o_0), where the second matmul's element-wise tail runs once; the
pairs of a level are independent, so the row waits for ceil(log2 chunks) merges.
Within a chunk, the scores leave PSUM one bank-wide piece at a time through their element-wise
tail (a scale; with none, a copy written x * 1), and each piece's max is taken on the way out
(one Vector Engine instruction does both); the chunk's max is the max of those
(`partial_max_lemma`, proved; by induction over the pieces).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from axon.errors import UnsupportedError
from axon.fusion.nodes import Group, Phase, RowWorld, phases
from axon.ir import Graph, Node, input_node, make_node
from axon.semantics.ops import AxisParams, ConcatParams, Op



@dataclass(frozen=True)
class OnlineSoftmax:
    """Where the parts of an online-softmax pass are (see the module docstring)."""

    lead: tuple  # row phases before the scores (they compute the first matmul's stationary operand)
    scores: Phase  # x = A @ W1 and its element-wise tail
    state: Phase  # max, sub, exp, sum
    values: Phase  # o = e @ W2 and its element-wise tail
    m: Node
    e: Node
    l: Node
    o: Node
    dim: str  # the symbol t walked in chunks


def online_softmax(world: RowWorld, group: Group) -> OnlineSoftmax | None:
    """The pass's parts if it has the online-softmax form, else None."""
    try:
        phs = phases(world, group)
    except UnsupportedError:
        return None
    if len(phs) < 3 or [p.kind for p in phs[-3:]] != ["matmul", "row", "matmul"]:
        return None
    lead, (scores, state, values) = tuple(phs[:-3]), phs[-3:]
    if any(p.kind != "row" for p in lead) or len(scores.matmuls) != 1 or len(values.matmuls) != 1:
        return None
    parts = _state_parts(state.nodes)
    if parts is None:
        return None
    x, m, e, l = parts
    o = values.matmuls[0]
    if x not in scores.nodes or o.inputs[0] != e:
        return None
    dim = x.shape[-1].as_symbol()
    W1, W2 = scores.matmuls[0].inputs[1], o.inputs[1]
    if dim is None or W1.shape[-1].as_symbol() != dim or W2.shape[-2].as_symbol() != dim:
        return None
    if any(world.roles.get(i) == "index" for n in scores.epilogue for i in n.inputs):
        return None  # a masked pass walks its columns by the causal prefix instead (tiling.positions)
    # the chunk's values (scores, exp) live only inside the walk: nothing outside the pass reads them
    inside = set(scores.nodes) | {n for n in state.nodes if n not in (m, l)}
    members = set(group.nodes)
    if any(n in world.graph.outputs for n in inside):
        return None
    if any(i in inside for n in world.graph.nodes() if n not in members for i in n.inputs):
        return None
    if any(i in inside for n in values.epilogue for i in n.inputs):
        return None
    # the lead phases feed the scores' stationary operand only
    lead_nodes = {n for p in lead for n in p.nodes}
    readers = [n for n in group.nodes if n not in lead_nodes and any(i in lead_nodes for i in n.inputs)]
    if any(r != scores.matmuls[0] or scores.matmuls[0].inputs[1] in lead_nodes for r in readers):
        return None
    return OnlineSoftmax(lead, scores, state, values, m, e, l, o, dim)


def _state_parts(nodes) -> tuple | None:
    """(x, m, e, l) of a row phase that is exactly m = max(x), exp(x - m) and its sum."""
    if len(nodes) != 4:
        return None
    by = {n.op: n for n in nodes}
    m, d, e, l = (by.get(op) for op in (Op.REDUCE_MAX, Op.SUB, Op.EXP, Op.REDUCE_SUM))
    if None in (m, d, e, l):
        return None
    x = m.inputs[0]
    last = lambda n: n.params.axis == n.inputs[0].rank - 1 and n.params.keepdims
    ok = (last(m) and last(l) and d.inputs == (x, m) and e.inputs == (d,) and l.inputs == (e,))
    return (x, m, e, l) if ok else None


def merge_nodes(m: Node, o: Node) -> tuple[dict, dict]:
    """The merge of two chunk states as the walk's slots hold them (each max negated: n = -m), as
    operators: ({role: placeholder input}, {role: merged node}) with roles n, l, o (the first
    chunk's) and n_c, l_c, o_c (the second's); the merged state is in slot form too."""
    col, row = m.shape, o.shape
    ins = {"n": input_node("n_first", col), "l": input_node("l_first", col), "o": input_node("o_first", row),
           "n_c": input_node("n_chunk", col), "l_c": input_node("l_chunk", col), "o_c": input_node("o_chunk", row)}
    return ins, _merged(ins)


def _merged(s: dict) -> dict:
    """n' = min(n, n_c) (the negated max of the maxes); a = exp(n' - n), b = exp(n' - n_c) (each
    side's rescaling to the joint max); l' = l a + l_c b, o' = o a + o_c b."""
    ap = lambda op, *xs: make_node(op, xs)
    n = ap(Op.MINIMUM, s["n"], s["n_c"])
    a, b = ap(Op.EXP, ap(Op.SUB, n, s["n"])), ap(Op.EXP, ap(Op.SUB, n, s["n_c"]))
    return {"n": n, "l": ap(Op.ADD, ap(Op.MUL, s["l"], a), ap(Op.MUL, s["l_c"], b)),
            "o": ap(Op.ADD, ap(Op.MUL, s["o"], a), ap(Op.MUL, s["o_c"], b))}


def chunk_state(x: Node) -> dict:
    """A chunk's softmax state as the walk computes it: n = -max(x), e = exp(x + n), l = sum(e)
    (the Scalar Engine's exp with n as its bias, and the sum it accumulates on the way)."""
    ap = lambda op, *xs, p=None: make_node(op, xs, p)
    last = AxisParams(x.rank - 1, True)
    n = ap(Op.NEG, ap(Op.REDUCE_MAX, x, p=last))
    e = ap(Op.EXP, ap(Op.ADD, x, n))
    return {"n": n, "e": e, "l": ap(Op.REDUCE_SUM, e, p=last)}


def chunk_state_from_parts(x: Node, parts: Node) -> dict:
    """`chunk_state` with the max taken over the pieces' maxes `parts` (partial_max_lemma)."""
    ap = lambda op, *xs, p=None: make_node(op, xs, p)
    last = AxisParams(x.rank - 1, True)
    n = ap(Op.NEG, ap(Op.REDUCE_MAX, parts, p=last))
    e = ap(Op.EXP, ap(Op.ADD, x, n))
    return {"n": n, "e": e, "l": ap(Op.REDUCE_SUM, e, p=last)}


@functools.cache
def partial_max_lemma():
    """The verifier's verdict on: the max of a row made of two parts of any lengths is the max of
    the parts' maxes."""
    from axon.semantics.sizes import Size
    from axon.verification import Verifier

    s, t1, t2 = (Size.of(n) for n in ("s", "t1", "t2"))
    a, b = input_node("a", (s, t1)), input_node("b", (s, t2))
    mx = lambda y: make_node(Op.REDUCE_MAX, (y,), AxisParams(1, True))
    cat = lambda *ys: make_node(Op.CONCAT, ys, ConcatParams(1))
    return Verifier().check_programs(Graph((a, b), (mx(cat(a, b)),)), Graph((a, b), (mx(cat(mx(a), mx(b))),)))


def _state(x: Node, v: Node) -> dict:
    """The state of a row as the pass writes it: m = max(x), e = exp(x - m), l = sum(e), o = e @ v."""
    ap = lambda op, *xs, p=None: make_node(op, xs, p)
    last = AxisParams(x.rank - 1, True)
    m = ap(Op.REDUCE_MAX, x, p=last)
    e = ap(Op.EXP, ap(Op.SUB, x, m))
    return {"m": m, "l": ap(Op.REDUCE_SUM, e, p=last), "o": ap(Op.MATMUL, e, v)}


@functools.cache
def merge_lemma():
    """The verifier's verdict on: the states of two chunks of any lengths t1, t2, as the walk
    computes them (`slot_state`), merged, are the state of the row they make up as the pass
    writes it (its max, the negated merged n). Proved once per process (a second or so)."""
    from axon.semantics.sizes import Size
    from axon.verification import Verifier

    s, t1, t2, d = (Size.of(n) for n in ("s", "t1", "t2", "d"))
    a, b = input_node("a", (s, t1)), input_node("b", (s, t2))
    va, vb = input_node("va", (t1, d)), input_node("vb", (t2, d))
    whole = _state(make_node(Op.CONCAT, (a, b), ConcatParams(1)), make_node(Op.CONCAT, (va, vb), ConcatParams(0)))
    first, second = slot_state(a, va), slot_state(b, vb)
    merged = _merged({"n": first["n"], "l": first["l"], "o": first["o"],
                      "n_c": second["n"], "l_c": second["l"], "o_c": second["o"]})
    merged["m"] = make_node(Op.NEG, (merged["n"],))  # the pass's max, as the walk's tail reads it
    ins = (a, b, va, vb)
    order = ("o", "l", "m")
    return Verifier().check_programs(Graph(ins, tuple(whole[k] for k in order)),
                                     Graph(ins, tuple(merged[k] for k in order)))


def slot_state(x: Node, v: Node) -> dict:
    """A chunk's state as its slot holds it: chunk_state's n and l, and o = e @ v."""
    cs = chunk_state(x)
    return {"n": cs["n"], "l": cs["l"], "o": make_node(Op.MATMUL, (cs["e"], v))}
