"""Loading what a user names on the command line: `FILE.py:NAME` or a benchmark name.

A user's file is imported once per process (registered in sys.modules, so dataclasses and
pickling inside it work) and every failure is one InputError line naming the file.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Optional

from axon.errors import AxonError, InputError
from axon.frontend.program import Program


def load_from_file(path: str, name: str, what: str = "object"):
    """The attribute `name` of the Python file at `path`."""
    if not os.path.isfile(path):
        raise InputError(f"no such file: {path}")
    module_name = "_axon_user_" + "".join(ch if ch.isalnum() else "_" for ch in os.path.abspath(path))
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise InputError(f"cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as err:  # a user's file: report in one line, don't crash
            del sys.modules[module_name]
            if isinstance(err, AxonError):
                raise
            raise InputError(f"cannot import {path}{_line_in(err, path)}: {type(err).__name__}: {err}") from None
    if not hasattr(module, name):
        raise InputError(f"{path} has no {what} {name!r}")
    return getattr(module, name)


def _line_in(err: BaseException, path: str) -> str:
    """':LINE' of the innermost frame of `err`'s traceback in the file `path` (where the user's
    code failed), or ''."""
    line, tb = "", err.__traceback__
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(path):
            line = f":{tb.tb_lineno}"
        tb = tb.tb_next
    return line


def load_program(spec: str) -> tuple[Program, Optional[object]]:
    """A program from `FILE.py:NAME`, or a benchmark name (then also its Benchmark record)."""
    path, sep, name = spec.rpartition(":")
    if not sep:
        from axon.suite import get

        bench = get(spec)
        return bench.program, bench
    program = load_from_file(path, name, "program")
    if not isinstance(program, Program):
        raise InputError(f"{path}:{name} is not an @axon.program (it is a {type(program).__name__})")
    return program, None
