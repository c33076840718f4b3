"""What a proof claims: the sizes it covers and the assumptions it makes, stated exactly.

A proof of `a == b` holds for every size binding that meets its `SizeFact`s (the programs'
preconditions, the positivity of every intermediate size such as `k - 1`, and any narrowing the
verifier applied because a divisor vanishes at some sizes) and for every input that meets its
assumptions (the domain assumptions the symbolic encoding recorded and the solver could not
derive from the sizes). `covers` is the test a fuzzer or a user applies; `describe` is the
sentence a verdict prints. Nothing here is a guess: a fact not listed is not used.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from axon.semantics.sizes import Size, SizeFact

ASSUMPTION_TEXT = {"!=": "divisors are non-zero", ">=": "sqrt arguments are >= 0", ">": "log arguments are > 0"}


def lower_bound(fact: SizeFact) -> Optional[tuple[str, int]]:
    """(dim, n) when the fact says only dim >= n: a linear size a*dim + c with a > 0."""
    if fact.divisor != 1 or fact.minimum is None:
        return None
    symbolic = [(m, c) for m, c in fact.size.terms if m]
    if len(symbolic) != 1 or len(symbolic[0][0]) != 1 or symbolic[0][1] <= 0:
        return None
    (dim,), a = symbolic[0]
    return dim, math.ceil((fact.minimum - fact.size.constant) / a)


def simplify(facts: Iterable[SizeFact]) -> tuple[SizeFact, ...]:
    """Lower bounds merged per dimension (the strongest kept, trivial ones dropped); the rest as
    given, one per size and divisor (n even from a slice bound and from a shape: once)."""
    bounds: dict[str, int] = {}
    other: dict[tuple, int] = {}
    for fact in map(_bound_only, facts):
        bound = lower_bound(fact)
        if bound is None:
            if not _trivial(fact):
                key = (fact.size, fact.divisor)
                other[key] = _stronger(other.get(key, fact.minimum), fact.minimum)
        elif bound[1] > 1:
            bounds[bound[0]] = max(bounds.get(bound[0], 1), bound[1])
    kept = [SizeFact(Size.of(d), minimum=n) for d, n in sorted(bounds.items())]
    return tuple(kept + sorted((SizeFact(s, d, n) for (s, d), n in other.items()), key=str))


def _stronger(a: Optional[int], b: Optional[int]) -> Optional[int]:
    """The stronger of two minimums of one size (None: no minimum)."""
    return b if a is None else a if b is None else max(a, b)


def _trivial(fact: SizeFact) -> bool:
    """Every size is a positive integer: a polynomial with positive coefficients is >= 1."""
    return fact.divisor == 1 and not fact.bounded


def _bound_only(fact: SizeFact) -> SizeFact:
    """The fact without its divisibility where every coefficient is a multiple of the divisor
    (-4 + 2*q is even for every q): what is left is a bound."""
    if fact.divisor > 1 and all((c / fact.divisor).denominator == 1 for _, c in fact.size.terms):
        return SizeFact(fact.size, 1, fact.minimum)
    return fact


def positivity(sizes: Iterable[Size]) -> list[SizeFact]:
    """`size >= 1` for every symbolic intermediate size that is not positive by its form (k - 1)."""
    return [SizeFact(s) for s in set(sizes) if not s.is_constant and any(c < 0 for _, c in s.terms)]


@dataclass(frozen=True)
class Claim:
    facts: tuple[SizeFact, ...] = ()
    assumptions: tuple[str, ...] = ()   # relations ("!=", ">=", ">") the proof assumes of its inputs
    note: str = ""                      # why the claim was narrowed, if it was
    nonzero: tuple[Size, ...] = ()      # sizes the programs divide by (x / (n - 5)): the claim leaves out their zeros

    @property
    def narrowed(self) -> bool:
        """Does the claim leave out sizes the programs themselves accept?"""
        return bool(self.note) or bool(self.nonzero)

    def covers(self, binding: Mapping[str, int]) -> bool:
        return all(fact.holds(binding) for fact in self.facts) and all(s.evaluate(binding) != 0 for s in self.nonzero)

    @property
    def conditions(self) -> tuple[str, ...]:
        return tuple(_describe(f) for f in self.facts) + tuple(f"{s} != 0" for s in self.nonzero)

    @property
    def assumption_texts(self) -> tuple[str, ...]:
        return tuple(ASSUMPTION_TEXT[r] for r in sorted(self.assumptions))

    def describe(self) -> str:
        sizes = f"for all sizes with {' and '.join(self.conditions)}" if self.conditions else "for all sizes"
        assumed = f", assuming {' and '.join(self.assumption_texts)}" if self.assumptions else ""
        note = f" ({self.note})" if self.note else ""
        return f"equal {sizes}{assumed}{note}"


def _describe(fact: SizeFact) -> str:
    bound = lower_bound(fact)
    if bound is not None and fact.minimum >= 1 and fact.divisor == 1:
        return f"{bound[0]} >= {bound[1]}"
    symbolic = [(m, c) for m, c in fact.size.terms if m]
    if fact.divisor == 1 and fact.minimum is not None and len(symbolic) == 1 and len(symbolic[0][0]) == 1 \
            and symbolic[0][1] < 0:  # c - a*n >= k: n at most (c - k) / a (a slice start 1 - n)
        (dim,), a = symbolic[0]
        return f"{dim} <= {math.floor((fact.size.constant - fact.minimum) / -a)}"
    return fact.describe()


def narrowing(small: Sequence[dict], failing: Sequence[dict]) -> Optional[list[SizeFact]]:
    """Lower bounds `dim >= n` that leave out every failing binding of `small` and as few of the
    others as possible (greedy: each step takes the bound that leaves out the fewest passing
    bindings, then the most failing ones), or None when they would leave out all of `small`."""
    if not failing:
        return []
    passing = [b for b in small if b not in failing]
    left, bounds = list(failing), {}

    def kept(b: dict) -> bool:
        return all(b[d] >= n for d, n in bounds.items())

    while left:
        # each option raises one dimension's bound past at least one failing binding, so the loop ends
        options = [(d, n) for d in sorted(left[0])
                   for n in range(max(2, bounds.get(d, 1) + 1), 2 + max(f[d] for f in left))]
        if not options:  # a binding with no dimensions fails: no lower bound leaves it out
            return None
        d, n = min(options, key=lambda o: (sum(kept(p) and p[o[0]] < o[1] for p in passing),
                                           -sum(f[o[0]] < o[1] for f in left), o))
        bounds[d] = max(bounds.get(d, 1), n)
        left = [f for f in left if kept(f)]
    for d in sorted(bounds):  # a bound taken early that a later one made redundant leaves out sizes for nothing
        rest = {k: v for k, v in bounds.items() if k != d}
        if not any(all(f[k] >= v for k, v in rest.items()) for f in failing):
            bounds = rest
    facts = [SizeFact(Size.of(d), minimum=n) for d, n in sorted(bounds.items())]
    return facts if any(kept(b) for b in small) else None
