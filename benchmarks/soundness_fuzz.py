"""The soundness fuzzer at scale: random programs and random rewrites of them (benchmarks/fuzzgen.py),
every verdict judged by evaluating both programs in NumPy at many sizes.

    .venv/bin/python benchmarks/soundness_fuzz.py                      # 10,000 examples, 2 workers
    .venv/bin/python benchmarks/soundness_fuzz.py --examples 2000 --seed 7 --time-limit 300

Each worker runs its own Hypothesis generation loop (seeded: --seed and the worker's number; no
shrinking, no example database), verifies every pair it has not seen with one `Verifier`, and
cross-checks each PROVED verdict at ~20-30 size bindings (every dimension at 1 and 2 among them)
on random standard-normal inputs. Counts are over distinct pairs (Hypothesis repeats some
examples); the report lists every proved-but-false pair (the programs, the sizes where they
differ, the verdict's reason), every refuted sound pair whose counterexample NumPy does not
show, and every verifier crash, one per distinct cause with how often it was seen. Output:
`benchmarks/results/soundness_fuzz.md` (with the command that made it).
"""
from __future__ import annotations

import argparse
import collections
import faulthandler
import multiprocessing as mp
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import fuzzgen  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from axon.verification import Verifier  # noqa: E402

PROGRESS_EVERY = 100
EXAMPLE_LIMIT_S = 20  # one verifier call running longer is reported as a crash (a hang); z3 itself stops at 2 s a query


class StopFuzz(Exception):
    """The worker's time is up."""


def summary(outcome) -> dict:
    """What the parent keeps of one distinct pair (small, picklable)."""
    keep = bool(outcome.severe or outcome.false_refutation or outcome.status in ("crash", "timeout"))
    return {"key": outcome.pair.key, "kind": outcome.pair.kind, "rules": outcome.pair.rules,
            "status": outcome.status, "reason": outcome.reason if keep or outcome.status != "proved" else "",
            "severe": outcome.severe, "false_refutation": outcome.false_refutation,
            "sources": (outcome.pair.source_a, outcome.pair.source_b) if keep else None,
            "assumptions": outcome.assumptions, "seconds": outcome.seconds,
            "narrowed": outcome.status == "proved" and "with" in outcome.reason.split(",")[0],
            "uncovered": outcome.check.skipped_uncovered if outcome.check else 0,
            "checked": outcome.check.equal if outcome.check else 0}


def worker(index: int, examples: int, base_seed: int, deadline: float, queue) -> None:
    verifier = Verifier()
    seen: set[str] = set()
    generated = [0]
    outcomes: list[dict] = []
    fuzzer_errors = fuzzgen.GENERATOR_ERRORS

    @seed(base_seed * 1000 + index)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(fuzzgen.pairs())
    def one(pair):
        if time.time() > deadline:
            raise StopFuzz
        generated[0] += 1
        if pair.key not in seen:
            seen.add(pair.key)
            faulthandler.dump_traceback_later(EXAMPLE_LIMIT_S * 3)  # a hang outside the verifier shows where
            try:
                out = fuzzgen.run_pair(pair, verifier, seed=base_seed, limit_s=EXAMPLE_LIMIT_S)
                outcomes.append(summary(out))
            except Exception as err:  # a bug of the fuzzer's own oracle: reported, the run goes on
                fuzzer_errors.append(f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-6)}\n{pair!r}")
            faulthandler.cancel_dump_traceback_later()
        if generated[0] % PROGRESS_EVERY == 0:
            queue.put(("progress", index, generated[0], outcomes[:]))
            outcomes.clear()

    try:
        one()
    except StopFuzz:
        pass
    except BaseException as err:  # noqa: BLE001 - Hypothesis wraps StopFuzz in a group sometimes
        if "StopFuzz" not in repr(err):
            queue.put(("error", index, f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-8)}"))
    for text in fuzzer_errors:
        queue.put(("error", index, "fuzzer: " + text))
    queue.put(("done", index, generated[0], outcomes))


def signature(row: dict) -> str:
    """One distinct cause: the rules, and the verdict or evidence with numbers and names removed."""
    text = row["severe"] or row["false_refutation"] or (row["reason"].splitlines() or [""])[0]
    text = re.sub(r"np\.float64\(([^)]*)\)", r"\1", text)
    text = re.sub(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?", "#", text)
    text = re.sub(r"\b[mnkh]\b|rows|cols|depth|half", "D", text)
    if row["status"] in ("crash", "timeout"):
        lines = [ln for ln in row["reason"].splitlines() if ln.strip().startswith("File ")]
        return row["status"] + ": " + (row["reason"].splitlines() or [""])[0] + (" @ " + lines[-1].strip() if lines else "")
    return f"{row['status']} [{row['kind']}: {', '.join(r for r in row['rules'] if r != 'rename-dims')}] {text}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=10_000, help="examples to generate in all (default 10000)")
    ap.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    ap.add_argument("--time-limit", type=float, default=1500.0, help="seconds before workers stop (default 1500)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "soundness_fuzz.md"))
    args = ap.parse_args(argv)

    start = time.time()
    deadline = start + args.time_limit
    per_worker = [args.examples // args.workers + (i < args.examples % args.workers) for i in range(args.workers)]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(i, n, args.seed, deadline, queue)) for i, n in enumerate(per_worker)]
    for p in procs:
        p.start()
    generated = [0] * args.workers
    rows: dict[str, dict] = {}
    errors = []
    done = 0
    last_print = 0.0
    while done < len(procs):
        msg = queue.get()
        if msg[0] == "error":
            errors.append(msg[2])
            print(f"worker {msg[1]}: {msg[2].splitlines()[0]}", file=sys.stderr)
            continue
        kind, index, count, batch = msg
        generated[index] = count
        for row in batch:
            rows.setdefault(row["key"], row)
        if kind == "done":
            done += 1
        now = time.time()
        if now - last_print > 5 or kind == "done":
            last_print = now
            c = collections.Counter(r["status"] for r in rows.values())
            bad = sum(1 for r in rows.values() if r["severe"])
            print(f"[{now - start:6.0f} s] {sum(generated)}/{args.examples} generated, {len(rows)} distinct: "
                  f"proved {c['proved']}, refuted {c['refuted']}, unknown {c['unknown']}, crash {c['crash']}, "
                  f"proved-but-false {bad}", flush=True)
    for p in procs:
        p.join()
    elapsed = time.time() - start
    command = "python benchmarks/soundness_fuzz.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = report(rows, sum(generated), args, elapsed, command.strip(), errors)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    bad = sum(1 for r in rows.values() if r["severe"])
    print(f"wrote {args.out}: {sum(generated)} generated, {len(rows)} distinct, {bad} proved-but-false, "
          f"{elapsed:.0f} s")
    return 1 if bad else 0


def report(rows: dict, generated: int, args, elapsed: float, command: str, errors) -> str:
    rows_l = list(rows.values())
    kinds = fuzzgen.KINDS
    statuses = ("proved", "refuted", "unknown", "timeout", "crash", "invalid")
    table = collections.Counter((r["kind"], r["status"]) for r in rows_l)
    severe = [r for r in rows_l if r["severe"]]
    false_ref = [r for r in rows_l if r["false_refutation"]]
    crashes = [r for r in rows_l if r["status"] in ("crash", "timeout")]
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "axon"], capture_output=True,
                               text=True).stdout.strip()
    except OSError:
        commit, dirty = "?", ""
    lines = [
        "# Soundness fuzzer",
        "",
        f"Command: `{command}` ({args.workers} workers, seed {args.seed}, time limit {args.time_limit:.0f} s)",
        "",
        f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {elapsed:.0f} s wall clock, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; axon at {commit}"
        + (" with uncommitted changes under axon/" if dirty else "") + ".",
        "",
        "Random programs and random rewrites of them (`benchmarks/fuzzgen.py`); every PROVED verdict is",
        "cross-checked by evaluating both programs in NumPy (float64, each operator's own `numpy` meaning, as",
        "`Program.__call__` does) at ~20-30 size bindings (each dimension at 1 and 2 among them), skipping the",
        "bindings the verdict does not cover (`verdict.covers`) and those where a program's own shapes or",
        "preconditions are invalid. A *proved-but-false* is a proved pair whose outputs differ at a covered size",
        "(shape, NaN/inf pattern, or a finite difference beyond 1e-6 relative plus 1e-9 times a forward",
        "rounding-error bound).",
        "",
        f"**{generated} examples generated, {len(rows_l)} distinct pairs; {len(severe)} proved-but-false.**",
        "",
        "| kind | distinct | proved | refuted | unknown | timeout | crash | invalid | proved fraction |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        n = sum(table[(kind, s)] for s in statuses)
        valid = n - table[(kind, "invalid")]
        frac = f"{table[(kind, 'proved')] / valid:.1%}" if valid else "-"
        lines.append(f"| {kind} | {n} | " + " | ".join(str(table[(kind, s)]) for s in statuses) + f" | {frac} |")
    total = collections.Counter(r["status"] for r in rows_l)
    lines.append(f"| all | {len(rows_l)} | " + " | ".join(str(total[s]) for s in statuses) + " | |")
    narrowed = sum(1 for r in rows_l if r["narrowed"])
    checked = sum(r["checked"] for r in rows_l)
    uncovered = sum(r["uncovered"] for r in rows_l)
    secs = sorted(r["seconds"] for r in rows_l)
    lines += [
        "",
        "`sound`: identities true at every size (the verifier should prove them); `edge`: true only at some",
        "sizes or under assumptions that fail at some sizes (a proof must narrow its claim or state them);",
        "`mutation`: usually unsound changes (some happen to be equivalent, e.g. a swap of equal-size axes",
        "of a symmetric value; the oracle judges each proof, whatever its kind).",
        "",
        f"Proved verdicts with a narrowed claim (\"for all sizes with ...\"): {narrowed}. Size bindings where",
        f"proved pairs were compared and agreed: {checked}; bindings skipped as not covered: {uncovered}.",
        f"Verifier time per distinct pair: median {secs[len(secs) // 2] * 1000:.0f} ms, max {secs[-1]:.1f} s."
        if secs else "",
        "",
        "## Per rule (distinct pairs whose last rewrite is this rule)",
        "",
        "| rule | kind | pairs | proved | refuted | unknown |",
        "|---|---|---|---|---|---|",
    ]
    per_rule = collections.defaultdict(collections.Counter)
    for r in rows_l:
        rules = [x for x in r["rules"] if x != "rename-dims"] or ["none"]
        per_rule[(rules[-1], r["kind"])][r["status"]] += 1
    for (name, kind), c in sorted(per_rule.items(), key=lambda t: (fuzzgen.KINDS.index(t[0][1]), t[0][0])):
        lines.append(f"| {name} | {kind} | {sum(c.values())} | {c['proved']} | {c['refuted']} | {c['unknown']} |")
    renamed = [r for r in rows_l if "rename-dims" in r["rules"]]
    if renamed:
        c = collections.Counter(r["status"] for r in renamed)
        lines += ["", f"Pairs whose second program renames its dimensions (m -> rows, ...; inputs match by position): "
                      f"{len(renamed)}, proved {c['proved']}, refuted {c['refuted']}, unknown {c['unknown']}."]

    def section(title, items, what):
        out = ["", f"## {title}: {len(items)}", ""]
        groups = collections.defaultdict(list)
        for r in items:
            groups[signature(r)].append(r)
        for sig, group in sorted(groups.items(), key=lambda t: -len(t[1])):
            r = min(group, key=lambda r: len(r["sources"][0]) + len(r["sources"][1]))
            out += [f"### {len(group)} x {sig[:160]}", "", f"rules: {', '.join(r['rules'])}; verdict: {r['status']}: "
                    f"{(r['reason'].splitlines() or [''])[0]}", ""]
            if r[what]:
                out += [f"{what.replace('_', ' ')}: {r[what]}", ""]
            out += ["```python", r["sources"][0].rstrip(), "", r["sources"][1].rstrip(), "```"]
            if r["status"] == "crash":
                out += ["", "```", r["reason"].rstrip()[-1500:], "```"]
        return out

    unproved = [r for r in rows_l if r["kind"] == "sound" and r["status"] in ("refuted", "unknown")]
    lines += ["", f"## Sound pairs not proved: {len(unproved)}", "",
              "Completeness, not soundness: why identities true at every size were not proved (grouped).", "",
              "| pairs | status | rules | reason (first seen) |", "|---|---|---|---|"]
    groups = collections.defaultdict(list)
    for r in unproved:
        groups[signature(r)].append(r)
    for sig, group in sorted(groups.items(), key=lambda t: -len(t[1]))[:40]:
        r = group[0]
        reason = (r["reason"].splitlines() or [""])[0].replace("|", "/")[:220]
        lines.append(f"| {len(group)} | {r['status']} | {', '.join(r['rules'])} | {reason} |")
    lines += section("Proved but false", severe, "severe")
    lines += section("Sound pairs refuted with a counterexample NumPy does not show", false_ref, "false_refutation")
    lines += section(f"Verifier crashes (an exception instead of a verdict) and timeouts (one check over "
                     f"{EXAMPLE_LIMIT_S} s)", crashes, "severe")
    if errors:
        lines += ["", f"## Errors of the fuzzer itself (generator or oracle bugs, not verdicts): {len(errors)}", ""]
        for e in errors[:10]:
            lines += ["```", e.rstrip()[-2500:], "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
