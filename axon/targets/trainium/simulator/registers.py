"""Virtual registers and dynamic loops: `nisa.register_alloc / register_move / register_load`,
`nl.dynamic_range(start, stop, step)` whose bounds may be registers, and `while reg:`.

A register holds a 32-bit integer the engine sequencers keep [nki.isa.register_alloc docs]; a loop
over register bounds runs its iterations on the sequencers, so the simulation, which knows the
register's value, runs the body that many times (a sequential loop). Sequencer work (moves,
loads into registers, branches) is not an engine instruction and adds nothing to the trace.

Invariant: a register's value comes only from a constant, another register or a one-element
tensor read with data (a timing-only simulation has no values to read).
"""
from __future__ import annotations

import numbers

import numpy as np

from axon.errors import KernelError

from .memory import Tile
from .operands import check_init


class VirtualRegister:
    """nki.isa.VirtualRegister: what register_alloc returns."""

    __slots__ = ("value",)

    def __init__(self, value=None):
        self.value = value

    def get(self, what="register") -> int:
        if self.value is None:
            raise KernelError(f"{what} is read before any value was moved or loaded into it")
        return self.value

    def __bool__(self):  # `while reg:` loops while the register is non-zero
        return self.get() != 0

    def __repr__(self):
        return f"<VirtualRegister {self.value}>"


def _int32(value, what) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise KernelError(f"{what} must be a compile-time integer or a register, got {value!r}")
    v = int(value)
    if not -2**31 <= v < 2**32:
        raise KernelError(f"{what} {v} does not fit a 32-bit register")
    return v


def _load(ctx, src, what) -> int:
    if not isinstance(src, Tile):
        raise KernelError(f"{what} must be a tensor with one element, got {type(src).__name__}")
    if int(np.prod(src.shape)) != 1:
        raise KernelError(f"{what} must hold exactly one element, got shape {src.shape}")
    if ctx.timing_only:
        raise KernelError(f"{what}: loading a register from a tensor needs its data (timing-only "
                          f"simulation has none)")
    check_init(src, "register_load", "src")
    v = np.asarray(src.values()).reshape(-1)[0]
    if not float(v).is_integer():
        raise KernelError(f"{what} holds {v}, not an integer")
    return int(v)


def register_alloc(ctx, x=None, **_):
    """A new register: uninitialised, a constant, or the value of a one-element tensor."""
    if x is None:
        return VirtualRegister()
    if isinstance(x, Tile):
        return VirtualRegister(_load(ctx, x, "nisa.register_alloc(x)"))
    return VirtualRegister(_int32(x, "nisa.register_alloc(x)"))


def register_move(ctx, dst, src=None, imm=None, **_):
    value = imm if src is None else src
    reg = _register(dst, "register_move")
    reg.value = value.get("nisa.register_move's source register") if isinstance(value, VirtualRegister) \
        else _int32(value, "nisa.register_move's value")


def register_load(ctx, dst, src, **_):
    _register(dst, "register_load").value = _load(ctx, src, "nisa.register_load's src")


def _register(reg, opc) -> VirtualRegister:
    if not isinstance(reg, VirtualRegister):
        raise KernelError(f"nisa.{opc}: dst must be a register from nisa.register_alloc, got {type(reg).__name__}")
    return reg


def dynamic_range(ctx, *args, **_):
    """nl.dynamic_range(stop) / (start, stop[, step]): bounds are ints or registers."""
    if not 1 <= len(args) <= 3:
        raise KernelError(f"nl.dynamic_range takes 1 to 3 bounds, got {len(args)}")
    bounds = [a.get("a dynamic_range bound") if isinstance(a, VirtualRegister) else _int32(a, "a loop bound")
              for a in args]
    return ctx.loop(range(*bounds), True, "dynamic_range")
