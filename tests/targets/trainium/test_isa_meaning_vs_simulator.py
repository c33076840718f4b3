"""Every entry of the Trainium instruction table means what the simulator's instruction computes.

The table is walked, not listed: for each instruction spec of every ISA, each hole assignment the
synthesizer may choose (`hole_combinations` over every operator: only a commutative operator's
order flag is left out) and each form of each operand slot, the
spec's meaning is evaluated by the reference evaluator (float64) and compared with a
one-instruction NKI kernel run on the simulator (float32 data). The kernel is printed by the
emitter's own verbs, so every activation function and ALU operator is spelled with the nl.<name>
real kernels use. The tolerance (1e-6 of the output's scale) tells nl.gelu (erf) from Axon's gelu
(tanh approximation, nl.gelu_apprx_tanh): they differ by up to 4.7e-4.
"""
import itertools
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

from axon.errors import ShapeError
from axon.ir import Graph, input_node
from axon.semantics.evaluate import evaluate
from axon.semantics.ops import Op
from axon.semantics.scalar import ScalarOp
from axon.semantics.sizes import shape_of
from axon.synthesis.lowering import Arg, Step
from axon.synthesis.sketch import hole_combinations
from axon.synthesis.spec import AFFINE, HBM, PSUM, Form, Inexpressible, const_node
from axon.targets.trainium import isa
from axon.targets.trainium.emitter import NkiEmitter
from axon.targets.trainium.simulator import simulate_source
from axon.tiling.positions import Predicate

# Shape letters of the slots; small, unequal, within every engine's limits (VectorE transposes 32x32).
SIZES = {"P": 24, "F": 20, "K": 24, "M": 20, "N": 28}
IMMEDIATE = 0.75
FILLS = (1.0, 0.75)  # 1.0: the value the scan meaning special-cases (data0 = 1)
RTOL = 1e-6  # the worst case seen is 1.8e-7
EVERY_OP = frozenset(ScalarOp)  # hole domains unrestricted: every operator the table offers
# a slot that reads positions (memory AFFINE) gets this predicate: -5 + p - 2 f >= 0, true and false
POSITIONS = Predicate("-5", 1, -2, SIZES["F"], ScalarOp.GE)
SPECS = {s.name: s for table in isa.ISAS.values() for s in table.instructions}


def _slot_options(slot, holes):
    """(form, constant) choices for a slot; None where it is left out."""
    if slot.hole is not None and holes.get(slot.hole) is None:
        return [None]  # present exactly when its operator hole is set
    options = [None] if slot.optional and slot.hole is None else []
    for form in sorted(slot.forms, key=lambda f: f.value):
        consts = (IMMEDIATE,) if form is Form.IMMEDIATE else FILLS if form is Form.FILL else (None,)
        options += [(form, c) for c in consts]
    return options


def cases(spec):
    for holes in hole_combinations(spec, EVERY_OP):
        for choice in itertools.product(*(_slot_options(s, holes) for s in spec.slots)):
            yield holes, {s.name: c for s, c in zip(spec.slots, choice) if c is not None}


def _operands(spec, filled, rng, magnitudes):
    """Per slot: the node the meaning reads, and the data behind each input node."""
    nodes, arrays = {}, {}
    for name, (form, const) in filled.items():
        if const is not None:
            nodes[name] = const_node(const)
            continue
        letters = spec.slot(name).shape
        shape = (SIZES[letters[0]], 1) if form is Form.COLUMN else tuple(SIZES[x] for x in letters)
        if AFFINE in spec.slot(name).memories:  # the reference reads the predicate's 0/1 values
            p, f = np.indices(shape)
            value = int(POSITIONS.offset) + POSITIONS.row * p + POSITIONS.col * f
            param = f"a{len(arrays)}"
            nodes[name], arrays[param] = input_node(param, shape_of(shape)), (value >= 0).astype(np.float32)
            continue
        # multiples of 1/64 in [0.25, 2]: away from 0 (division), and products and sums of them are
        # exact in float32, so no rounding before a steep function (1/x near 0) is amplified;
        # signed unless the meaning is undefined there (log, sqrt)
        data = rng.integers(16, 129, shape) / 64 * (1 if magnitudes else rng.choice([-1.0, 1.0], shape))
        param = f"a{len(arrays)}"
        nodes[name], arrays[param] = input_node(param, shape_of(shape)), data.astype(np.float32)
    return nodes, arrays


def _reference(outs, nodes, arrays):
    inputs = tuple(n for n in nodes.values() if n.op is Op.INPUT)
    return dict(zip(outs, evaluate(Graph(inputs, tuple(outs.values())), arrays)))


def _dims(node):
    return tuple(s.as_int() for s in node.shape)


# Instructions the builder prints with a verb of their own (everything else is a synthesized
# program step, printed by `NkiEmitter.program`): (emitter, holes, slot -> source, dst view).
def _matmul(em, holes, src, dst):
    em.matmul(dst.split("[")[0], src["stationary"].split("[")[0], src["moving"].split("[")[0], SIZES["M"],
              SIZES["K"], SIZES["N"], 1, "0", "0")


def _transpose(em, holes, src, dst):  # the builder uses TensorE only; the table offers VectorE too
    em.line(f"nisa.nc_transpose(dst={dst}, data={src['data']}, engine=nisa.engine.{holes['engine']})")


VERBS = {"nc_matmul": _matmul, "nc_transpose": _transpose,
         "dma_copy": lambda em, h, src, dst: em.dma(dst, src["data"]),
         "dma_transpose": lambda em, h, src, dst: em.dma_transpose(dst, src["data"])}


def _kernel(spec, holes, filled, nodes, outs) -> str:
    """One instruction between loads and stores, as the emitter prints it."""
    em = NkiEmitter(dtype="float32")
    params = [n.params.name for n in nodes.values() if n.op is Op.INPUT]
    em.begin("k", params, [])
    src, operands, args = {}, [], []
    for name, node in nodes.items():
        if node.op is Op.CONST:
            args.append((name, Arg("const", value=node.params.value)))
            continue
        p, f = _dims(node)
        if AFFINE in spec.slot(name).memories:  # no tile: the instruction evaluates the predicate
            args.append((name, Arg("operand", len(operands))))
            operands.append(POSITIONS)
            continue
        if HBM in spec.slot(name).memories:  # a DMA reads the kernel argument itself
            view = node.params.name
        else:
            view = em.view(em.alloc("t", p, f, "f32"), p, "0", f)
            em.dma(view, node.params.name)
        src[name] = view
        args.append((name, Arg("operand", len(operands))))
        operands.append(view)
    dsts = {}
    for o, node in outs.items():
        p, f = _dims(node)
        memory = "accum" if o == "out" and spec.out_memory(holes) == PSUM else "f32"
        dsts[(0, o)] = em.view(em.alloc(f"r_{o}", p, f, memory), p, "0", f)
    if spec.name in VERBS:
        VERBS[spec.name](em, holes, src, dsts[(0, "out")])
    else:
        prog = SimpleNamespace(steps=(Step(spec.name, tuple(holes.items()), tuple(args)),),
                               widths={k: _dims(n)[1] for k, n in zip(dsts, outs.values())})
        em.program(prog, operands, dsts, SIZES["P"], lambda w: w, {})
    for o, node in outs.items():
        em.hbm(f"out_{o}", list(_dims(node)), "f32", output=True)
        em.dma(f"out_{o}", dsts[(0, o)])
    return em.finish([f"out_{o}" for o in outs])


def check(spec, holes, filled, seed=0):
    """None when the case is outside the spec's fragment, else (max error, allowed, kernel)."""
    for magnitudes in (False, True):
        nodes, arrays = _operands(spec, filled, np.random.default_rng(seed), magnitudes)
        if not arrays:
            return None  # constants only: no tile, no shape
        try:
            outs = dict(spec.meaning(holes, nodes))
        except (Inexpressible, ShapeError):
            return None
        want = _reference(outs, nodes, arrays)
        if all(np.isfinite(w).all() for w in want.values()):
            break
    source = _kernel(spec, holes, filled, nodes, outs)
    got = simulate_source(source, "k", arrays).outputs
    got = got if isinstance(got, tuple) else (got,)
    err = max(_error(np.asarray(g, np.float64).reshape(w.shape), w) for g, w in zip(got, want.values()))
    return err, RTOL, source


def _error(got, want) -> float:
    """Largest difference relative to the output's scale; an infinity or NaN must be matched."""
    finite = np.isfinite(want)
    if not np.array_equal(got[~finite], want[~finite], equal_nan=True) or not np.isfinite(got[finite]).all():
        return float("inf")
    if not finite.any():
        return 0.0
    scale = max(1.0, float(np.abs(want[finite]).max()))
    return float(np.abs(got[finite] - want[finite]).max()) / scale


def _label(holes, filled):
    h = ", ".join(f"{k}={getattr(v, 'name', v)}" for k, v in holes.items())
    s = ", ".join(f"{k}={f.value}{'' if c is None else f' {c}'}" for k, (f, c) in filled.items())
    return f"({h}; {s})"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_meaning_matches_the_simulator(name):
    spec = SPECS[name]
    wrong, checked, seen = [], 0, {h.name: set() for h in spec.holes}
    for holes, filled in cases(spec):
        result = check(spec, holes, filled)
        if result is None:
            continue
        checked += 1
        for hole, value in holes.items():
            seen[hole].add(value)
        err, allowed, source = result
        if err > allowed:
            wrong.append(f"{_label(holes, filled)}: error {err:.2e} of scale")
    assert not wrong, f"{name}: meaning differs from the simulator in {len(wrong)} cases:\n" + "\n".join(wrong[:10])
    assert checked, f"{name}: no case inside the meaning's fragment was checked"
    # every value of every hole was checked at least once (none skipped as Inexpressible)
    for h in spec.holes:
        assert seen[h.name] == set(h.domain), f"{name}.{h.name}: unchecked {set(h.domain) - seen[h.name]}"


def test_erf_gelu_is_rejected_as_the_lowering_of_gelu(monkeypatch):
    """Must-reject twin: a table that spells Axon's gelu (tanh approximation) as nl.gelu, which
    NKI and the simulator define with erf, fails the check above by far more than its tolerance."""
    monkeypatch.setitem(isa.NKI_NAMES, ScalarOp.GELU, "gelu")
    err, allowed, source = check(SPECS["activation"], {"func": ScalarOp.GELU}, {"data": (Form.TILE, None)})
    assert re.search(r"op=nl\.gelu\b", source) and err > 50 * allowed
    # and what the simulator's nl.gelu computes is the erf form
    x = np.random.default_rng(1).uniform(-4, 4, (SIZES["P"], SIZES["F"])).astype(np.float32)
    erf_gelu = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    got = simulate_source(source, "k", {"a0": x}).outputs
    np.testing.assert_allclose(got, erf_gelu, rtol=RTOL, atol=RTOL)
