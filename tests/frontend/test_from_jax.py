"""axon.from_jax: JAX functions as Axon programs (their jaxpr), end to end.

JAX starts threads, and Axon forks (z3 queries, sandboxed simulations): each check runs in a
child process of its own (the `in_child` fixture), so no other test forks beside JAX's threads.
"""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import axon
from axon.errors import UnsupportedError
from axon.frontend.loading import load_from_file

if importlib.util.find_spec("jax") is None:  # the [jax] extra; the [test] extra installs it
    pytest.skip("JAX is not installed", allow_module_level=True)


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama_jax.py"


def _block():
    """The Llama-style block of examples/llama_jax.py: (function, example inputs, program)."""
    inputs, prog = load_from_file(str(EXAMPLE), "import_block")()
    return load_from_file(str(EXAMPLE), "llama_block"), inputs, prog


def check_an_imported_block_means_what_the_function_computes():
    llama_block, example, prog = _block()
    assert prog.input_names[0] == "p_input_norm" and prog.input_names[-3:] == ["x", "cos", "sin"]
    got = prog(**{k: v.astype(np.float64) for k, v in prog.examples.items()})
    np.testing.assert_allclose(got, np.asarray(llama_block(*example)), rtol=1e-4, atol=1e-4)


def check_a_reduction_jax_drops_the_axis_of_is_kept_as_a_column():
    import jax.numpy as jnp
    prog = axon.from_jax(lambda x: x / jnp.sum(x * x, axis=-1)[:, None], (jnp.ones((128, 64)),))
    assert "reshape" not in prog.graph.pretty()  # the [rows, 1] column is used as it is
    x = np.random.default_rng(0).standard_normal((128, 64))
    np.testing.assert_allclose(prog(x), x / (x * x).sum(axis=-1, keepdims=True), rtol=1e-12)


def check_the_first_unsupported_primitive_is_one_line_with_the_users_line():
    import jax
    import jax.numpy as jnp
    def f(x):
        return jax.scipy.special.erf(jnp.exp(x))  # the line the error names
    with pytest.raises(UnsupportedError, match=r"^test_from_jax\.py:\d+: jax operator erf is not supported by Axon$"):
        axon.from_jax(f, (jnp.ones((4, 8)),))


def check_a_broadcast_into_a_matmul_is_refused():
    import jax.numpy as jnp
    with pytest.raises(UnsupportedError, match="broadcast"):
        axon.from_jax(lambda x, w: jnp.broadcast_to(x, (128, 64)) @ w, (jnp.ones((1, 64)), jnp.ones((64, 32))))


def check_a_llama_block_from_jax_optimizes_end_to_end():
    from axon.search.pipeline import PipelineResult

    llama_block, example, prog = _block()
    r = axon.optimize(prog, None, "trn2", "bfloat16", budget_s=5, algebra=False)  # the PyTorch test searches rewrites
    assert isinstance(r, PipelineResult) and len([s for s in r.steps if s.kind == "kernel"]) >= 3
    assert r.speedup > 1.5 and "each against the float64 reference" in r.check
    want = np.asarray(llama_block(*example))
    assert r.max_abs_err < 0.05 * np.max(np.abs(want))
    assert r.kernel_source.count("@nki.jit") == len(r.steps)  # the launcher: every kernel


def test_an_imported_block_means_what_the_function_computes(in_child):
    in_child('check_an_imported_block_means_what_the_function_computes')


def test_a_reduction_jax_drops_the_axis_of_is_kept_as_a_column(in_child):
    in_child('check_a_reduction_jax_drops_the_axis_of_is_kept_as_a_column')


def test_the_first_unsupported_primitive_is_one_line_with_the_users_line(in_child):
    in_child('check_the_first_unsupported_primitive_is_one_line_with_the_users_line')


def test_a_broadcast_into_a_matmul_is_refused(in_child):
    in_child('check_a_broadcast_into_a_matmul_is_refused')


@pytest.mark.slow
def test_a_llama_block_from_jax_optimizes_end_to_end(in_child):
    in_child('check_a_llama_block_from_jax_optimizes_end_to_end', timeout=600)
