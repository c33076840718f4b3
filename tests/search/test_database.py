"""The kernel database (search/database.py): a stored case returns at once with the same kernel,
a changed option searches again, bad rows are misses, concurrent writers lose nothing and a
writer killed mid-write leaves a consistent database."""
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

import axon
from axon.search.database import KernelDB


def test_timings_and_winners_round_trip(tmp_path):
    db = KernelDB(tmp_path)
    k = db.key("a", "b")
    assert db.get(k) is None and db.get_winner(k) is None
    db.put(k, {"latency_ns": 5.0, "error": ""})
    db.put_winner(k, "inputs: x(m, n)", {"m": 1}, "float32", "trn2", {"benchmark": "f", "latency_ns": 5.0}, b"{}")
    assert db.get(k) == {"latency_ns": 5.0, "error": ""}
    assert db.get_winner(k) == ({"benchmark": "f", "latency_ns": 5.0}, b"{}")
    assert db.counts() == {"timings": 1, "winners": 1}
    (row,) = db.winners()
    assert row["benchmark"] == "f" and row["current"] and row["sizes"] == {"m": 1}
    db.clear()
    assert not db.path.exists() and KernelDB(tmp_path).counts() == {"timings": 0, "winners": 0}


def test_a_stored_case_returns_the_same_kernel_without_searching(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path / "cache"))
    first = axon.optimize("rmsnorm_matmul", "small", budget_s=5.0, out_dir=tmp_path / "a")
    t = time.perf_counter()
    said = []
    again = axon.optimize("rmsnorm_matmul", "small", budget_s=5.0, out_dir=tmp_path / "b", progress=said.append)
    assert time.perf_counter() - t < 1.0 and any("stored result" in s for s in said)
    assert again.kernel_source == first.kernel_source and again.latency_ns == first.latency_ns
    assert again.checked == json.loads(json.dumps(first.checked)) and again.rewrites == first.rewrites
    assert (tmp_path / "b" / "rmsnorm_matmul_trn2.trace.json").read_bytes() == \
        (tmp_path / "a" / "rmsnorm_matmul_trn2.trace.json").read_bytes()
    said.clear()
    axon.optimize("rmsnorm_matmul", "small", budget_s=30.0, progress=said.append)  # another option: a search
    assert not any("stored result" in s for s in said)


def _writer(root, n, tag):
    db = KernelDB(root)
    for i in range(n):
        db.put(db.key(tag, str(i)), {"latency_ns": float(i + 1), "error": ""})


def test_concurrent_writers_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(tmp_path, 150, f"w{j}")) for j in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = KernelDB(tmp_path)
    assert db.counts()["timings"] == 600
    assert all(db.get(db.key(f"w{j}", str(i)))["latency_ns"] == i + 1 for j in range(4) for i in range(150))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_processes_creating_the_database_at_the_same_moment_all_get_it(tmp_path):
    # a new file switched to WAL by two processes at once answers "locked" without waiting
    for trial in range(100):
        root = tmp_path / str(trial)
        root.mkdir()
        pids = []
        for j in range(2):
            pid = os.fork()
            if pid == 0:
                try:
                    db = KernelDB(root)
                    db.put(f"w{j}", {"latency_ns": 1.0})
                    db.get("w0")
                    os._exit(0)
                except BaseException:  # noqa: BLE001
                    os._exit(1)
            pids.append(pid)
        assert [os.waitpid(pid, 0)[1] for pid in pids] == [0, 0]
        assert KernelDB(root).counts()["timings"] == 2


KILLED_WRITER = """
import sys
from pathlib import Path
from axon.search.database import KernelDB
db = KernelDB(Path(sys.argv[1]))
i = 0
while True:
    db.put(db.key(str(i)), {"latency_ns": float(i + 1), "error": ""})
    if i == 50:
        print("ready", flush=True)
    i += 1
"""


def test_a_writer_killed_mid_write_leaves_a_consistent_database(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    conn = sqlite3.connect(tmp_path / "kernels.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    db = KernelDB(tmp_path)
    n = db.counts()["timings"]
    assert n > 50
    assert all(db.get(db.key(str(i))) == {"latency_ns": float(i + 1), "error": ""} for i in range(n))
    db.put(db.key("after"), {"latency_ns": 1.0, "error": ""})  # and it takes writes again
    assert db.get(db.key("after"))


def test_the_cache_command(tmp_path, monkeypatch):
    env = {**os.environ, "AXON_CACHE_DIR": str(tmp_path)}
    run = lambda *a: subprocess.run([sys.executable, "-m", "axon", "cache", *a], capture_output=True, text=True,
                                    env=env)
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path))
    axon.optimize("relu", "small")
    assert run("path").stdout.strip() == str(tmp_path / "kernels.sqlite")
    listed = run("list", "--json")
    (row,) = json.loads(listed.stdout)
    assert row["benchmark"] == "relu" and row["current"]
    shown = run("show", row["key"][:6])
    assert shown.returncode == 0 and "relu on trn2" in shown.stdout and "@nki.jit" in shown.stdout
    bad = run("show", "nothing")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "axon cache list" in bad.stderr
    assert "1 winner(s)" in run("clear").stdout
    assert json.loads(run("list", "--json").stdout) == []


def test_an_unreadable_database_is_one_clear_error(tmp_path):
    (tmp_path / "kernels.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(axon.errors.InputError, match="axon cache clear"):
        KernelDB(tmp_path).get("x")


def test_selection_does_not_depend_on_the_clock_or_the_cache(tmp_path, monkeypatch):
    import itertools

    import importlib

    from axon.search.select import ResultCache

    opt = importlib.import_module("axon.search.optimize")  # the module (axon.search exports the function)
    first = opt.optimize("rmsnorm_matmul", "small", budget_s=5.0, cache=ResultCache(tmp_path / "a"))
    # ranking on a machine a thousand times slower (each clock reading 1000 s after the last)...
    real_rank, real_clock, ticks = opt.rank, time.perf_counter, itertools.count(0, 1000.0)

    def slow_rank(*a, **k):
        monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))
        try:
            return real_rank(*a, **k)
        finally:
            monkeypatch.setattr(time, "perf_counter", real_clock)

    monkeypatch.setattr(opt, "rank", slow_rank)
    slow = opt.optimize("rmsnorm_matmul", "small", budget_s=5.0, cache=ResultCache(tmp_path / "b"))
    monkeypatch.setattr(opt, "rank", real_rank)
    assert slow.kernel_source == first.kernel_source
    assert slow.candidates["evaluated"] == first.candidates["evaluated"]
    # ...and a warm timing cache without the stored winner rank the same candidates
    db = sqlite3.connect(tmp_path / "a" / "kernels.sqlite")
    with db:
        db.execute("DELETE FROM winners")
    db.close()
    warm = opt.optimize("rmsnorm_matmul", "small", budget_s=5.0, cache=ResultCache(tmp_path / "a"))
    assert warm.kernel_source == first.kernel_source and warm.candidates == first.candidates
