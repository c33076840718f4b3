"""axon.from_torch: PyTorch modules as Axon programs (torch.export's ATen graph), end to end.

Each check runs in a child process (the `in_child` fixture): loaded into the suite's process,
PyTorch would make every fork the rest of the suite does (z3 queries, simulations) costlier.
"""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import axon
from axon.errors import UnsupportedError
from axon.frontend.loading import load_from_file

if importlib.util.find_spec("torch") is None:  # the [torch] extra; the [test] extra installs it
    pytest.skip("PyTorch is not installed", allow_module_level=True)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama_torch.py"


def _block():
    """The Llama-style block of examples/llama_torch.py: (module, example inputs, program)."""
    return load_from_file(str(EXAMPLE), "import_block")()


def check_an_imported_block_means_what_the_module_computes():
    module, example, prog = _block()
    assert prog.input_names[:3] == ["x", "cos", "sin"] and "q_proj_weight" in prog.input_names
    got = prog(**{k: v.astype(np.float64) for k, v in prog.examples.items()})
    want = module(*example).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def check_named_dimensions_unsupported_operators_and_gelu():
    check_named_dimensions_name_every_axis_of_that_size()
    check_the_first_unsupported_operator_is_one_line_with_the_users_line()
    check_an_exact_gelu_is_refused_with_the_reason()


def check_named_dimensions_name_every_axis_of_that_size():
    import torch
    def mlp(x, w):
        return torch.nn.functional.silu(x @ w)
    prog = axon.from_torch(mlp, (torch.randn(128, 256), torch.randn(256, 512)), dims={"x": ("m", "k")})
    assert prog.dims == ["m", "k"] and prog.signature().startswith("mlp(x(m, k), w(k, 512))")


def check_the_first_unsupported_operator_is_one_line_with_the_users_line():
    import torch
    def f(x):
        y = torch.exp(x)
        return torch.erf(y)  # the line the error names
    with pytest.raises(UnsupportedError, match=r"^test_from_torch\.py:\d+: torch operator aten\.erf\.default is not "
                                               r"supported by Axon$"):
        axon.from_torch(f, (torch.randn(4, 8),))


def check_an_exact_gelu_is_refused_with_the_reason():
    import torch
    import torch.nn.functional as Fn
    with pytest.raises(UnsupportedError, match="erf.*approximate='tanh'"):
        axon.from_torch(lambda x: Fn.gelu(x), (torch.randn(4, 8),))
    prog = axon.from_torch(lambda x: Fn.gelu(x, approximate="tanh"), (torch.randn(4, 8),))
    x = np.linspace(-3, 3, 32).reshape(4, 8)
    np.testing.assert_allclose(prog(x), Fn.gelu(torch.tensor(x), approximate="tanh").numpy(), rtol=1e-12)


def check_a_llama_block_from_pytorch_optimizes_end_to_end_and_its_launcher_runs():
    from axon.search.pipeline import PipelineResult, run_steps
    from axon.targets.trainium.nki_api import lint

    module, example, prog = _block()
    import tempfile
    # rewrites are searched in the benchmark (benchmarks/llama_block.py); here fusion and tiling only
    r = axon.optimize(prog, None, "trn2", "bfloat16", budget_s=5, out_dir=tempfile.mkdtemp(), algebra=False)
    assert isinstance(r, PipelineResult)
    kernels = [s for s in r.steps if s.kind == "kernel"]
    assert len(kernels) >= 4 and any(s.kind == "relayout" for s in r.steps)
    assert r.latency_ns == pytest.approx(sum(s.latency_ns for s in r.steps)) and r.speedup > 1.5
    assert "each against the float64 reference" in r.check
    for s in r.steps:
        assert not [f for f in lint(s.source, target="trn2") if f.severity == "error"], s.name
    # the launcher beside the kernels: every kernel call on the simulator
    from axon.search.optimize import launcher_path
    from axon.targets.trainium.launch import simulated_launcher, simulated_run

    ns = simulated_launcher(str(launcher_path(r.kernel_path)))
    simulate = simulated_run(r.kernel_path)
    data = prog.random_inputs({}, "bfloat16")
    data.update({k: v.astype(data[k].dtype) for k, v in prog.examples.items()})
    got = ns["call"](*[data[name] for name in ns["SHAPES"]], run=simulate)
    outputs = lambda out: list(out) if isinstance(out, tuple) else [out]
    want = run_steps(r, data, lambda step, args: outputs(simulate(step.name, *args)))
    np.testing.assert_array_equal(np.asarray(got), want[0])
    ref = module(*example).detach().numpy()
    assert np.max(np.abs(np.asarray(got, np.float64) - ref)) < 0.05 * np.max(np.abs(ref))


def test_an_imported_block_means_what_the_module_computes(in_child):
    in_child('check_an_imported_block_means_what_the_module_computes')


@pytest.mark.slow
def test_a_llama_block_from_pytorch_optimizes_end_to_end_and_its_launcher_runs(in_child):
    in_child('check_a_llama_block_from_pytorch_optimizes_end_to_end_and_its_launcher_runs', timeout=600)


def test_named_dimensions_unsupported_operators_and_gelu(in_child):
    # one child for the three (each would pay PyTorch's import)
    in_child("check_named_dimensions_unsupported_operators_and_gelu")
