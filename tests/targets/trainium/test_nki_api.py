"""The documented NKI API (nki_api.py): `axon simulate --lint` finds misuses in a kernel's source,
the simulator rejects the same misuses when it runs Axon's own kernels (strict_api), and the
kernels Axon emits pass both."""
import pytest

from axon.cli import main
from axon.errors import KernelError
from axon.targets.trainium.nki_api import NKI_VERSION, lint, tensor_scalar_engines
from axon.targets.trainium.simulator import ShapeDtype, simulate_source

HEADER = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n\n\n@nki.jit\ndef kern(x):\n"
TAIL = "    return out\n"


def kernel(*lines: str) -> str:
    body = ["out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)",
            "t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)",
            "nisa.dma_copy(dst=t, src=x)", *lines, "nisa.dma_copy(dst=out, src=t)"]
    return HEADER + "".join(f"    {line}\n" for line in body) + TAIL


GOOD = kernel("nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=1.0, "
              "engine=nisa.engine.scalar)",
              "p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)",
              "nisa.tensor_copy(dst=p, src=t, engine=nisa.engine.vector)",
              "nisa.tensor_copy(dst=t, src=p)")

MISUSES = {
    "gpsimd reads psum": (kernel("p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)",
                                 "nisa.tensor_copy(dst=p, src=t)",
                                 "nisa.tensor_copy(dst=t, src=p, engine=nisa.engine.gpsimd)"),
                          "GpSimd cannot access"),
    "a keyword of the beta-1 API": (kernel("nisa.tensor_copy(dst=t, src=t, mask=None)"), "no parameter 'mask'"),
    "divide on the scalar engine": (kernel("nisa.tensor_scalar(dst=t, data=t, op0=nl.divide, operand0=2.0, "
                                           "engine=nisa.engine.scalar)"), "cannot compute (divide, None)"),
    "matmul moving from psum": (kernel("p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)",
                                       "q = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)",
                                       "nisa.memset(dst=p, value=0.0)",
                                       "nisa.nc_matmul(dst=q, stationary=t[0:128, 0:128], moving=q)"),
                                "moving is in PSUM"),
    "a transpose that converts": (kernel("b = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.psum)",
                                         "nisa.nc_transpose(dst=b, data=t[0:128, 0:128])"), "does not convert"),
    "a dma that converts": (kernel("b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)",
                                   "nisa.dma_copy(dst=b, src=t)"), "does not convert"),
    "an engine the call has not": (kernel("nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add, "
                                          "engine=nisa.engine.scalar)"), "runs on gpsimd or vector"),
}


def test_an_entry_check_makes_a_parameters_dtype_known():
    source = "\n".join([
        "import nki", "import nki.isa as nisa", "import nki.language as nl", "", "",
        "@nki.jit", "def k(g):",
        "    assert g.dtype == nl.bfloat16",
        "    row = nl.ndarray((1, 512), dtype=nl.float32, buffer=nl.sbuf)",
        "    nisa.dma_copy(dst=row, src=g.reshape((1, 512)))",
        "    return row"])
    errors = [f for f in lint(source) if f.severity == "error"]
    assert len(errors) == 1 and "does not convert: dst is float32, its source bfloat16" in errors[0].text
    assert not [f for f in lint(source.replace("nl.float32", "g.dtype")) if f.severity == "error"]


@pytest.mark.parametrize("case", sorted(MISUSES))
def test_lint_and_the_strict_simulator_reject_the_same_misuse(case):
    source, expected = MISUSES[case]
    errors = [f for f in lint(source) if f.severity == "error"]
    assert len(errors) == 1 and expected in errors[0].text, errors
    assert f"v{NKI_VERSION}" in errors[0].text or "v2.32.0" in errors[0].text  # the page it was read from
    with pytest.raises(KernelError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        simulate_source(source, None, {"x": ShapeDtype((128, 512), "float32")}, timing_only=True,
                        strict_api=True)
    # a kernel written by a user runs with what the simulator accepts (it checks hardware rules itself)


def test_a_documented_kernel_has_no_findings_and_runs_strictly():
    assert [f for f in lint(GOOD) if f.severity == "error"] == []
    simulate_source(GOOD, None, {"x": ShapeDtype((128, 512), "float32")}, timing_only=True, strict_api=True)


def test_removed_and_deprecated_names():
    source = HEADER + "    for i in nl.affine_range(2):\n        t = nl.ndarray((nl.par_dim(128), 4), dtype=nl.float32)\n" \
        + "    return x\n"
    findings = lint(source)
    assert [(f.severity, "par_dim" in f.text) for f in findings] == [("deprecated", False), ("error", True)]
    assert lint("def broken(:\n")[0].text.startswith("does not parse")
    (beta1,) = lint("import neuronxcc.nki.isa as nisa\nfrom neuronxcc.nki import language\n")
    assert beta1.line == 1 and "beta-1 API" in beta1.text


def test_a_number_as_bias_is_a_trn2_form():
    source = kernel("nisa.activation(dst=t, op=nl.exp, data=t, bias=1e-6)")
    assert [f for f in lint(source, "trn2") if f.severity == "error"] == []
    assert "bias is a [P, 1] tile" in lint(source, "trn1")[0].text


def test_tensor_scalar_engines_follow_the_operators():
    assert tensor_scalar_engines("mul", "add") == {"vector", "scalar"}
    assert tensor_scalar_engines("divide", None) == {"vector"}
    assert tensor_scalar_engines("rsqrt", None) == {"vector", "gpsimd"}


def test_the_cli_prints_one_line_per_finding(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text(MISUSES["gpsimd reads psum"][0])
    assert main(["simulate", "--lint", str(bad)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{bad}:13: error: nki.isa.tensor_copy on GpSimd") and len(lines) == 2
    good = tmp_path / "good.py"
    good.write_text(GOOD)
    assert main(["simulate", "--lint", f"{good}:kern"]) == 0
    assert capsys.readouterr().out.strip().endswith(f"0 error(s) against NKI {NKI_VERSION} (trn2)")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_every_candidate_axon_emits_passes_the_checker(target):
    from axon.fusion.nodes import FUSION_MODES
    from axon.rewriting import discover
    from axon.search.candidates import Counts, enumerate_candidates
    from axon.search.lowering import Lowerer
    from axon.search.optimize import get_target
    from axon import suite

    tgt = get_target(target)
    lowerer = Lowerer(tgt)
    checked = 0
    for name in ("rmsnorm_matmul", "layernorm", "softmax", "gated_mlp", "gqa", "causal_gqa", "rope_hf"):
        bench = suite.get(name)
        nu, _ = discover(bench.program.graph)
        pool = [(v.graph, ()) for v in nu.extract_variants(limit=3)]
        for cand in enumerate_candidates(name, pool, bench.sizes("small"), tgt, "bfloat16", lowerer, Counts(),
                                         modes=FUSION_MODES):
            errors = [f.format(f"{name}:{cand.key}") for f in lint(cand.source, target) if f.severity == "error"]
            assert errors == []
            checked += 1
    assert checked > 100


def test_gpsimd_reaching_psum_is_refused_in_every_current_api_kernel():
    # a hardware rule, not an API version's: user kernels (not strict) are refused too; a beta-1
    # kernel is not (its compiler moved data: nki-samples' flash_fwd selects on a PSUM tile)
    with pytest.raises(KernelError, match="GpSimd cannot access"):
        simulate_source(MISUSES["gpsimd reads psum"][0], None, {"x": ShapeDtype((128, 512), "float32")},
                        timing_only=True)


def test_accumulating_onto_a_memset_psum_tile_is_a_finding():
    zeroed = kernel("p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)", "nisa.memset(dst=p, value=0.0)",
                    "nisa.nc_matmul(dst=p, stationary=t[0:128, 0:128], moving=t)", "nisa.tensor_copy(dst=t, src=p)")
    (finding,) = lint(zeroed)
    assert finding.line == 13 and "zeroed by memset (line 12)" in finding.text
    overwrite = zeroed.replace("moving=t)", "moving=t, accumulate=False)")
    assert lint(overwrite) == []
