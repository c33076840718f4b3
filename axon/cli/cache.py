"""`axon cache list|show|clear|path`: the kernel database (axon/search/database.py)."""
from __future__ import annotations

import json
import time

from axon.errors import InputError
from axon.search.database import KernelDB, default_dir

NAME = "cache"
HELP = "list, show or clear the tuned-kernel database (AXON_CACHE_DIR, default ~/.cache/axon)"


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=("list", "show", "clear", "path"),
                        help="list: stored winners; show KEY: one winner's report and kernel; clear: delete "
                             "the database; path: where it is")
    parser.add_argument("key", nargs="?", help="a winner's key (or a prefix of it), for show")
    parser.add_argument("--json", action="store_true", help="list or show as JSON")


def run(args) -> int:
    db = KernelDB(default_dir())
    if db.root is None:
        raise InputError("AXON_CACHE_DIR is empty: no kernel database is kept")
    if args.action == "path":
        print(db.path)
    elif args.action == "clear":
        n = db.counts()
        db.clear()
        print(f"removed {db.path} ({n['winners']} winner(s), {n['timings']} timing(s))")
    elif args.action == "list":
        rows = db.winners()
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        n = db.counts()
        print(f"{db.path}: {n['winners']} winner(s), {n['timings']} timing(s)")
        for r in rows:
            sizes = ",".join(f"{k}={v}" for k, v in r["sizes"].items())
            stale = "" if r["current"] else "  (another Axon: not served)"
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"]))
            print(f"{r['key']}  {r['target']}  {r['dtype']:<8}  {sizes}  {r['latency_ns'] / 1e3:.1f} us  "
                  f"{when}  {r['benchmark']}{stale}")
    else:
        show(db, args.key, args.json)
    return 0


def show(db: KernelDB, key, as_json: bool) -> None:
    if not key:
        raise InputError("axon cache show needs a winner's key (axon cache list shows them)")
    matches = [r for r in db.winners() if r["key"].startswith(key)]
    if len(matches) != 1:
        raise InputError(f"{len(matches)} stored winners have a key starting {key!r}; axon cache list shows them")
    result, _ = db.get_winner(matches[0]["key"])
    if as_json:
        print(json.dumps({**matches[0], "result": result}, indent=1))
        return
    print(result.get("report", ""))
    print()
    print(result.get("kernel_source", ""))

