"""The kernel database: candidate timings and tuned winners, in one SQLite file.

`AXON_CACHE_DIR` (default ~/.cache/axon; empty: no database) holds `kernels.sqlite`. It runs in
WAL mode with a busy timeout, so concurrent optimize runs (several processes, a benchmark beside
a user) read while one writes; each write is one transaction, so a process killed in the middle
of one leaves the database as the last commit left it. Two tables:

- `timings(key, value)`: a candidate's timing-only latency, keyed by what determines it (its
  source, target, the target's model fingerprint, the input shapes: search.select.timing_key);
  a value is validated when read and a bad one is a miss.
- `winners(key, ...)`: optimize's result for a case, keyed by the program's canonical text, the
  sizes, dtype, target, the search options and `code_fingerprint()` (every source file of Axon:
  search, simulator and model), with the kernel, its report and its Perfetto trace, so a stored
  case returns without searching and a changed Axon never serves an old winner.

`axon cache list|show|clear|path` reads and clears it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import time
import zlib
from pathlib import Path
from typing import Optional

from axon.errors import InputError

FILE = "kernels.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS timings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS winners (
    key TEXT PRIMARY KEY, program TEXT NOT NULL, sizes TEXT NOT NULL, dtype TEXT NOT NULL,
    target TEXT NOT NULL, fingerprint TEXT NOT NULL, result TEXT NOT NULL, trace BLOB,
    created REAL NOT NULL);
"""
BUSY_TIMEOUT_S = 60.0  # a writer waits this long for another one before giving up


@functools.cache
def code_fingerprint() -> str:
    """A hash of every source file of the axon package: a stored winner is Axon's answer only for
    the code that found it."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def default_dir() -> Optional[Path]:
    root = os.environ.get("AXON_CACHE_DIR")
    if root == "":
        return None
    return Path(root) if root else Path.home() / ".cache" / "axon"


class KernelDB:
    """Timings and winners under `root` (a directory; None: nothing is stored)."""

    def __init__(self, root: Optional[Path]):
        self.root = root
        self._conn: Optional[sqlite3.Connection] = None
        self._pid = 0
        if root is None:
            return
        try:
            root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise InputError(f"the result cache {root} is not a directory (AXON_CACHE_DIR; empty to "
                             "turn the cache off)") from None
        except OSError as err:
            raise InputError(f"cannot create the result cache {root}: {err.strerror} (AXON_CACHE_DIR; "
                             "empty to turn the cache off)") from None

    @property
    def path(self) -> Optional[Path]:
        return None if self.root is None else self.root / FILE

    def _db(self) -> sqlite3.Connection:
        # one connection per process: a forked child (the simulation sandbox) opens its own
        if self._conn is None or self._pid != os.getpid():
            self._conn, self._pid = self._open(), os.getpid()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        # Two processes creating the file at once: switching a new database to WAL answers "locked"
        # at once, without the busy timeout (SQLite sees a possible deadlock), so it is retried.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            conn = None
            try:
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(SCHEMA)
                return conn
            except sqlite3.OperationalError as err:
                if conn is not None:
                    conn.close()
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise self._unusable(err) from None
                time.sleep(0.01)
            except sqlite3.DatabaseError as err:
                raise self._unusable(err) from None

    def _unusable(self, err) -> InputError:
        return InputError(f"the kernel database {self.path} cannot be used: {err} "
                          "(`axon cache clear` starts a new one)")

    @staticmethod
    def key(*parts: str) -> str:
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]

    # -- timings ---------------------------------------------------------------------------
    def get(self, key: str) -> Optional[dict]:
        """A stored timing (as written by `put`; the caller validates it), or None."""
        if self.root is None:
            return None
        row = self._db().execute("SELECT value FROM timings WHERE key = ?", (key,)).fetchone()
        try:
            return json.loads(row[0]) if row else None
        except (TypeError, ValueError):
            return None

    def put(self, key: str, value: dict) -> None:
        if self.root is not None:
            self._db().execute("INSERT OR REPLACE INTO timings VALUES (?, ?)", (key, json.dumps(value)))

    # -- winners ---------------------------------------------------------------------------
    def get_winner(self, key: str) -> Optional[tuple[dict, Optional[bytes]]]:
        """(the stored result, the Perfetto trace's bytes or None), or None."""
        if self.root is None:
            return None
        row = self._db().execute("SELECT result, trace FROM winners WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            result = json.loads(row[0])
            trace = zlib.decompress(row[1]) if row[1] is not None else None
        except (TypeError, ValueError, zlib.error):
            return None
        return (result, trace) if isinstance(result, dict) else None

    def put_winner(self, key: str, program: str, sizes: dict, dtype: str, target: str, result: dict,
                   trace: Optional[bytes] = None) -> None:
        if self.root is None:
            return
        blob = zlib.compress(trace) if trace is not None else None
        self._db().execute("INSERT OR REPLACE INTO winners VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (key, program, json.dumps(sizes, sort_keys=True), dtype, target, code_fingerprint(),
                            json.dumps(result), blob, time.time()))

    def winners(self) -> list[dict]:
        """One line's worth per stored winner, newest first."""
        if self.root is None or not self.path.exists():
            return []
        rows = self._db().execute("SELECT key, program, sizes, dtype, target, fingerprint, result, created "
                                  "FROM winners ORDER BY created DESC").fetchall()
        out = []
        for key, program, sizes, dtype, target, fp, result, created in rows:
            try:
                r = json.loads(result)
            except ValueError:
                r = {}
            out.append({"key": key, "program": program, "sizes": json.loads(sizes), "dtype": dtype,
                        "target": target, "fingerprint": fp, "current": fp == code_fingerprint(),
                        "benchmark": r.get("benchmark"), "latency_ns": r.get("latency_ns"), "created": created})
        return out

    def counts(self) -> dict:
        if self.root is None or not self.path.exists():
            return {"timings": 0, "winners": 0}
        db = self._db()
        return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("timings", "winners")}

    def clear(self) -> None:
        """Remove the database (and its WAL files)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self.root is None:
            return
        for suffix in ("", "-wal", "-shm"):
            p = self.root / (FILE + suffix)
            if p.exists():
                p.unlink()
