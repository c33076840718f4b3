"""Calibration of the trn1 performance model against ../shared/fidelity.md (the calibration set).

    .venv/bin/python benchmarks/calibrate.py --corpus /tmp/corpus [--out benchmarks/results/calibration.md]

Rows (only what fidelity.md gives; other published measurements are kept apart to judge the model):
- the four kernels of the NKI matrix-multiplication tutorial (Axon's own versions in
  examples/nki/matmul_tutorial/, as benchmarks/matmul_tutorial_fidelity.py runs them);
- the fused-Mamba tutorial's mamba_v1 at 256 and 4096 channels (batch 1, sequence 512, state 16),
  and the ordering mamba_v3 < mamba_v2 (measured: v3 faster at every sequence length);
- the seven NKIBench kernels (AccelOpt) of fidelity.md, with the profiles' per-engine active time.
The fetched kernels run unchanged from DIR (never committed), as the real toolchain compiles them:
on-chip memory is allocated by liveness, and what does not fit spills to HBM
(axon/targets/trainium/simulator/liveness.py): several NKIBench kernels declare more SBUF than
exists (bmm, gqa_full, lora, mamba spill on hardware), so their spill and reload DMAs are in the
trace and timed by the model; the table prints the modelled spill reload next to the measured one.

NKIBench latencies are neuron-profile `total_time`, which includes the fixed NEFF start/teardown:
they are compared with the model's `end_to_end_ns` = schedule latency + the fixed launch cost
(hardware.py `launch_ns`, fitted here by least squares of the relative error over the NKIBench rows
and printed; hardware.py holds the value). The tutorials' nki.benchmark latencies are compared with
the schedule latency (mamba_v1 at 256 channels, 172.93 us, leaves no room for such a cost). Per-engine busy is compared in absolute time: the model's
busy ns against the profile's active fraction x the measured latency.

The fitted parameters are printed with the rows they came from (hardware.py names the same rows).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from axon.targets.trainium.hardware import TRN1  # noqa: E402
from axon.targets.trainium.perfmodel import estimate  # noqa: E402
from axon.targets.trainium.simulator import ShapeDtype, load_kernel, simulate  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/calibrate.py --corpus /tmp/corpus"
ROW_BOUND = 0.20  # each calibration row within 20% of measured
ENGINE_BOUND = 0.30  # per-engine busy within 30% of the profile's active time
SPEARMAN_MIN = 0.95
TUTORIAL_BOUND = 0.25
ENGINE_MIN_PCT = 5.0  # engines active less than this share of the run are not compared (noise)

MAMBA = "nki-samples-fc5c69f/src/nki_samples/tutorials/fused_mamba/mamba_nki_kernels.py"
NKIB = "AccelOpt/NKIBench/kernels/"

# (row, source, function, inputs {name: (shape, dtype)}, measured ms, profile %: tensor, scalar, vector, gpsimd)
NKIBENCH = [
    ("add_rmsnorm_matmul_M4096_N2048_K1024",
     {"x_tensor": (4096, 1024), "w_tensor": (1024, 2048), "z_tensor": (4096, 1024), "g_tensor": (1024,)},
     {"eps": 1e-5}, 1.2219, (41.9, 22.5, 14.8, 0.43)),
    ("mamba_M7168_C256_S16",
     {"delta": (256, 7168), "u": (256, 7168), "a": (256, 16), "b": (16, 7168), "c": (16, 7168)},
     {}, 2.8887, (0.0, 18.6, 61.3, 0.04)),
    ("rope_single_freq_apply_B1_H64_N4096_D128",
     {"x_in": (128, 262144), "cos": (64, 262144), "sin": (64, 262144)}, {}, 4.3330, (0.0, 14.1, 71.6, 0.74)),
    ("silu_M4096_N7168", {"v1": (128, 32, 7168)}, {}, 1.3332, (0.0, 31.5, 73.9, 1.18)),
    ("bmm_B16_M4096_K64_N4096", {"v1": (16, 4096, 64), "v2": (16, 64, 4096)}, {}, 4.6109,
     (16.2, 37.3, 0.0, 2.61)),
    ("gqa_full_B1_N4096_QH16_KH8_D128",
     {"v1": (32, 128, 16, 128), "v2": (1, 8, 4, 128, 8, 128), "v3": (1, 32, 128, 1024)}, {}, 19.1105,
     (23.8, 38.6, 31.4, 0.17)),
    ("lora_M4096_N12288_K5120_R128",
     {"v1": (8, 4, 128, 40, 128), "v2": (40, 128, 12288), "v3": (40, 128, 128), "v4": (128, 12288)}, {},
     30.1664, (40.4, 3.4, 9.8, 0.18)),
]
# the NKIBench rows that spill on hardware (fidelity.md "spill reload" column, MB)
MEASURED_RELOAD_MB = {"add_rmsnorm_matmul_M4096_N2048_K1024": 0.0, "bmm_B16_M4096_K64_N4096": 33.8,
                      "gqa_full_B1_N4096_QH16_KH8_D128": 1127.2, "lora_M4096_N12288_K5120_R128": 1907.1,
                      "mamba_M7168_C256_S16": 55.1, "rope_single_freq_apply_B1_H64_N4096_D128": 0.0,
                      "silu_M4096_N7168": 0.0}
TUTORIAL = [("tiled", 51.80), ("hoist_load", 42.96), ("block_free", 22.07), ("fully_optimized", 6.97)]
ENGINES = ("tensor", "scalar", "vector", "gpsimd")


def _sim(path, func, inputs, args=None):
    """Simulate as a user's kernel (spilling what does not fit) and estimate on trn1."""
    kernel = load_kernel(str(path), func)
    ins = {k: ShapeDtype(tuple(s), "float32") for k, s in inputs.items()}
    sim = simulate(kernel, {**ins, **(args or {})}, target=TRN1, timing_only=True, time_limit_s=1800)
    return estimate(sim.trace, TRN1), sim


def _per_engine_opcodes(trace):
    """Busy ns per (engine, opcode) of what the model schedules, for the diagnostic table."""
    from axon.targets.trainium.perfmodel import compute_cycles, compiled_away

    trace, skip = compiled_away(trace)
    out: dict[tuple[str, str], float] = {}
    for i, ins in enumerate(trace):
        if ins.engine.value == "dma" or i in skip:
            continue
        ns = compute_cycles(ins, TRN1) / TRN1.clock_ghz(ins.engine)
        k = (ins.engine.value, ins.opcode)
        out[k] = out.get(k, 0.0) + ns
    return out


def run_rows(corpus: Path) -> dict:
    from axon.targets.trainium.runner import InputSpec, run

    rows, order, engines = [], [], []
    for name, ms in TUTORIAL:
        t0 = time.time()
        rep = run(str(REPO / "examples/nki/matmul_tutorial" / f"{name}.py"),
                  {"lhsT": InputSpec((8192, 4096), "bfloat16"), "rhs": InputSpec((8192, 8192), "bfloat16")},
                  target="trn1", timing_only=True)
        rows.append({"row": f"matmul tutorial {name}", "kind": "tutorial", "measured_ms": ms,
                     "model_ms": rep.estimate.latency_ns / 1e6, "busy": rep.estimate.engine_busy_ns,
                     "wall_s": time.time() - t0})
    mamba_ms = {}
    for func, ch, ms in (("mamba_v1", 256, 0.17293), ("mamba_v1", 4096, 2.34), ("mamba_v2", 256, None),
                         ("mamba_v3", 256, None), ("mamba_v2", 2048, None), ("mamba_v3", 2048, None)):
        seq = 512 if ch != 2048 else 2048
        ch = 256 if ch == 2048 else ch
        t0 = time.time()
        est, _ = _sim(corpus / MAMBA, func, {"delta": (1, ch, seq), "u": (1, ch, seq), "A": (ch, 16),
                                              "B": (1, 16, seq), "C": (1, 16, seq)})
        mamba_ms[(func, ch, seq)] = est.latency_ns / 1e6
        if ms is not None:
            rows.append({"row": f"{func} channels {ch}", "kind": "mamba", "measured_ms": ms,
                         "model_ms": est.latency_ns / 1e6, "busy": est.engine_busy_ns,
                         "wall_s": time.time() - t0})
    for seq in (512, 2048):
        v2, v3 = mamba_ms[("mamba_v2", 256, seq)], mamba_ms[("mamba_v3", 256, seq)]
        order.append({"what": f"mamba_v3 < mamba_v2 (256 channels, sequence {seq})",
                      "model": f"{v3 * 1e3:.1f} us vs {v2 * 1e3:.1f} us", "ok": v3 < v2})
    diag = {}
    for name, inputs, args, ms, prof in NKIBENCH:
        t0 = time.time()
        est, sim = _sim(corpus / NKIB / f"{name}_0.py", "kernel", inputs, args)
        rows.append({"row": name, "kind": "nkibench", "measured_ms": ms, "model_ms": est.end_to_end_ns / 1e6,
                     "schedule_ms": est.latency_ns / 1e6, "busy": est.engine_busy_ns, "wall_s": time.time() - t0,
                     "reload_mb": sim.reload_bytes / 1e6, "measured_reload_mb": MEASURED_RELOAD_MB[name]})
        for eng, pct in zip(ENGINES, prof):
            if eng == "tensor":
                continue  # hfu_estimated_percent is a FLOPs utilisation, not active time
            want = pct / 100 * ms * 1e6
            got = est.engine_busy_ns[eng]
            engines.append({"row": name, "engine": eng, "profile_pct": pct, "profile_us": want / 1e3,
                            "model_us": got / 1e3, "compared": pct >= ENGINE_MIN_PCT,
                            "ratio": got / want if want else float("nan")})
        diag[name] = _per_engine_opcodes(sim.trace)
    return {"rows": rows, "order": order, "engines": engines, "diag": diag}


def spearman(a, b) -> float:
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    return float(np.corrcoef(ra, rb)[0, 1])


def render(res: dict, command: str) -> str:
    rows = res["rows"]
    for r in rows:
        r["err"] = r["model_ms"] / r["measured_ms"] - 1
    rho = spearman([r["model_ms"] for r in rows], [r["measured_ms"] for r in rows])
    within = sum(abs(r["err"]) <= ROW_BOUND for r in rows)
    mean_signed = float(np.mean([r["err"] for r in rows]))
    tut = [r for r in rows if r["kind"] == "tutorial"]
    tut_ok = all(abs(r["err"]) <= TUTORIAL_BOUND for r in tut)
    tut_order = [r["row"] for r in sorted(tut, key=lambda r: -r["model_ms"])] == [r["row"] for r in tut]
    from axon.targets.trainium import hardware as hwmod

    nkib = [r for r in rows if r["kind"] == "nkibench"]
    w = [1 / (r["measured_ms"] ** 2) for r in nkib]
    fit_ms = sum(wi * (r["measured_ms"] - r["schedule_ms"]) for wi, r in zip(w, nkib)) / sum(w)

    L = ["# Calibration of the trn1 performance model", "",
         f"Command: `{command}` (the calibration set: ../shared/fidelity.md; the script's docstring",
         "says what runs how). Model latency = schedule + fixed launch cost; measured = whole-NEFF time.", "",
         "| row | measured | model | error | spill reload MB: model / measured |", "|---|---|---|---|---|"]
    for r in rows:
        spill = (f"{r['reload_mb']:.1f} / {r['measured_reload_mb']:.1f}" if "reload_mb" in r else "-")
        L.append(f"| {r['row']} | {r['measured_ms'] * 1e3:.1f} us | {r['model_ms'] * 1e3:.1f} us | "
                 f"{100 * r['err']:+.1f}% | {spill} |")
    L += ["", f"Rows within {int(100 * ROW_BOUND)}%: {within} of {len(rows)}; mean signed error "
          f"{100 * mean_signed:+.1f}%; Spearman {rho:.3f} (target >= {SPEARMAN_MIN}).",
          f"Matmul tutorial: all within {int(100 * TUTORIAL_BOUND)}%: {'yes' if tut_ok else 'NO'}; "
          f"in published order: {'yes' if tut_order else 'NO'}.", "", "Orderings:", ""]
    for o in res["order"]:
        L.append(f"- {o['what']}: model {o['model']}: {'yes' if o['ok'] else 'NO'}")
    L += ["", "## Per-engine busy vs profile (active fraction x measured latency)", "",
          f"Engines below {ENGINE_MIN_PCT:.0f}% active are shown but not compared.", "",
          "| kernel | engine | profile % | profile us | model us | model / profile |", "|---|---|---|---|---|---|"]
    for e in res["engines"]:
        flag = "" if e["compared"] else " (not compared)"
        L.append(f"| {e['row']} | {e['engine']} | {e['profile_pct']:.2f} | {e['profile_us']:.1f} | "
                 f"{e['model_us']:.1f} | {e['ratio']:.2f}{flag} |")
    comp = [e for e in res["engines"] if e["compared"]]
    ok = sum(abs(e["ratio"] - 1) <= ENGINE_BOUND for e in comp)
    L += ["", f"Within {int(100 * ENGINE_BOUND)}%: {ok} of {len(comp)} compared.", "",
          "## Fitted and documented parameters (hardware.py)", "",
          f"Launch cost refitted on this run: {fit_ms * 1e3:.0f} us (hardware.py: "
          f"{TRN1.launch_ns / 1e3:.0f} us).", ""]
    for line in hwmod.CALIBRATION:
        L.append(f"- {line}")
    L += ["", "## Model busy per engine and opcode (diagnostic)", ""]
    for name, d in res["diag"].items():
        top = sorted(d.items(), key=lambda kv: -kv[1])[:8]
        L.append(f"- {name}: " + ", ".join(f"{e}.{op} {ns / 1e3:.0f} us" for (e, op), ns in top))
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, metavar="DIR")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "calibration.md"))
    a = ap.parse_args(argv)
    res = run_rows(Path(a.corpus).resolve())
    text = render(res, COMMAND)
    print(text)
    Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
