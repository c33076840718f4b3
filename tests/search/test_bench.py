"""`axon bench`: the report's JSON fields, geomeans, losses, resuming a killed run, Markdown and plots."""
import json
import math

import pytest

import axon.bench as bench
from axon.bench import geomean, losses, run_bench, summarize
from axon.bench.report import markdown
from axon.cli import main
from axon.errors import InputError


@pytest.fixture(autouse=True)
def _no_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "small.json"
    doc = run_bench(grid="small", benchmarks=["relu", "rmsnorm_matmul"], json_path=path, budget_s=5)
    return path, doc


def test_json_fields(small_report):
    path, doc = small_report
    data = json.loads(path.read_text())
    assert data == json.loads(json.dumps(doc))
    assert (data["target"], data["grid"], data["dtype"]) == ("trn2", "small", "bfloat16")
    assert [c["benchmark"] for c in data["cases"]] == ["relu", "rmsnorm_matmul"]
    for c in data["cases"]:
        for key in ("benchmark", "sizes", "dtype", "axon_ns", "roofline_ns", "baselines", "search_s", "model"):
            assert key in c
        assert set(c["baselines"]) == {"direct", "hand", "no_algebra", "no_fusion"}
        assert c["axon_ns"] <= c["baselines"]["direct"]  # the direct lowering is one of Axon's candidates
        assert 0 < c["roofline_fraction"] <= 1
    relu, rmm = data["cases"]
    assert relu["baselines"]["hand"] is None and relu["family"] == "single"
    assert rmm["baselines"]["hand"] > 0 and rmm["hand"]["reference_ok"] and rmm["family"] == "multi"
    assert rmm["proofs"]["proved"] >= 1
    assert set(data["geomean"]) == {"single", "multi"}
    assert data["geomean"]["multi"]["direct"] == pytest.approx(rmm["speedup"]["direct"])


def test_ablations_search_less(small_report):
    _, doc = small_report
    rmm = doc["cases"][1]
    assert rmm["ablations"]["no_fusion"]["candidates"] < rmm["candidates"]["generated"]
    assert rmm["ablations"]["no_algebra"]["candidates"] < rmm["candidates"]["generated"]


def test_resume_skips_done_cases(small_report, tmp_path, monkeypatch):
    path, doc = small_report
    copy = tmp_path / "r.json"
    copy.write_text(path.read_text())

    def must_not_run(*a, **k):
        raise AssertionError("a case already in the report was measured again")

    monkeypatch.setattr(bench, "measure_case", must_not_run)
    again = run_bench(grid="small", benchmarks=["relu", "rmsnorm_matmul"], json_path=copy)
    assert [c["axon_ns"] for c in again["cases"]] == [c["axon_ns"] for c in doc["cases"]]


def test_resume_remeasures_under_another_model(small_report, tmp_path, monkeypatch):
    path, _ = small_report
    data = json.loads(path.read_text())
    data["cases"][0]["model"] = "older"
    copy = tmp_path / "r.json"
    copy.write_text(json.dumps(data))
    measured = []
    real = bench.measure_case

    def counting(name, *a, **k):
        measured.append(name)
        return real(name, *a, **k)

    monkeypatch.setattr(bench, "measure_case", counting)
    run_bench(grid="small", benchmarks=["relu", "rmsnorm_matmul"], json_path=copy, budget_s=5)
    assert measured == ["relu"]


def test_geomean_and_losses():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([None, 0, 3.0]) == pytest.approx(3.0)
    assert geomean([]) is None
    cases = [{"benchmark": "a", "case": "q", "family": "single", "axon_ns": 100.0, "roofline_fraction": 0.5,
              "baselines": {"direct": 200.0, "hand": 50.0, "no_algebra": 100.0, "no_fusion": 400.0},
              "speedup": {"direct": 2.0, "hand": 0.5, "no_algebra": 1.0, "no_fusion": 4.0}},
             {"benchmark": "b", "case": "q", "family": "single", "axon_ns": 100.0, "roofline_fraction": 0.5,
              "baselines": {"direct": 800.0, "hand": None, "no_algebra": 200.0, "no_fusion": 100.0},
              "speedup": {"direct": 8.0, "hand": None, "no_algebra": 2.0, "no_fusion": 1.0}}]
    g = summarize(cases)["single"]
    assert g["direct"] == pytest.approx(4.0) and g["hand"] == pytest.approx(0.5) and g["hand_cases"] == 1
    assert g["no_fusion_relative"] == pytest.approx(math.sqrt(0.25 * 1.0))
    assert losses(cases) == [{"benchmark": "a", "case": "q", "baseline": "hand", "speedup": 0.5}]
    md = markdown({"grid": "quick", "target": "trn2", "dtype": "bfloat16", "cases": [
        {**c, "sizes": {"m": 1}, "fusion": "fused", "rewrites": [], "candidates": {"generated": 1, "evaluated": 1},
         "proofs": {"proved": 0}, "search_s": 1.0} for c in cases], "geomean": summarize(cases), "losses": losses(cases)})
    assert "| a | m=1 | 0.1 | 0.2 | 2.00x | 0.1 | 0.50x |" in md
    assert "hand-written NKI is faster" in md


def test_cli_and_plots(small_report, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path, _ = small_report
    copy = tmp_path / "r.json"
    copy.write_text(path.read_text())  # resumed: nothing is measured again
    rc = main(["bench", "--grid", "small", "--benchmarks", "relu,rmsnorm_matmul", "--json", str(copy),
               "--plots", str(tmp_path / "plots"), "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "geomean" in out and "wrote" in out
    assert (tmp_path / "r.md").read_text().startswith("# Axon benchmark report: small grid, trn2")
    for name in ("speedup.png", "roofline.png", "search_time.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:4] == b"\x89PNG"


def test_unknown_grid_and_benchmark():
    with pytest.raises(InputError, match="unknown grid"):
        bench.grid_cases(bench.suite.get("relu"), "huge")
    with pytest.raises(InputError, match="no benchmark named"):
        run_bench(grid="small", benchmarks=["nope"])


_WALL_CLOCK = ("wall_s", "search_s")


def test_the_report_is_the_same_with_one_worker_as_with_two(small_report, tmp_path):
    _, doc = small_report  # measured with a worker per usable core
    one = run_bench(grid="small", benchmarks=["relu", "rmsnorm_matmul"], json_path=tmp_path / "one.json",
                    budget_s=5, workers=1)
    strip = lambda d: [{k: v for k, v in c.items() if k not in _WALL_CLOCK} for c in d["cases"]]
    assert strip(one) == strip(json.loads(json.dumps(doc)))
    assert one["geomean"] == doc["geomean"]
    with pytest.raises(InputError, match="--workers must be at least 1"):
        run_bench(grid="small", benchmarks=["relu"], workers=0)


def test_a_users_program_is_benchmarked_at_the_sizes_given(tmp_path, capsys):
    (tmp_path / "mine.py").write_text(
        "import axon\n\n\n@axon.program(x=('m', 'k'), w=('k', 'n'))\n"
        "def half_relu_matmul(x, w):\n    return axon.relu(x * 0.5) @ w\n")
    spec, json_path = f"{tmp_path / 'mine.py'}:half_relu_matmul", tmp_path / "mine.json"
    rc = main(["bench", spec, "--sizes", "m=128,k=256,n=256", "--json", str(json_path), "--budget", "2",
               "--workers", "1", "--quiet"])
    assert rc == 0 and "user: 1 case(s)" in capsys.readouterr().out
    (row,) = json.loads(json_path.read_text())["cases"]
    assert (row["benchmark"], row["family"], row["case"]) == (spec, "user", "given")
    assert row["sizes"] == {"m": 128, "k": 256, "n": 256} and row["direct_check"]["ok"]
    assert 0 < row["axon_ns"] <= row["baselines"]["direct"] and row["baselines"]["hand"] is None
    assert (tmp_path / "mine.md").read_text().startswith("# Axon benchmark report: at the sizes given, trn2")
    with pytest.raises(InputError, match="needs --sizes for k, m, n"):
        run_bench(benchmarks=[spec], json_path=tmp_path / "other.json")
