"""Index arithmetic as a reader would write it, applied to a kernel's lines once they are printed.

The builder spells every tile address as a sum over all loops that could move it
(`i_rb * 1024 + i_r * 128`), and a loop of one iteration is printed as a binding (`i_rb = 0`) so
the sums stay valid. Here such bindings are substituted and dropped, each subscript bound becomes
one canonical sum (like terms combined, zero terms gone), and a window whose start moves with a
loop is written `nl.ds(start, size)`, the NKI spelling of start:start + size. Only the text
changes: the same elements are addressed, which every candidate's simulation checks.
"""
from __future__ import annotations

import ast
import functools
import re

_FOR = re.compile(r"^\s*for (\w+) in ")
_ASSIGN = re.compile(r"^\s*(\w+) = ")
_OFFSET = re.compile(r"(offset=)([^,)]+)")


def tidy(lines: list[str], constants: dict[int, tuple[str, int]]) -> list[str]:
    """`lines` with the one-iteration loop bindings `constants` (line index -> (var, value))
    substituted into the lines they scope, and every subscript's arithmetic simplified."""
    out: list[str] = []
    scope: list[tuple[int, str, int]] = []  # (indent, var, value) of the bindings in force
    for i, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        scope = [s for s in scope if s[0] <= indent]
        rebound = _FOR.match(line) or _ASSIGN.match(line)
        if rebound:
            scope = [s for s in scope if s[1] != rebound.group(1)]
        if i in constants:
            var, value = constants[i]
            scope.append((indent, var, value))
            continue
        if line.lstrip().startswith("#"):
            out.append(line)
            continue
        out.append(_tidy_line(line, tuple({var: value for _, var, value in scope}.items())))
    return out


@functools.lru_cache(maxsize=1 << 16)  # candidates of one search share most of their lines
def _tidy_line(line: str, values: tuple) -> str:
    """One line with the bindings `values` ((var, value), ...) substituted and simplified."""
    if values:  # outside subscripts too (an affine_select's offset)
        named = dict(values)
        line = _names(tuple(named)).sub(lambda m: str(named[m.group(1)]), line)
    if "offset=" in line:
        line = _OFFSET.sub(lambda m: m.group(1) + _expr(m.group(2)), line)
    return simplify_subscripts(line)


@functools.lru_cache(maxsize=1 << 10)
def _names(names: tuple) -> re.Pattern:
    return re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")


@functools.lru_cache(maxsize=1 << 16)  # candidates of one search share most of their lines
def simplify_subscripts(line: str) -> str:
    """Every `name[...]` subscript of `line` with its bounds simplified."""
    pieces, i = [], 0
    while True:
        j = _next_subscript(line, i)
        if j < 0:
            pieces.append(line[i:])
            return "".join(pieces)
        end = _closing(line, j)
        if end < 0:
            pieces.append(line[i:])
            return "".join(pieces)
        inner = simplify_subscripts(line[j + 1:end])
        pieces.append(line[i:j + 1] + ", ".join(_axis(a) for a in _split(inner, ",")) + "]")
        i = end + 1


def _next_subscript(line: str, start: int) -> int:
    """The position of the next `[` that subscripts a name, a call or a subscript (not a list)."""
    for m in re.finditer(r"\[", line[start:]):
        k = start + m.start()
        if k and (line[k - 1].isalnum() or line[k - 1] in "_)]"):
            return k
    return -1


def _closing(line: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(line)):
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(line[k], 0)
        if depth == 0:
            return k
    return -1


def _split(text: str, sep: str) -> list[str]:
    """`text` cut at the `sep`s outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(ch, 0)
        if ch == sep and depth == 0:
            parts.append(text[start:k].strip())
            start = k + 1
    parts.append(text[start:].strip())
    return parts


def _axis(text: str) -> str:
    bounds = _split(text, ":")
    if len(bounds) == 1:
        return _expr(text)
    if len(bounds) != 2:
        return ":".join(_expr(b) for b in bounds)
    start, stop = (_linear(b) for b in bounds)
    if start is None or stop is None:
        return ":".join(_expr(b) for b in bounds)
    size = _difference(stop, start)
    if size is not None and set(start) - {1}:
        return f"nl.ds({_print(start)}, {size})"
    return f"{_print(start)}:{_print(stop)}"


@functools.lru_cache(maxsize=1 << 16)
def _expr(text: str) -> str:
    terms = _linear(text) if text else None
    return text if terms is None else _print(terms)


def _linear(text: str) -> dict | None:
    """{name: coefficient, 1: constant} of an integer-linear expression, or None."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    terms = _terms(tree)
    return None if terms is None else {k: v for k, v in terms.items() if v or k == 1}


def _terms(node) -> dict | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return {1: node.value}
    if isinstance(node, ast.Name):
        return {node.id: 1}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        t = _terms(node.operand)
        return None if t is None else {k: -v for k, v in t.items()}
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        a, b = _terms(node.left), _terms(node.right)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(node.op, ast.Add) else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        a, b = _terms(node.left), _terms(node.right)
        if a is None or b is None:
            return None
        if set(a) <= {1}:
            a, b = b, a
        if not set(b) <= {1}:
            return None  # a product of two loop variables is not an address the builder makes
        return {k: v * b.get(1, 0) for k, v in a.items()}
    return None


def _difference(stop: dict, start: dict) -> int | None:
    keys = set(stop) | set(start)
    diff = {k: stop.get(k, 0) - start.get(k, 0) for k in keys}
    return diff.get(1, 0) if all(v == 0 for k, v in diff.items() if k != 1) else None


def _print(terms: dict) -> str:
    parts = []
    for k, v in terms.items():
        if k == 1 or v == 0:
            continue
        term = k if abs(v) == 1 else f"{k} * {abs(v)}"
        parts.append((v < 0, term))
    const = terms.get(1, 0)
    if const:
        parts.append((const < 0, str(abs(const))))
    if not parts:
        return "0"
    text = ("-" if parts[0][0] else "") + parts[0][1]
    for negative, term in parts[1:]:
        text += f" {'-' if negative else '+'} {term}"
    return text
