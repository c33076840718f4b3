"""Subscripts of ints and slices (the simulator's most frequent operation, resolved on a fast
path) resolve exactly as the general resolution did: same NumPy key and shape, same errors."""
import numbers
import random

import numpy as np
import pytest

from axon.errors import KernelError
from axon.targets.trainium.simulator.indexing import resolve


def _reference_basic(shape, key, pdim):
    """The general path's resolution of an int/slice subscript, as it was written before the fast path."""
    key = key + (slice(None),) * (len(shape) - len(key))
    np_key, out = [], []
    for d, (k, n) in enumerate(zip(key, shape)):
        i = k if type(k) is int else (None if isinstance(k, (bool, np.bool_, slice)) else
                                     int(k) if isinstance(k, numbers.Integral) else None)
        if i is not None:
            if i < 0 or i >= n:
                raise KernelError(f"index {i} is out of bounds for axis {d} of size {n}")
            if d == pdim:
                np_key.append(slice(i, i + 1))
                out.append(1)
            else:
                np_key.append(i)
        elif isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step <= 0:
                raise KernelError("slice steps must be positive")
            start = 0 if k.start is None else int(k.start)
            stop = n if k.stop is None else int(k.stop)
            if start < 0 or stop > n or start > stop:
                raise KernelError(f"slice {start}:{stop} is out of bounds for axis {d} of size {n}")
            np_key.append(slice(start, stop, step))
            out.append(len(range(start, stop, step)))
        else:
            raise KernelError(f"unsupported index {k!r} (use ints, slices, nl.arange or nl.mgrid)")
    ints = [d for d, k in enumerate(np_key) if type(k) is int and d > (pdim or 0)]
    if pdim is not None and len(out) == 1 and ints:  # an on-chip tile keeps one free axis
        np_key[ints[-1]] = slice(np_key[ints[-1]], np_key[ints[-1]] + 1)
        out.append(1)
    return tuple(out), tuple(np_key)


def _random_key(rng, shape):
    def bound(n):
        return rng.choice((None, 0, 1, n // 2, n, n + 1, -1, np.int64(n // 3)))

    key = []
    for n in shape[:rng.randint(0, len(shape))] if rng.random() < 0.3 else shape:
        if rng.random() < 0.3:
            key.append(rng.choice((0, n - 1, n, -1, np.int32(1))))
        else:
            key.append(slice(bound(n), bound(n), rng.choice((None, None, 1, 2, 3, 0, -1))))
    return tuple(key)


def test_plain_subscripts_resolve_as_before():
    rng = random.Random(0)
    for _ in range(5000):
        shape = tuple(rng.choice((1, 4, 7, 128)) for _ in range(rng.randint(1, 3)))
        pdim = rng.choice((None, 0))
        key = _random_key(rng, shape)
        try:
            expected = _reference_basic(shape, key, pdim)
        except KernelError as e:
            with pytest.raises(KernelError) as got:
                resolve(shape, key, pdim)
            assert str(got.value) == str(e)
            continue
        r = resolve(shape, key, pdim)
        assert (r.kind, r.shape, r.key, r.perm, r.reshape, r.valid) == ("basic", *expected, None, None, None)
        assert np.empty(shape)[r.key].size == np.prod(r.shape)
