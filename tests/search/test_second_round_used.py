"""The second round of propagation replaces a phase's program by a cheaper proved re-lowering, and
the kernels built from it compute the phase's own outputs.

Two forms of rmsnorm (variants `discover` finds for it) fuse to programs with one IR meaning, so
the second round re-lowers that meaning once and both phases use it: each must store its own
output node (a re-lowering bound to the first phase's graph nodes left the second kernel's output
never written)."""
import pytest

import axon
import axon.frontend.functions as F
from axon import targets
from axon.frontend.program import program
from axon.fusion.nodes import RowWorld, groups, phases
from axon.search.candidates import Counts, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.select import ResultCache, check_candidate
from axon.semantics.bounds import kernel_reference
from axon.suite import SUITE

TARGET = targets.get("trn2")
EPS = 1e-6


@program(x=("m", "n"), g=("n",))
def rms_scale_after(x, g):
    ms = (x / x.shape[-1] * x).sum(axis=-1, keepdims=True)
    return x / F.sqrt(ms + EPS) * g


@program(x=("m", "n"), g=("n",))
def rms_scale_before(x, g):
    xg = x * g
    ms = (x / x.shape[-1] * x).sum(axis=-1, keepdims=True)
    return xg / F.sqrt(ms + EPS)


FORMS = (rms_scale_after, rms_scale_before)


def _phase(prog):
    world = RowWorld.of(prog.graph)
    (ph,) = phases(world, groups(world, "fused")[0])
    return ph


def test_cheaper_relowering_replaces_each_phase_program():
    lw, plain = Lowerer(TARGET), Lowerer(TARGET, second_round=False)
    for prog in FORMS:
        ph = _phase(prog)
        out = ph.nodes[-1]
        used = lw.program(ph.nodes, [out])
        fused = plain.program(ph.nodes, [out])
        assert used.second_round and not fused.second_round
        assert used.cost < fused.cost
        assert used.status == fused.status == "proved"
        assert [n for n, _ in used.outputs] == [out]  # this phase's node, not the other form's
        assert set(used.operands) <= set(prog.graph.nodes())
        (_, arg), = used.outputs
        width = used.widths[(arg.index, arg.output)]
        assert width.evaluate_int(used.binding({"m": 128, "n": 512})) == 512  # dims over the graph's names
    assert len(lw._second_seen) == 1  # one meaning, re-lowered once, bound to each phase
    assert lw.stats["second_round_used"] == 2


def test_kernels_with_second_round_programs_pass_the_numerical_check():
    sizes = {"m": 128, "n": 512}
    pool = [(p.graph, ()) for p in FORMS]
    cands = enumerate_candidates("rmsnorm", pool, sizes, TARGET, "float32", Lowerer(TARGET), Counts())
    used = [c for c in cands if "second round" in c.source]
    assert {c.variant for c in used} == {0, 1}
    inputs = FORMS[0].random_inputs(sizes, dtype="float32", seed=0)
    want, tol = kernel_reference(FORMS[0].graph, inputs, "float32")
    for c in used[:8]:
        check = check_candidate(TARGET, c.source, inputs, want, tol)
        assert check.ok, (check.error, check.max_abs_err, c.describe())


@pytest.mark.slow
def test_optimize_rmsnorm_uses_the_second_round():
    r = axon.optimize("rmsnorm", "small", target="trn2", budget_s=5, cache=ResultCache(None))
    assert r.instructions["second_round_cheaper"] > 0
    assert r.instructions["second_round_used"] == r.instructions["second_round_cheaper"]
    assert r.candidates["failed_numerics"] == 0 and r.candidates["failed_simulation"] == 0
    inputs = SUITE["rmsnorm"].program.random_inputs(r.sizes, dtype="bfloat16", seed=1)
    want, tol = kernel_reference(SUITE["rmsnorm"].program.graph, inputs, "bfloat16")
    check = check_candidate(TARGET, r.kernel_source, inputs, want, tol)
    assert check.ok, (check.error, check.max_abs_err)
