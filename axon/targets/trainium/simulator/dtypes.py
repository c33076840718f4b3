"""NKI data types mapped onto NumPy / ml_dtypes.

Invariant: every dtype the simulator stores is a `numpy.dtype`; `nl.bfloat16` and friends *are*
those dtypes, so `tile.dtype == nl.bfloat16` works in kernels. Engines compute in float32 and
round to the destination dtype with `astype` (round-to-nearest-even, as ml_dtypes implements).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from axon.errors import KernelError

float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
# tfloat32 is stored as float32: the Tensor Engine reads it with a 10-bit mantissa, which
# the simulator does not model (documented approximation).
tfloat32 = float32
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
int8, int16, int32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
uint8, uint16, uint32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
bool_ = np.dtype(np.bool_)

# Names exported into nki.language.
EXPORTED = {
    "float32": float32, "float16": float16, "bfloat16": bfloat16, "tfloat32": tfloat32,
    "float8_e4m3": float8_e4m3, "float8_e4m3fn": float8_e4m3fn, "float8_e5m2": float8_e5m2,
    "int8": int8, "int16": int16, "int32": int32, "uint8": uint8, "uint16": uint16,
    "uint32": uint32, "bool_": bool_,
}
# MX packed types (several narrow floats per element, with shared scales): named so kernels can
# compare against them, refused wherever a tensor would hold them.
MX_PACKED = {name: np.dtype([(name, np.uint8, (nbytes,))]) for name, nbytes in
             (("float8_e4m3fn_x4", 4), ("float8_e5m2_x4", 4), ("float4_e2m1fn_x4", 2))}
_BY_NAME = dict(EXPORTED)
_BY_NAME.update({"fp32": float32, "bf16": bfloat16, "fp16": float16, "float": float32,
                 "int": int32, "bool": bool_})
_SUPPORTED = set(EXPORTED.values()) | {np.dtype(np.float64), np.dtype(np.int64)}


def to_dtype(value) -> np.dtype:
    """Accept an nl dtype, a NumPy dtype or type, or a dtype name."""
    if isinstance(value, np.dtype):
        dt = value
    elif isinstance(value, str) and value in _BY_NAME:
        dt = _BY_NAME[value]
    else:
        try:
            dt = np.dtype(value)
        except TypeError:
            raise KernelError(f"unsupported dtype {value!r}") from None
    if dt == np.float64:  # NumPy inputs default to float64; NKI has no fp64 engine type
        raise KernelError("float64 is not an NKI data type (use nl.float32)")
    if dt == np.int64:
        raise KernelError("int64 is not an NKI data type (use nl.int32)")
    for packed, pdt in MX_PACKED.items():
        if dt == pdt:
            raise KernelError(f"MX packed dtype nl.{packed} is not supported by the Axon NKI simulator")
    if dt not in _SUPPORTED:
        raise KernelError(f"unsupported dtype {dt}")
    return dt


def name(dt: np.dtype) -> str:
    return dt.name


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt in (bfloat16, float8_e4m3, float8_e4m3fn, float8_e5m2)
