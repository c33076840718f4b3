"""The reference evaluator's constant folding: what optimize evaluates at a case's sizes."""
import numpy as np

import axon
from axon.semantics.evaluate import evaluate, fold_constants


def test_fold_constants_evaluates_computations_on_sizes_at_the_given_sizes():
    @axon.program(x=("m", "d"))
    def f(x):
        return x * axon.rsqrt(x.shape[1]) + axon.log(x.shape[1] - x.shape[1] + 1) + axon.log(x.shape[0] - x.shape[0])

    folded = fold_constants(f.graph, {"m": 3, "d": 16})
    consts = [n.params.value for n in folded.nodes() if n.op.value == "const"]
    assert 0.25 in consts and 0.0 in consts  # rsqrt(16); log(1)
    assert any(n.op.value == "log" for n in folded.nodes())  # log(0) is left as it is: not finite
    x = np.random.default_rng(0).standard_normal((3, 16))
    np.testing.assert_array_equal(evaluate(folded, {"x": x})[0], evaluate(f.graph, {"x": x})[0])
    assert fold_constants(folded, {"m": 3, "d": 16}) is folded  # nothing left to fold: the same graph
