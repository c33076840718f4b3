"""Symbolic sizes: polynomials over named dimensions with rational coefficients.

A dimension of a tensor is a `Size`: `m`, `k/2`, `m*k`, `1`, ... Sizes are kept in a canonical form
(a sorted tuple of (monomial, coefficient) terms), so two sizes are equal exactly when their
polynomials are equal; this is what shape checking and broadcasting compare. A fractional
coefficient (as in `d/2` from a stride-2 slice) is only valid under a divisibility precondition,
which the operator that created it records on the program as a `SizeFact` (so does a slice whose
constant stop needs its symbolic axis to be long enough).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from fractions import Fraction
from math import gcd
from typing import Callable, ClassVar, Mapping, Optional, Union

from axon.errors import UnsupportedError

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Monomial = tuple[str, ...]  # sorted dimension names, repeated for powers; () is the constant term


class Size:
    __slots__ = ("terms", "_hash")

    # Set while a program's own Python code runs (frontend.program): there a comparison or truth
    # test of a symbolic size (`if x.shape[1] == 3:`) would pick one branch for every size.
    in_program: ClassVar[bool] = False
    # A size meeting a float or a tensor there (`d ** -0.5`, `n * 0.5`) is a number of the program
    # being traced: the frontend sets this to lift a size into a rank-0 constant tensor.
    as_number: ClassVar[Optional[Callable[["Size"], object]]] = None

    def __init__(self, terms: Mapping[Monomial, Fraction]):
        canon = tuple(sorted((m, Fraction(c)) for m, c in terms.items() if c != 0))
        object.__setattr__(self, "terms", canon)
        object.__setattr__(self, "_hash", hash(canon))

    def __setattr__(self, name, value):
        raise AttributeError("Size is immutable")

    # -- construction ---------------------------------------------------------------------
    @staticmethod
    def of(value: "SizeLike") -> "Size":
        if isinstance(value, Size):
            return value
        if isinstance(value, str):
            if not value.isidentifier():
                raise ValueError(f"dimension name {value!r} is not an identifier")
            return Size({(value,): Fraction(1)})
        if isinstance(value, (int, Fraction)) and not isinstance(value, bool):
            return Size({(): Fraction(value)})
        raise TypeError(f"not a size: {value!r} (a size combines with integers and sizes; for a number "
                        f"such as n * 0.5, scale a tensor by the size instead: x * n * 0.5)")

    # -- queries --------------------------------------------------------------------------
    @property
    def is_constant(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def constant(self) -> Fraction:
        return dict(self.terms).get((), Fraction(0))

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for m, _ in self.terms for s in m)

    def as_int(self) -> int | None:
        """The integer value of a constant size, else None."""
        if self.is_constant and self.constant.denominator == 1:
            return int(self.constant)
        return None

    def as_symbol(self) -> str | None:
        """The one dimension name a size is (`kv`), else None (`2*h`, `m*k`, 8)."""
        if len(self.terms) == 1 and len(self.terms[0][0]) == 1 and self.terms[0][1] == 1:
            return self.terms[0][0][0]
        return None

    def evaluate(self, binding: Mapping[str, int]) -> Fraction:
        return Fraction(self._value(binding))

    def _value(self, binding: Mapping[str, int]):
        """The size at `binding`: an int where every coefficient is one (the usual case: Fraction
        arithmetic made tiling's size lookups a sixth of candidate emission), else a Fraction."""
        total = 0
        for monomial, coeff in self.terms:
            value = coeff.numerator if coeff.denominator == 1 else coeff
            for name in monomial:
                value *= binding[name]
            total += value
        return total

    def bind(self, values: Mapping[str, int]) -> "Size":
        """The size with the dimensions in `values` replaced by their numbers (the others stay)."""
        out: dict[Monomial, Fraction] = {}
        for monomial, coeff in self.terms:
            for name in monomial:
                if name in values:
                    coeff *= values[name]
            rest = tuple(n for n in monomial if n not in values)
            out[rest] = out.get(rest, Fraction(0)) + coeff
        return Size(out)

    def evaluate_int(self, binding: Mapping[str, int]) -> int:
        value = self._value(binding)
        if type(value) is int:
            return value
        if value.denominator != 1:
            raise ValueError(f"size {self} is not an integer when {dict(binding)}")
        return int(value)

    # -- arithmetic -----------------------------------------------------------------------
    def _number(self, op, other, reverse: bool = False):
        """`self op other` where other is no size (a float, a tensor): the size as a number of the
        program being traced; NotImplemented for a tensor outside one (its own operator decides)."""
        number = Size.as_number(self) if Size.as_number is not None else None
        if number is not None:
            return op(other, number) if reverse else op(number, other)
        if isinstance(other, float):
            Size.of(other)  # the error that names the way to write it
        return NotImplemented

    def __add__(self, other: "SizeLike") -> "Size":
        if not _size_like(other):
            return self._number(lambda a, b: a + b, other)
        out = dict(self.terms)
        for m, c in Size.of(other).terms:
            out[m] = out.get(m, Fraction(0)) + c
        return Size(out)

    __radd__ = __add__

    def __neg__(self) -> "Size":
        return Size({m: -c for m, c in self.terms})

    def __sub__(self, other: "SizeLike") -> "Size":
        if not _size_like(other):
            return self._number(lambda a, b: a - b, other)
        return self + (-Size.of(other))

    def __rsub__(self, other: "SizeLike") -> "Size":
        if not _size_like(other):
            return self._number(lambda a, b: a - b, other, reverse=True)
        return Size.of(other) - self

    def __truediv__(self, other):
        return self._number(lambda a, b: a / b, other)

    def __rtruediv__(self, other):
        return self._number(lambda a, b: a / b, other, reverse=True)

    def __pow__(self, other):
        return self._number(lambda a, b: a ** b, other)

    def __float__(self):
        raise TypeError(f"the symbolic size {self} has no float value: write functions of sizes with axon "
                        f"(axon.sqrt(n), axon.rsqrt(n), n ** -0.5 inside a program)")

    def __mul__(self, other: "SizeLike") -> "Size":
        if not _size_like(other):
            return self._number(lambda a, b: a * b, other)
        out: dict[Monomial, Fraction] = {}
        for m1, c1 in self.terms:
            for m2, c2 in Size.of(other).terms:
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, Fraction(0)) + c1 * c2
        return Size(out)

    __rmul__ = __mul__

    def divide(self, divisor: int) -> "Size":
        """Exact division by a positive integer (the caller records divisibility when needed)."""
        return Size({m: c / divisor for m, c in self.terms})

    def __floordiv__(self, divisor: int) -> "Size":
        """`x.shape[1] // 2` in a program: Python's floor division of a literal size; of a symbolic
        one, exact division, so the program that uses the result records that it must be an
        integer (`integral`; frontend.tracer), which makes it the floor too."""
        if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor <= 0:
            raise TypeError(f"a size can only be divided by a positive integer, not {divisor!r}")
        if self.is_constant and self.constant.denominator == 1:
            return Size.of(int(self.constant) // divisor)
        return self.divide(divisor)

    def integral(self) -> "SizeFact | None":
        """The fact that this size is an integer (k/2 needs k even), or None when it always is."""
        denominators = [c.denominator for _, c in self.terms if c.denominator != 1]
        if not denominators:
            return None
        lcm = 1
        for d in denominators:
            lcm = lcm * d // gcd(lcm, d)
        return SizeFact(self * lcm, divisor=lcm, minimum=None)  # a number: any sign

    # -- identity -------------------------------------------------------------------------
    def __eq__(self, other) -> bool:
        return self._equal(other, "==")

    def __ne__(self, other) -> bool:
        return not self._equal(other, "!=")

    def _equal(self, other, symbol: str) -> bool:
        if isinstance(other, (int, str, Fraction)) and not isinstance(other, bool):
            other = Size.of(other)
        equal = isinstance(other, Size) and self.terms == other.terms
        if not equal and isinstance(other, Size) and Size.in_program and not (self - other).is_constant:
            _refuse_in_program(f"{self} {symbol} {other}", "true at some sizes and false at others", depth=3)
        return equal

    def __lt__(self, other):
        return self._order(other, "<", lambda d: d < 0)

    def __le__(self, other):
        return self._order(other, "<=", lambda d: d <= 0)

    def __gt__(self, other):
        return self._order(other, ">", lambda d: d > 0)

    def __ge__(self, other):
        return self._order(other, ">=", lambda d: d >= 0)

    def _order(self, other, symbol: str, holds):
        """A comparison decided by the constant difference, or refused in a program's own code
        (NotImplemented elsewhere: Python's TypeError)."""
        if isinstance(other, (int, Fraction)) and not isinstance(other, bool):
            other = Size.of(other)
        if not isinstance(other, Size):
            return NotImplemented
        difference = self - other
        if difference.is_constant:
            return holds(difference.constant)
        if Size.in_program:
            _refuse_in_program(f"{self} {symbol} {other}", "true at some sizes and false at others", depth=3)
        return NotImplemented

    def __bool__(self) -> bool:
        if self.is_constant:
            return self.constant != 0
        if Size.in_program and not all(c > 0 for _, c in self.terms):
            _refuse_in_program(f"the truth of {self}", "false at some sizes", depth=2)
        return True

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Size({self})"

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for monomial, coeff in self.terms:
            names = "*".join(monomial)
            if not names:
                parts.append(str(coeff))
            elif coeff == 1:
                parts.append(names)
            elif coeff.denominator == 1:
                parts.append(f"{coeff.numerator}*{names}")
            elif coeff.numerator == 1:
                parts.append(f"{names}/{coeff.denominator}")
            else:
                parts.append(f"{coeff.numerator}*{names}/{coeff.denominator}")
        return " + ".join(parts).replace("+ -", "- ")


SizeLike = Union[Size, str, int, Fraction]


def _size_like(value) -> bool:
    return isinstance(value, (Size, str, int, Fraction)) and not isinstance(value, bool)


def _refuse_in_program(what: str, why: str, depth: int) -> None:
    """A Python decision on a symbolic size in a program's own code (not Axon's, which compares
    shapes as polynomials; `depth` frames up): it would hold for some sizes only, so tracing
    cannot take it."""
    frame = sys._getframe(depth)
    if frame.f_code.co_filename.startswith(_PACKAGE_DIR + os.sep):
        return
    where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}: "
    raise UnsupportedError(f"{where}{what} in Python is {why}: a program's code cannot branch on a symbolic "
                           "size (give the size as a number, or compute both cases with axon.where)")
Shape = tuple[Size, ...]


def shape_of(dims) -> Shape:
    return tuple(Size.of(d) for d in dims)


def format_shape(shape: Shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def bind_shape(shape: Shape, binding: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(s.evaluate_int(binding) for s in shape)


@dataclass(frozen=True)
class SizeFact:
    """A precondition a program puts on its sizes: `size` is a multiple of `divisor` and at least
    `minimum` (None: of any sign, as `n // 2 - 3` used as a number). Every stage reads it the same
    way: the evaluator rejects sizes that break it, the refuter and the fuzzer never bind them, the
    prover assumes it, and a verdict states it."""

    size: Size
    divisor: int = 1
    minimum: Optional[int] = 1

    def holds(self, binding: Mapping[str, int]) -> bool:
        value = self.size.evaluate(binding)
        return (value.denominator == 1 and value.numerator % self.divisor == 0
                and (self.minimum is None or value >= self.minimum))

    @property
    def bounded(self) -> bool:
        """Whether the minimum says more than that a size made of sizes is positive."""
        return self.minimum is not None and not (self.minimum <= 1 and all(c > 0 for _, c in self.size.terms))

    def rename(self, names: Mapping[str, str]) -> "SizeFact":
        renamed = Size({tuple(sorted(names.get(s, s) for s in m)): c for m, c in self.size.terms})
        return SizeFact(renamed, self.divisor, self.minimum)

    def describe(self) -> str:
        parts = []
        if self.divisor > 1:
            parts.append(f"{self.size} even" if self.divisor == 2 else f"{self.size} a multiple of {self.divisor}")
        if self.bounded:
            parts.append(f"{self.size} >= {self.minimum}")
        return " and ".join(parts)
