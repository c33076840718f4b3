"""Symbolic scalar terms in a canonical form, with the structural lemmas applied at construction.

A term is a `Poly`: a sum of monomials with rational coefficients over *atoms*; a monomial's atoms
carry integer (possibly negative) exponents. Atoms are variables (dimensions, output indices, fold
binders), tensor reads, uninterpreted functions (exp, log, sqrt, tanh; floordiv/mod on indices),
interpreted max/min, groups (a multi-term polynomial under a negative power) and folds (a reduction
over a symbolic extent with a canonically named binder). Every atom is identified by its `key`, a
string built from its parts, so equal keys mean structurally equal terms (up to alpha-renaming of
binders), and canonical keys make proofs cacheable.

Invariant: every constructor returns a value equal to its mathematical meaning over the reals under
the *domain assumptions*: every divisor is non-zero, every sqrt argument is >= 0, every log argument
is > 0, every extent of a max/min fold is >= 1 (sizes are positive). Each rewrite names its lemma
(`LEMMAS` in axon/verification/lemmas.py); tests check each lemma on concrete numbers and check the
whole construction against NumPy on the 20 benchmarks.
"""
from __future__ import annotations

from contextlib import contextmanager
from fractions import Fraction
from typing import Callable, Iterable, Mapping, Optional

Number = Fraction


class Undefined(Exception):
    """A term with no value (division by the constant 0): such a program is not proved."""


class TooLarge(Exception):
    """A term whose expansion passes MAX_PRODUCT_TERMS: such a program is not proved."""


MAX_PRODUCT_TERMS = 250_000  # term pairs one product of polynomials may expand (x := x*x + x nested
#                              9 times: 256 x 256 terms, 5 s; once more would take minutes)


# --- atoms -----------------------------------------------------------------------------------
class Atom:
    __slots__ = ("key", "free", "level", "_hash")

    def __init__(self, key: str, free: frozenset, level: int):
        self.key, self.free, self.level = key, free, level
        self._hash = hash(key)

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, Atom) and self.key == other.key)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return self.key


class Var(Atom):
    """kind 'dim' (a positive integer size), 'idx' (an output index), or 'bound' (a fold binder)."""
    __slots__ = ("name", "kind")

    def __init__(self, name: str, kind: str):
        self.name, self.kind = name, kind
        super().__init__(f"{kind}:{name}", frozenset() if kind == "dim" else frozenset([f"{kind}:{name}"]), 0)


class Read(Atom):
    __slots__ = ("tensor", "index")

    def __init__(self, tensor: str, index: tuple["Poly", ...]):
        self.tensor, self.index = tensor, index
        super().__init__(f"{tensor}[{', '.join(p.key for p in index)}]", _union(index), _level(index))


class Fn(Atom):
    """An uninterpreted function (exp, log, sqrt, tanh, floordiv, mod) or interpreted max/min."""
    __slots__ = ("op", "args")

    def __init__(self, op: str, args: tuple["Poly", ...]):
        self.op, self.args = op, args
        super().__init__(f"({op} {' '.join(p.key for p in args)})", _union(args), _level(args))


class Group(Atom):
    """A polynomial of two or more terms, as a factor: it only occurs under a negative exponent."""
    __slots__ = ("poly",)

    def __init__(self, poly: "Poly"):
        self.poly = poly
        super().__init__(f"[{poly.key}]", poly.free, poly.level)


class Fold(Atom):
    """combine_{var < extent} body, var named `_b<level>`: a body is one monomial (see `fold`)."""
    __slots__ = ("combine", "extent", "body", "var")

    def __init__(self, combine: str, extent: "Poly", body: "Poly", var: Var):
        self.combine, self.extent, self.body, self.var = combine, extent, body, var
        level = 1 + max(extent.level, body.level)
        super().__init__(f"(fold_{combine} {var.name} {extent.key} {body.key})",
                         (extent.free | body.free) - {var.key}, level)


def _union(polys: Iterable["Poly"]) -> frozenset:
    out: frozenset = frozenset()
    for p in polys:
        out |= p.free
    return out


def _level(polys: Iterable["Poly"]) -> int:
    return max((p.level for p in polys), default=0)


# --- polynomials -----------------------------------------------------------------------------
Monomial = tuple[tuple[Atom, int], ...]  # sorted by atom key, exponents non-zero


class Poly:
    __slots__ = ("terms", "key", "free", "level", "_hash")

    def __init__(self, terms: Mapping[Monomial, Fraction]):
        items = sorted(((m, Fraction(c)) for m, c in terms.items() if c != 0), key=lambda t: _mono_key(t[0]))
        self.terms: tuple[tuple[Monomial, Fraction], ...] = tuple(items)
        self.key = " + ".join(f"{c}*{_mono_key(m)}" if m else str(c) for m, c in items) or "0"
        self.free = frozenset().union(*(a.free for m, _ in items for a, _ in m)) if items else frozenset()
        self.level = max((a.level for m, _ in items for a, _ in m), default=0)
        self._hash = hash(self.key)

    # construction
    @staticmethod
    def const(value) -> "Poly":
        return Poly({(): Fraction(value)})

    @staticmethod
    def atom(atom: Atom, exponent: int = 1) -> "Poly":
        return Poly({((atom, exponent),): Fraction(1)})

    @staticmethod
    def of(value) -> "Poly":
        if isinstance(value, Poly):
            return value
        if isinstance(value, (int, Fraction, float)) and not isinstance(value, bool):
            return Poly.const(Fraction(value))
        raise TypeError(f"not a term: {value!r}")

    # queries
    @property
    def is_const(self) -> bool:
        return all(not m for m, _ in self.terms)

    @property
    def value(self) -> Fraction:
        return dict(self.terms).get((), Fraction(0))

    @property
    def monomial(self) -> Optional[tuple[Fraction, Monomial]]:
        """(coefficient, monomial) when the polynomial is a single monomial."""
        return (self.terms[0][1], self.terms[0][0]) if len(self.terms) == 1 else None

    def atoms(self) -> Iterable[Atom]:
        for m, _ in self.terms:
            for a, _ in m:
                yield a

    # arithmetic
    def __add__(self, other) -> "Poly":
        out = dict(self.terms)
        for m, c in Poly.of(other).terms:
            out[m] = out.get(m, Fraction(0)) + c
        return Poly(out)

    __radd__ = __add__

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms})

    def __sub__(self, other) -> "Poly":
        return self + (-Poly.of(other))

    def __rsub__(self, other) -> "Poly":
        return Poly.of(other) - self

    def __mul__(self, other) -> "Poly":
        other = Poly.of(other)
        if len(self.terms) * len(other.terms) > MAX_PRODUCT_TERMS:
            raise TooLarge(f"a product of polynomials of {len(self.terms)} and {len(other.terms)} terms "
                           f"expands past {MAX_PRODUCT_TERMS} term pairs")
        total: dict[Monomial, Fraction] = {}  # summed once at the end: adding product by product
        for m1, c1 in self.terms:             # made a product of n-term polynomials cost n^3
            for m2, c2 in other.terms:
                for m, c in monomial(c1 * c2, _merge(m1, m2)).terms:
                    total[m] = total.get(m, Fraction(0)) + c
        return Poly(total)

    __rmul__ = __mul__

    def __truediv__(self, other) -> "Poly":
        return self * inverse(Poly.of(other))

    def __pow__(self, k: int) -> "Poly":
        if k < 0:
            return inverse(self) ** (-k)
        out = Poly.const(1)
        for _ in range(k):
            out = out * self
        return out

    def __eq__(self, other) -> bool:
        return isinstance(other, Poly) and self.key == other.key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return self.key


def _mono_key(m: Monomial) -> str:
    return "*".join(a.key if e == 1 else f"{a.key}^{e}" for a, e in m)


ZERO, ONE = Poly.const(0), Poly.const(1)


def _merge(m1: Monomial, m2: Monomial) -> dict[Atom, int]:
    out: dict[Atom, int] = {}
    for a, e in m1 + m2:
        out[a] = out.get(a, 0) + e
    return out


def monomial(coeff: Fraction, factors: Mapping[Atom, int]) -> Poly:
    """coeff * prod(atom^e), normalised. Lemmas: `laurent` (a^i a^j = a^(i+j), a^0 = 1 for a != 0),
    `sqrt_square` (sqrt(p)^2 = p for p >= 0), `group_expand` (a group under a positive power is
    the polynomial it stands for)."""
    if coeff == 0:
        return ZERO
    plain: dict[Atom, int] = {}
    rest = ONE
    for a, e in factors.items():
        if e == 0:
            continue
        if isinstance(a, Group) and e > 0:
            rest = rest * a.poly ** e
        elif isinstance(a, Fn) and a.op == "sqrt" and abs(e) >= 2:
            half = int(e / 2)  # towards zero: sqrt(p)^e = p^half * sqrt(p)^(e - 2 half)
            rest = rest * a.args[0] ** half
            if e - 2 * half:
                plain[a] = e - 2 * half
        else:
            plain[a] = e
    head = Poly({tuple(sorted(plain.items(), key=lambda t: t[0].key)): Fraction(coeff)})
    return head if rest is ONE else head * rest


def inverse(p: Poly) -> Poly:
    """1/p. Lemmas: `laurent` for a monomial; `content` for a sum: p = c * g * q with g the common
    monomial factor and q monic gives 1/p = c^-1 g^-1 [q]^-1 (p != 0 implies each factor != 0)."""
    if not p.terms:
        raise Undefined("division by zero")
    single = p.monomial
    if single is not None:
        coeff, m = single
        return monomial(1 / coeff, {a: -e for a, e in m})
    common: Optional[dict[Atom, int]] = None
    for m, _ in p.terms:
        exps = dict(m)
        common = dict(exps) if common is None else {a: min(e, exps[a]) for a, e in common.items() if a in exps}
    common = {a: e for a, e in (common or {}).items() if e != 0}
    lead = p.terms[0][1]
    rest = Poly({tuple(sorted(((a, e - common.get(a, 0)) for a, e in m if e != common.get(a, 0)),
                              key=lambda t: t[0].key)): c / lead for m, c in p.terms})
    return monomial(1 / lead, {a: -e for a, e in common.items()}) * Poly.atom(Group(rest), -1)


# --- functions -------------------------------------------------------------------------------
def reads_data(p: Poly) -> bool:
    """Whether a tensor element occurs anywhere in `p` (else it is made of sizes and indices alone)."""
    for atom in p.atoms():
        if isinstance(atom, Read):
            return True
        if isinstance(atom, Fn) and any(reads_data(a) for a in atom.args):
            return True
        if isinstance(atom, Group) and reads_data(atom.poly):
            return True
        if isinstance(atom, Fold) and (reads_data(atom.extent) or reads_data(atom.body)):
            return True
    return False


def var(name: str, kind: str) -> Poly:
    return Poly.atom(Var(name, kind))


def read(tensor: str, index: Iterable) -> Poly:
    return Poly.atom(Read(tensor, tuple(Poly.of(i) for i in index)))


def exp(p: Poly) -> Poly:
    """Lemmas `exp_add` (exp(a+b) = exp(a) exp(b)), `exp_int` (exp(k a) = exp(a)^k, integer k),
    `exp_zero` (exp(0) = 1), `exp_log` (exp(k log a) = a^k for a > 0): exp of a sum becomes a product
    of exps of its monomials, so exp atoms always hold one monomial."""
    out = ONE
    for m, c in p.terms:
        if not m:
            out = out * Poly.atom(Fn("exp", (Poly.const(c),)))
        elif c.denominator == 1 and len(m) == 1 and m[0][1] == 1 and isinstance(m[0][0], Fn) and m[0][0].op == "log":
            out = out * m[0][0].args[0] ** int(c)
        elif c.denominator == 1:
            out = out * monomial(Fraction(1), {Fn("exp", (Poly({m: Fraction(1)}),)): int(c)})
        else:
            out = out * Poly.atom(Fn("exp", (Poly({m: c}),)))
    return out


def log(p: Poly) -> Poly:
    """Lemma `log_exp`: log(prod exp(a_i)^k_i) = sum k_i a_i (exp atoms hold their whole argument)."""
    single = p.monomial
    if single is not None and single[0] == 1 and single[1] and all(
            isinstance(a, Fn) and a.op == "exp" for a, _ in single[1]):
        return sum((e * a.args[0] for a, e in single[1]), ZERO)
    return Poly.atom(Fn("log", (p,)))


def unary(op: str, p: Poly) -> Poly:
    return Poly.atom(Fn(op, (p,)))


def extremum(op: str, p: Poly, q: Poly) -> Poly:
    """max/min of two terms (interpreted by the solver). Lemma `extremum_trivial`: max(a, a) = a, and
    max(a, b) = a when a - b is a positive constant. Lemma `extremum_negate`: max(-a, -b) =
    -min(a, b) and min(-a, -b) = -max(a, b): of two terms that both lead with a negative
    coefficient the other extremum of their negations is kept, negated, so that the two forms are
    one term (an exp of either then has one atom)."""
    if p == q:
        return p
    d = p - q
    if d.is_const:
        return p if (d.value > 0) == (op == "max") else q
    if _leads_negative(p) and _leads_negative(q):
        return -extremum("min" if op == "max" else "max", -p, -q)
    args = tuple(sorted((p, q), key=lambda t: t.key))
    return Poly.atom(Fn(op, args))


def _leads_negative(p: Poly) -> bool:
    """The coefficient of p's first non-constant term (its constant, if it has no other) is < 0."""
    coeffs = [c for m, c in p.terms if m] or [c for _, c in p.terms]
    return bool(coeffs) and coeffs[0] < 0


COMPARISONS = ("ge", "gt", "eq")  # of a - b against 0 (le and lt are ge and gt with operands swapped)


def compare(op: str, a: Poly, b: Poly) -> Poly:
    """1 where `a op b` holds, else 0 (interpreted by the solver), kept as a comparison of the
    difference with 0 so that a >= b and a - b >= 0 are one term; eq takes the difference of the
    smaller key (a = b and b = a are one term). Decided outright when the difference is a constant."""
    d = a - b
    if d.is_const:
        holds = {"ge": d.value >= 0, "gt": d.value > 0, "eq": d.value == 0}[op]
        return ONE if holds else ZERO
    if op in ("ge", "gt"):
        decided = _decided_by_ranges(d, op == "gt")
        if decided is not None:
            return ONE if decided else ZERO
    if op == "eq" and (-d).key < d.key:
        d = -d
    return Poly.atom(Fn(op, (d,)))


def select(c: Poly, a: Poly, b: Poly) -> Poly:
    """`a` where c != 0, else `b` (interpreted by the solver); decided when c is a constant or the
    branches are one term."""
    if c.is_const:
        return a if c.value != 0 else b
    if a == b:
        return a
    return Poly.atom(Fn("where", (c, a, b)))


# Index ranges known while a term is built (lemma `index_range`): an index variable's key -> its
# exclusive upper bound; its lower bound is 0. Set only around the construction of what the range
# scopes (a fold's body, one output's terms), so a simplification never outlives its premise.
_RANGES: dict[str, Poly] = {}


@contextmanager
def ranged(bounds: Iterable[tuple[Poly, Poly]]):
    """Index variables (single-atom polys) known to lie in [0, extent) while the block runs."""
    added = []
    for var, extent in bounds:
        if var.monomial is not None and var.monomial[0] == 1 and len(var.monomial[1]) == 1:
            (atom, _), = var.monomial[1]
            if atom.key not in _RANGES:
                _RANGES[atom.key] = Poly.of(extent)
                added.append(atom.key)
    try:
        yield
    finally:
        for key in added:
            del _RANGES[key]


def _integral(p: Poly) -> bool:
    return all(c.denominator == 1 for _, c in p.terms)


def _quotient(t: Poly, b: Poly) -> Optional[Poly]:
    """t / b when b is one monomial dividing the monomial t exactly (integer coefficient), else None
    (a divisor of several terms, n - 1, included)."""
    if t.monomial is None or b.monomial is None:
        return None
    (ct, mt), (cb, mb) = t.monomial, b.monomial
    factors = dict(mt)
    for atom, e in mb:
        if factors.get(atom, 0) < e:
            return None
        factors[atom] -= e
    if (ct / cb).denominator != 1:
        return None
    return monomial(ct / cb, {a: e for a, e in factors.items() if e})


def _split(a: Poly, b: Poly) -> tuple[Poly, Poly]:
    """a = q * b + r with q the terms of a that b divides."""
    q, r = ZERO, ZERO
    for m, c in a.terms:
        t = Poly({m: c})
        part = _quotient(t, b) if m or b.is_const else None
        if part is None:
            r = r + t
        else:
            q = q + part
    return q, r


def _index_range(atom: Atom) -> Optional[Poly]:
    """U with 0 <= atom < U, where known: a ranged index variable, or mod(x, b) (U = b)."""
    if isinstance(atom, Var):
        return _RANGES.get(atom.key)
    if isinstance(atom, Fn) and atom.op == "mod":
        return atom.args[1]
    return None


def _largest(r: Poly) -> Optional[Poly]:
    """The largest value of r over the known ranges when every term of r is a positive multiple of
    sizes times at most one ranged index (so r >= 0 too), else None."""
    total = ZERO
    for m, c in r.terms:
        if c < 0:
            return None
        sizes = {a: e for a, e in m if isinstance(a, Var) and a.kind == "dim"}
        rest = [(a, e) for a, e in m if a not in sizes]
        if len(rest) > 1 or any(e < 0 for e in sizes.values()):
            return None
        term = monomial(c, sizes)
        if rest:
            (a, e), = rest
            bound = _index_range(a)
            if e != 1 or bound is None:
                return None
            term = term * (bound - ONE)
        total = total + term
    return total


def _nonnegative(p: Poly) -> bool:
    return all(c >= 0 and all(isinstance(a, Var) and a.kind == "dim" and e > 0 for a, e in m) for m, c in p.terms)


def _at_least(d: Poly, k: int) -> bool:
    """d >= k is known for an integer index term d (lemma `compare_range`): its negative terms,
    each a multiple of sizes times one ranged index, at their largest, do not outweigh its
    positive terms at their smallest (a size at least 1, an index or a mod at least 0)."""
    if not _integral(d):
        return False
    pos, neg = ZERO, ZERO
    for m, c in d.terms:
        if c > 0:
            pos = pos + Poly({m: c})
        else:
            neg = neg - Poly({m: c})
    largest = _largest(neg) if neg != ZERO else ZERO
    if largest is None:
        return False
    rest = pos - largest - Poly.const(k)
    return all(c >= 0 and all(e > 0 and (isinstance(a, Var) and a.kind == "dim" or _index_range(a) is not None)
                              for a, e in m) for m, c in rest.terms
               if m) and _smallest(rest) >= 0


def _smallest(p: Poly) -> Fraction:
    """A lower bound of p's value with sizes >= 1 and ranged indices >= 0 (its terms' coefficients
    all >= 0): the constant plus the terms of sizes alone."""
    return sum((c for m, c in p.terms if all(isinstance(a, Var) and a.kind == "dim" for a, _ in m)), Fraction(0))


def _decided_by_ranges(d: Poly, strict: bool) -> Optional[bool]:
    """Whether d > 0 (strict) or d >= 0 holds for every value of d's indices in their known
    ranges, where the ranges decide it (an integer index term); None where they do not."""
    if _at_least(d, 1 if strict else 0):
        return True
    if _at_least(-d, 0 if strict else 1):
        return False
    return None


def _below(r: Poly, b: Poly) -> bool:
    """0 <= r < b is known (lemma `index_range`): from the ranges of r's indices (c*i + k with
    i < q and k < c is below c*q), or r = floordiv(x, c) of an x below c*b."""
    single = r.monomial
    if single is not None and single[0] == 1 and len(single[1]) == 1 and single[1][0][1] == 1:
        atom = single[1][0][0]
        if isinstance(atom, Fn) and atom.op == "floordiv" and _below(atom.args[0], atom.args[1] * b):
            return True
    largest = _largest(r)
    return largest is not None and _nonnegative(b - ONE - largest)


def int_fn(op: str, a: Poly, b: Poly) -> Poly:
    """floordiv / mod of integer index terms. Lemmas `index_split` (floor((q b + r) / b) = q +
    floor(r / b), (q b + r) mod b = r mod b, for integers), `index_range` (floor(r / b) = 0 and
    r mod b = r for 0 <= r < b), `index_nest` (floor(floor(x / c) / b) = floor(x / (c b)), b, c > 0)."""
    if a.is_const and b.is_const and b.value != 0:
        x, y = a.value, b.value
        return Poly.const(x // y if op == "floordiv" else x % y)
    if b == ONE:
        return a if op == "floordiv" else ZERO
    single = b.monomial
    if single is not None and single[0] > 0 and _integral(a) and _integral(b) and \
            all(isinstance(at, Var) and at.kind == "dim" for at, _ in single[1]):
        q, r = _split(a, b)
        if q != ZERO:
            return q + int_fn("floordiv", r, b) if op == "floordiv" else int_fn("mod", r, b)
        if _below(r, b):
            return ZERO if op == "floordiv" else r
        inner = r.monomial
        if op == "floordiv" and inner is not None and inner[0] == 1 and len(inner[1]) == 1 and inner[1][0][1] == 1:
            atom = inner[1][0][0]
            if isinstance(atom, Fn) and atom.op == "floordiv" and atom.args[1].monomial is not None \
                    and atom.args[1].monomial[0] > 0:
                return int_fn("floordiv", atom.args[0], atom.args[1] * b)
    return Poly.atom(Fn(op, (a, b)))


def exact_quotient(a: Poly, b: Poly) -> Poly:
    q, r = _split(a, b)
    if r != ZERO:
        raise ValueError(f"{b.key} does not divide {a.key}")
    return q


def split_factor(body: Poly, binder: Var, extent: Poly) -> Optional[Poly]:
    """A divisor c of `extent` with floordiv(binder, c) or mod(binder, c) in `body`: the fold
    reads a flattened (extent/c, c) axis, and is two folds (lemma `fold_split`)."""
    target = Poly.atom(binder)
    stack, seen = list(body.atoms()), set()
    while stack:
        a = stack.pop()
        if a in seen:
            continue
        seen.add(a)
        if isinstance(a, Fn) and a.op in ("floordiv", "mod") and a.args[0] == target and a.args[1] != ONE:
            q, r = _split(extent, a.args[1])
            if r == ZERO:
                return a.args[1]
        parts = getattr(a, "args", ()) + getattr(a, "index", ()) + tuple(
            x for x in (getattr(a, "extent", None), getattr(a, "body", None), getattr(a, "poly", None)) if x is not None)
        for part in parts:
            stack.extend(part.atoms())
    return None


UNROLL = 4  # folds over constant extents up to this are unrolled (kept small: terms grow linearly)


def nonnegative(a: Atom, e: int) -> bool:
    """Known >= 0: exp (> 0), sqrt (>= 0 by definition), sizes, and even powers of anything."""
    return e % 2 == 0 or (isinstance(a, Fn) and a.op in ("exp", "sqrt")) or (isinstance(a, Var) and a.kind == "dim")


def fold(combine: str, extent: Poly, binder: Var, body: Poly) -> Poly:
    """combine_{binder < extent} body, normalised; `binder` must be fresh (or already canonical).

    Sum (`combine == 'add'`), lemmas: `fold_linear` (sum(a + b) = sum a + sum b), `fold_factor`
    (sum(c * b) = c * sum b when c does not depend on the binder), `fold_const` (sum over n of c is
    n * c), `fold_alpha` (the binder is renamed `_b<level>`, level = 1 + the deepest fold inside, so
    alpha-equivalent folds get one key), `fold_cases` (see `_cases`). Max/min (`extent >= 1` by the
    size preconditions):
    `extremum_shift` (max(b + c) = max(b) + c), `extremum_scale` (max(c * b) = c * max(b) for c >= 0,
    = c * min(b) for c < 0), `extremum_const` (max over n >= 1 of c is c). Both: `fold_unroll` (a constant extent
    n <= UNROLL gives the explicit sum/max of the n body instances), `fold_swap` (see `_swapped`)."""
    if extent.is_const and extent.value.denominator == 1 and 0 <= extent.value <= UNROLL:
        # fold_unroll: a fold over a small constant extent is its explicit combination
        values = [substitute(body, {binder.key: Poly.const(r)}) for r in range(int(extent.value))]
        if combine == "add":
            return sum(values, ZERO)
        if values:
            out = values[0]
            for v in values[1:]:
                out = extremum(combine, out, v)
            return out
    parts = _cases(extent, binder, body)
    if parts is not None:
        (e1, b1), (e2, b2) = parts
        first, second = fold(combine, e1, binder, b1), fold(combine, e2, binder, b2)
        return first + second if combine == "add" else extremum(combine, first, second)
    if combine == "add":
        total = ZERO
        for m, c in body.terms:
            dep = {a: e for a, e in m if binder.key in a.free}
            indep = {a: e for a, e in m if binder.key not in a.free}
            if not dep:
                total = total + monomial(c, indep) * extent
            else:
                total = total + monomial(c, indep) * _fold_atom("add", extent, binder, monomial(Fraction(1), dep))
        return total
    dep_terms = {m: c for m, c in body.terms if any(binder.key in a.free for a, _ in m)}
    shift = Poly({m: c for m, c in body.terms if m not in dep_terms})
    if not dep_terms:
        return shift
    dep_body = Poly(dep_terms)
    single = dep_body.monomial
    if single is not None:
        c, m = single
        indep = {a: e for a, e in m if binder.key not in a.free}
        if all(nonnegative(a, e) for a, e in indep.items()):
            dep = {a: e for a, e in m if binder.key in a.free}
            flipped = combine if c > 0 else ("min" if combine == "max" else "max")
            return shift + monomial(c, indep) * _fold_atom(flipped, extent, binder, monomial(Fraction(1), dep))
    return shift + _fold_atom(combine, extent, binder, dep_body)


def _cases(extent: Poly, binder: Var, body: Poly) -> Optional[tuple[tuple[Poly, Poly], tuple[Poly, Poly]]]:
    """Lemma `fold_cases`: a fold over [0, E) whose body compares the binder r with a threshold k
    (gt/ge of c -+ r, c free of r: r < k or r >= k) that lies strictly inside the range for all
    sizes (1 <= k <= E - 1) is the combination of the fold over [0, k) and the fold over [0, E - k)
    of the body at r + k, each with the comparison decided. A concatenation's element is such a
    select, so a fold over the concatenated axis splits into folds over its parts. Returns the two
    (extent, body) pairs, or None."""
    found = _threshold(body, binder)
    if found is None:
        return None
    cmp, k, below = found
    if not (_at_least_one(k) and _at_least_one(extent - k)):
        return None
    low, high = (ONE, ZERO) if below else (ZERO, ONE)
    first = _replace(body, binder.key, cmp, low)
    second = substitute(_replace(body, binder.key, cmp, high), {binder.key: Poly.atom(binder) + k})
    return (k, first), (extent - k, second)


def _threshold(p: Poly, binder: Var) -> Optional[tuple[Atom, Poly, bool]]:
    """A comparison atom in `p` of the form gt/ge(s r + c0), s = +-1, c0 free of the binder r:
    (the atom, k, whether it holds for r < k)."""
    for a in p.atoms():
        if binder.key not in a.free:
            continue
        if isinstance(a, Fn) and a.op in ("gt", "ge"):
            d = a.args[0]
            r = Poly.atom(binder)
            s = next((c for m, c in d.terms if m == ((binder, 1),)), None)
            c0 = d - r * s if s in (1, -1) else None
            if c0 is not None and binder.key not in c0.free:
                k = _integer_threshold(c0 if s == -1 else -c0, a.op == "gt", s == -1)
                if k is not None:
                    return a, k, s == -1
        for part in _parts(a):
            found = _threshold(part, binder)
            if found is not None:
                return found
    return None


def _integer_threshold(c: Poly, strict: bool, below: bool) -> Optional[Poly]:
    """The integer k at which the comparison of an integer index r with c changes: below, r < c
    (strict) or r <= c holds exactly for r < k; else r > c (strict) or r >= c exactly for r >= k.
    For an integer c: c (r < c), c + 1 (r <= c), c + 1 (r > c), c (r >= c). For a constant c
    that is not an integer, ceil(c) either way. Otherwise None: a symbolic c is split at only where
    it is an integer (integer coefficients over sizes, or a size the program requires whole,
    `integers`), since r < n/2 + 1/2 counts n/2 + 1 indices, not n/2 + 1/2."""
    if c.is_const and c.value.denominator != 1:
        return Poly.const(-((-c.value.numerator) // c.value.denominator))
    if not _whole(c):
        return None
    return c + ONE if strict != below else c


def _whole(p: Poly) -> bool:
    """p is an integer for every size the program allows: its atoms are integers (sizes, indices,
    floordiv/mod of them) and, but for a multiple of one size the program requires whole
    (`integers`: n/2 where n must be even), its coefficients are integers."""
    if not all(isinstance(a, Var) or (isinstance(a, Fn) and a.op in ("floordiv", "mod")) for m, _ in p.terms for a, _ in m):
        return False
    if _integral(p):
        return True
    for whole in _WHOLE:
        d = max(c.denominator for _, c in whole.terms)
        if any(_integral(p - whole * q) for q in range(1, d)):
            return True
    return False


# Size polynomials the programs being compared require to be integers (their SizeFacts: n/2 for
# "n even"), set around a proof by `integers`, so a comparison with n // 2 may split a fold.
_WHOLE: list[Poly] = []


@contextmanager
def integers(polys: Iterable[Poly]):
    """Size polynomials known to be integers while the block runs."""
    added = [Poly.of(p) for p in polys if not _integral(Poly.of(p))]
    _WHOLE.extend(added)
    try:
        yield
    finally:
        del _WHOLE[len(_WHOLE) - len(added):]


def _parts(a: Atom) -> tuple[Poly, ...]:
    if isinstance(a, Read):
        return a.index
    if isinstance(a, Group):
        return (a.poly,)
    if isinstance(a, Fold):
        return (a.extent, a.body)
    if isinstance(a, Fn):
        return a.args
    return ()


def _replace(p: Poly, free: str, target: Atom, value: Poly) -> Poly:
    """p with the atom `target` (wherever it occurs, in atoms that depend on `free`) replaced by
    `value`, re-normalised through the constructors."""
    total = ZERO
    for m, c in p.terms:
        term = Poly.const(c)
        for a, e in m:
            if a == target:
                v = value
            elif free in a.free and not isinstance(a, Var):
                v = rebuild(a, lambda q: _replace(q, free, target, value), {})
            else:
                v = Poly.atom(a)
            term = term * v ** e
        total = total + term
    return total


def _at_least_one(p: Poly) -> bool:
    """p >= 1 for every size >= 1: its terms other than the constant are non-negative multiples of
    sizes, so p is smallest with every size 1."""
    at_one = Fraction(0)
    for m, c in p.terms:
        if m and (c < 0 or not all(isinstance(a, Var) and a.kind == "dim" and e > 0 for a, e in m)):
            return False
        at_one += c
    return at_one >= 1


def _fold_atom(combine: str, extent: Poly, binder: Var, body: Poly, swap: bool = True) -> Poly:
    canonical = Var(f"_b{1 + max(extent.level, body.level)}", "bound")
    if canonical != binder:
        body = substitute(body, {binder.key: Poly.atom(canonical)})
    out = Poly.atom(Fold(combine, extent, body, canonical))
    return _swapped(out) if swap else out


def _swapped(p: Poly) -> Poly:
    """Lemma `fold_swap`: fold_i fold_j b(i, j) = fold_j fold_i b(i, j) for one combine over a
    rectangle (neither extent reads the other binder): the nesting of the smaller key, so both
    orders of a double sum (or max) are one term."""
    (outer, _), = p.terms[0][0]
    inner_single = outer.body.monomial
    if inner_single is None or inner_single[0] != 1 or len(inner_single[1]) != 1:
        return p
    (inner, power), = inner_single[1]
    if (power != 1 or not isinstance(inner, Fold) or inner.combine != outer.combine
            or outer.var.key in inner.extent.free):
        return p
    i, j = Var("_swap_i", "bound"), Var("_swap_j", "bound")
    body = substitute(inner.body, {outer.var.key: Poly.atom(i), inner.var.key: Poly.atom(j)})
    swapped = _fold_atom(outer.combine, inner.extent, j,
                         _fold_atom(outer.combine, outer.extent, i, body, swap=False), swap=False)
    return swapped if swapped.key < p.key else p


# --- substitution and evaluation ------------------------------------------------------------
def substitute(p: Poly, env: Mapping[str, Poly]) -> Poly:
    """p with variables (by key) replaced, re-normalised through the constructors."""
    memo: dict[Atom, Poly] = {}

    def atom_value(a: Atom) -> Poly:
        if not (a.free & env.keys()):
            return Poly.atom(a)
        if a not in memo:
            memo[a] = rebuild(a, lambda q: substitute(q, env), env)
        return memo[a]

    total = ZERO
    for m, c in p.terms:
        term = Poly.const(c)
        for a, e in m:
            value = atom_value(a)
            term = term * value ** e  # a group's value is its polynomial, raised to its (negative) power
        total = total + term
    return total


def rebuild(a: Atom, sub: Callable[[Poly], Poly], env: Mapping[str, Poly]) -> Poly:
    """An atom's value with `sub` applied to its parts (the binder of a fold is never in env)."""
    if isinstance(a, Var):
        return env.get(a.key, Poly.atom(a))
    if isinstance(a, Read):
        return read(a.tensor, [sub(i) for i in a.index])
    if isinstance(a, Group):
        return sub(a.poly)
    if isinstance(a, Fold):
        return fold(a.combine, sub(a.extent), a.var, sub(a.body))
    args = [sub(x) for x in a.args]
    if a.op == "exp":
        return exp(args[0])
    if a.op == "log":
        return log(args[0])
    if a.op in ("max", "min"):
        return extremum(a.op, *args)
    if a.op in ("floordiv", "mod"):
        return int_fn(a.op, *args)
    if a.op in COMPARISONS:
        return compare(a.op, args[0], ZERO)
    if a.op == "where":
        return select(*args)
    return unary(a.op, args[0])


def evaluate(p: Poly, env: Mapping[str, float], arrays: Mapping) -> float:
    """A term's number when every free variable (by key) is bound in `env` and tensors are arrays:
    the concrete twin the tests use to check each normalisation against NumPy."""
    import math

    def atom(a: Atom, env) -> float:
        if isinstance(a, Var):
            return float(env[a.key])
        if isinstance(a, Read):
            return float(arrays[a.tensor][tuple(int(evaluate(i, env, arrays)) for i in a.index)])
        if isinstance(a, Group):
            return evaluate(a.poly, env, arrays)
        if isinstance(a, Fold):
            acc = {"add": 0.0, "max": -math.inf, "min": math.inf}[a.combine]
            for r in range(int(evaluate(a.extent, env, arrays))):
                x = evaluate(a.body, {**env, a.var.key: r}, arrays)
                acc = acc + x if a.combine == "add" else (max(acc, x) if a.combine == "max" else min(acc, x))
            return acc
        if a.op == "where":  # only the branch taken is read (a concatenation's other part is out of range)
            return evaluate(a.args[1] if evaluate(a.args[0], env, arrays) != 0 else a.args[2], env, arrays)
        args = [evaluate(x, env, arrays) for x in a.args]
        if a.op in ("max", "min"):
            return max(args) if a.op == "max" else min(args)
        if a.op in ("floordiv", "mod"):
            return float(int(args[0]) // int(args[1]) if a.op == "floordiv" else int(args[0]) % int(args[1]))
        if a.op in COMPARISONS:
            return float({"ge": args[0] >= 0, "gt": args[0] > 0, "eq": args[0] == 0}[a.op])
        return {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "tanh": math.tanh}[a.op](args[0])

    total = 0.0
    for m, c in p.terms:
        term = float(c)
        for a, e in m:
            term *= atom(a, env) ** e
        total += term
    return total
