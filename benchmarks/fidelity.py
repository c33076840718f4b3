"""Run the public NKI kernels unchanged in Axon's simulator and model, and write
benchmarks/results/fidelity.md.

    .venv/bin/python benchmarks/fidelity.py --corpus /tmp/corpus [--only NAME] [--jobs 2]

DIR holds checkouts fetched with the search tool's `fetch` (never committed):
    DIR/nki-samples           aws-neuron/nki-samples at HEAD
    DIR/nki-samples-fc5c69f   aws-neuron/nki-samples at fc5c69f (beta-1 tutorials, reference kernels)
    DIR/AccelOpt              zhang677/AccelOpt (NKIBench)
    DIR/nki-library           aws-neuron/nki-library

Each kernel runs from its own file, given only array inputs, scalar arguments and an SPMD grid,
at the shapes its own test, reference or benchmark code uses (the table below records those
facts). NKIBench kernels take their inputs and NumPy reference from
`NKIBench/reference/<name>_numpy_N.py` (`get_inputs`, `transform_to_nki_inputs`, `forward`);
the other references are NumPy written here from the kernels' documented meaning. An output
matches when it is within rtol = atol/max|ref| = 2e-3 (float32 outputs), 3e-2 (16-bit) or 2**-4 (fp8) of the
reference elementwise, relative to max|ref|. Latencies are the model's trn1 estimate (nki-library:
trn2, the platform its tests run on; SPMD
instances run one after another on one NeuronCore, their instructions scheduled as one stream);
"measured" comes from ../shared/fidelity.md where that file gives the same kernel at the same
shape.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import multiprocessing as mp
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGET = "trn1"
TIME_LIMIT_S = 900.0


@dataclass
class Entry:
    corpus: str
    path: str  # relative to the corpus checkout
    func: str
    inputs: Callable[[np.random.Generator], dict] | None = None
    args: dict = field(default_factory=dict)
    grid: tuple | None = None
    reference: Callable | None = None  # reference(**inputs, **args) -> output(s)
    nkibench: str | None = None  # NKIBench reference module name
    measured_ms: float | None = None
    measured_spill_mb: float | None = None  # the profile's "spill reload MB" (shared/fidelity.md)
    note: str = ""
    target: str = TARGET  # the NeuronCore its own tests run on
    unpack: Callable | None = None  # unpack(outputs) -> what the reference returns (a packed layout's parts)
    compute_dtype: str | None = None  # a 16-bit arithmetic the kernel documents (mixed precision):
    # its outputs are judged at the 16-bit tolerance whatever their own dtype

    @property
    def name(self):
        return f"{self.corpus}:{self.path}:{self.func}"


# ----- NumPy references (written for this study from each kernel's meaning) -----------------

def _f32(x):
    return np.asarray(x, dtype=np.float32)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_add(a_input, b_input):
    return _f32(a_input) + _f32(b_input)


def ref_matmul(lhsT, rhs, **_):
    return _f32(lhsT).T @ _f32(rhs)


def ref_transpose2d(in_tensor, shape2D):
    P = in_tensor.shape[0]
    X, Y = shape2D
    return in_tensor.reshape(P, X, Y).transpose(0, 2, 1).reshape(P, X * Y)


def ref_avgpool(in_tensor, pool_size):
    c, h, w = in_tensor.shape
    x = _f32(in_tensor).reshape(c, h // pool_size, pool_size, w // pool_size, pool_size)
    return x.mean(axis=(2, 4))


def ref_rmsnorm(a_tensor, g_tensor):
    a = _f32(a_tensor)
    return a / np.sqrt(np.mean(a * a, axis=1, keepdims=True)) * _f32(g_tensor)


def ref_layernorm(input_tensor, epsilon, gamma_vector, beta_vector):
    x = _f32(input_tensor)
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * _f32(gamma_vector) + _f32(beta_vector)


def ref_softmax(a_tensor):
    return _softmax(_f32(a_tensor), axis=1)


def ref_mamba(delta, u, A, B, C):
    delta, u, A, B, C = map(_f32, (delta, u, A, B, C))
    dA = np.exp(delta[:, :, None, :] * A[None, :, :, None])  # [b, ch, state, seq]
    dBu = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    state = np.zeros(dA.shape[:-1], np.float32)
    out = np.empty_like(dA)
    for t in range(dA.shape[-1]):
        state = dA[..., t] * state + dBu[..., t]
        out[..., t] = state
    return (C[:, None, :, :] * out).sum(axis=2)


def ref_attn_tutorial(q, k, v):  # q, k, v: [d_head, seqlen]
    s = _f32(q).T @ _f32(k)
    return _softmax(s, axis=1) @ _f32(v).T


def ref_sd_attention_tutorial(q_ref, k_ref, v_ref, **_):  # [seqlen, d]
    s = (_f32(q_ref) * 0.125) @ _f32(k_ref).T
    return _softmax(s, axis=-1) @ _f32(v_ref)


def ref_sd_attention(q_ref, k_ref, v_ref, **_):  # q [bs, d, seqlen], k [bs, seqlen, d] or [bs, d, seqlen]
    q = _f32(q_ref) * 0.125
    k = _f32(k_ref) if k_ref.shape[1] != q_ref.shape[1] else _f32(k_ref).transpose(0, 2, 1)
    s = np.matmul(q.transpose(0, 2, 1), k.transpose(0, 2, 1))
    return np.matmul(_softmax(s, axis=-1), _f32(v_ref))


def ref_sd_attention_t(q_ref, k_ref, v_ref, **_):  # the allocated kernel stores (softmax(q.T k) v).T
    return ref_sd_attention(q_ref, k_ref, v_ref).transpose(0, 2, 1)


def ref_rotary(q, k, cos, sin):  # q, k: [b, h, seq, d]; cos, sin: [b, seq, d]
    def rot(x):
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    c, s = _f32(cos)[:, None], _f32(sin)[:, None]
    q, k = _f32(q), _f32(k)
    return np.stack([q * c + rot(q) * s, k * c + rot(k) * s])


def ref_rms_norm_qkv(hidden, weights, eps=1e-6, **_):
    h = _f32(hidden)
    rms = np.sqrt(np.mean(np.square(h), axis=-1, keepdims=True))
    return (h / (rms + eps)) @ _f32(weights)


def ref_adaptive_avg_pool2d(in_tensor, output_size):
    x = _f32(in_tensor)
    N, C, H, W = x.shape
    oh = ow = output_size
    out = np.zeros((N, C, oh, ow), np.float32)
    for i in range(oh):
        h0, h1 = (i * H) // oh, -((-(i + 1) * H) // oh)
        for j in range(ow):
            w0, w1 = (j * W) // ow, -((-(j + 1) * W) // ow)
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return out


def ref_resize_nearest(data_tensor, out_shape):
    b, h, w, c = data_tensor.shape
    ob, oh, ow, oc = out_shape
    hi = np.floor(np.arange(oh) * (h / oh)).astype(int)
    wi = np.floor(np.arange(ow) * (w / ow)).astype(int)
    return _f32(data_tensor)[:, hi][:, :, wi]


def ref_select_and_scatter(operand_tensor, source_tensor):  # window 3x3, stride 2, padding 1
    x, src = _f32(operand_tensor), _f32(source_tensor)
    N, C, H, W = x.shape
    pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    out = np.zeros((N, C, H + 2, W + 2), np.float32)
    for i in range(src.shape[2]):
        for j in range(src.shape[3]):
            win = pad[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].reshape(N, C, 9)
            idx = win.argmax(axis=-1)
            for n in range(N):
                for c in range(C):
                    di, dj = divmod(idx[n, c], 3)
                    out[n, c, 2 * i + di, 2 * j + dj] += src[n, c, i, j]
    return out[:, :, 1:-1, 1:-1]


def ref_flash_fwd(q, k, v, seed=None, use_causal_mask=True, **_):  # q, k [b, h, d, s]; v [b, h, s, d]
    """The output and, as FlashConfig's default (training=True) also returns it, the row
    log-sum-exp of the scaled scores laid out [b, h, 128, s / 128] (row t * 128 + p at [p, t])."""
    q, k, v = _f32(q), _f32(k), _f32(v)
    b, h, d, S = q.shape
    s = np.matmul(q.transpose(0, 1, 3, 2), k) / math.sqrt(d)
    if use_causal_mask:
        Q, K = s.shape[-2:]
        s = np.where(np.arange(K)[None, :] <= np.arange(Q)[:, None], s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    lse = (top + np.log(np.exp(s - top).sum(axis=-1, keepdims=True)))[..., 0]
    return np.matmul(_softmax(s, axis=-1), v), lse.reshape(b, h, S // 128, 128).transpose(0, 1, 3, 2)


def ref_add_nx8(a_ptr, b_ptr, n_elements):
    return _f32(a_ptr) + _f32(b_ptr)


# ----- inputs --------------------------------------------------------------------------------

def _rand(rng, shape, dtype="float32", low=0.0, high=1.0):
    from axon.targets.trainium.runner import numpy_dtype

    return rng.uniform(low, high, size=shape).astype(np.float32).astype(numpy_dtype(dtype))


def _attn_inputs(seqlen):
    return lambda rng: {n: _rand(rng, (128, seqlen), low=-1.0) for n in ("q", "k", "v")}


def _matmul_inputs(M, K, N, dtype="bfloat16"):
    return lambda rng: {"lhsT": _rand(rng, (K, M), dtype), "rhs": _rand(rng, (K, N), dtype)}


def _mamba_inputs(rng, batch=1, channels=256, state=16, seq=512):
    return {"delta": _rand(rng, (batch, channels, seq), high=0.1), "u": _rand(rng, (batch, channels, seq)),
            "A": -_rand(rng, (channels, state)), "B": _rand(rng, (batch, state, seq)),
            "C": _rand(rng, (batch, state, seq))}


def _rotary_inputs(rng, b=2, h=32, seq=128, d=128):
    pos = np.arange(seq, dtype=np.float32)
    inv = 1.0 / (10000 ** (np.arange(0, d, 2, dtype=np.float32) / d))
    freqs = np.concatenate([pos[:, None] * inv[None, :]] * 2, axis=-1)
    cos = np.broadcast_to(np.cos(freqs), (b, seq, d)).astype(np.float32)
    sin = np.broadcast_to(np.sin(freqs), (b, seq, d)).astype(np.float32)
    return {"q": _rand(rng, (b, h, seq, d), low=-1.0), "k": _rand(rng, (b, h, seq, d), low=-1.0),
            "cos": cos, "sin": sin}


S = "nki-samples-fc5c69f"
H = "nki-samples"
T = "src/nki_samples/tutorials/"
R = "src/nki_samples/reference/"
ATTN = [("attn_fwd_v1", 128), ("attn_fwd_v2", 128)] + [(f"attn_fwd_v{i}", 4096) for i in
                                                       ("3", "4", "5", "6", "7", "8", "8a", "9", "10", "11")]
# from v7 on, the tutorial casts the softmax scores and V to bfloat16 for the second matmul
ATTN_BF16 = {name: "bfloat16" for name in ("attn_fwd_v7", "attn_fwd_v8", "attn_fwd_v8a", "attn_fwd_v9",
                                           "attn_fwd_v10", "attn_fwd_v11")}
MATMULS = [("nki_matmul_basic_", (64, 128, 512)), ("nki_matmul_tiled_", (4096, 1024, 2048)),
           ("nki_matmul_hoist_load_", (4096, 1024, 2048)), ("nki_matmul_block_free_dimension_", (4096, 1024, 2048)),
           ("nki_matmul_fully_optimized_", (4096, 1024, 2048))]


def tutorial_entries(corpus: str) -> list[Entry]:
    mamba_measured = {"mamba_v1": 172.93e-3}
    out = []
    for name, seqlen in ATTN:
        out.append(Entry(S, T + "attention_fwd_performance/attention_kernels.py", name, _attn_inputs(seqlen),
                         reference=ref_attn_tutorial, compute_dtype=ATTN_BF16.get(name)))
    out += [
        Entry(S, T + "average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel",
              lambda rng: {"in_tensor": np.arange(2 * 6 * 6, dtype=np.float32).reshape(2, 6, 6)},
              args={"pool_size": 2}, reference=ref_avgpool),
        Entry(S, T + "layernorm/layernorm_nki_kernel.py", "nki_layernorm_kernel_v1",
              lambda rng: {"input_tensor": _rand(rng, (4096, 8192)), "gamma_vector": _rand(rng, (8192,)),
                           "beta_vector": _rand(rng, (8192,))}, args={"epsilon": 1e-5}, reference=ref_layernorm),
        Entry(S, T + "layernorm/layernorm_nki_kernel.py", "nki_layernorm_kernel_v2",
              lambda rng: {"input_tensor": _rand(rng, (4096, 8192)), "gamma_vector": _rand(rng, (8192,)),
                           "beta_vector": _rand(rng, (8192,))}, args={"epsilon": 1e-5}, reference=ref_layernorm),
    ]
    for name in ("mamba_v1", "mamba_v2", "mamba_v3"):
        out.append(Entry(S, T + "fused_mamba/mamba_nki_kernels.py", name, _mamba_inputs, reference=ref_mamba,
                         measured_ms=mamba_measured.get(name)))
    for name, (M, K, N) in MATMULS:
        out.append(Entry(S, T + "matrix_multiplication/matrix_multiplication_nki_kernels.py", name,
                         _matmul_inputs(M, K, N), reference=ref_matmul))
    out += [
        Entry(S, T + "rmsnorm/rmsnorm_nki_kernels.py", "nki_rmsnorm_kernel",
              lambda rng: {"a_tensor": _rand(rng, (250, 512)), "g_tensor": _rand(rng, (512,))},
              reference=ref_rmsnorm),
        Entry(S, T + "rotary/rotary_nki_kernels.py", "nki_apply_rotary_embedding", _rotary_inputs,
              grid=(2, 32), reference=ref_rotary),
        Entry(S, T + "sd_attention/sd_attention_nki_kernels.py", "fused_self_attn_for_SD_small_head_size",
              lambda rng: {n: _rand(rng, (4096, 64)) for n in ("q_ref", "k_ref", "v_ref")},
              reference=ref_sd_attention_tutorial),
        Entry(S, T + "softmax/softmax_nki_kernels.py", "nki_softmax_kernel",
              lambda rng: {"a_tensor": np.array([[1., 2., 3., 4., 5.], [5., 4., 3., 2., 1.]], np.float32)},
              reference=ref_softmax),
        Entry(S, T + "tensor_addition/spmd_tensor_addition_nki_kernels.py", "nki_tensor_add_kernel_",
              lambda rng: {"a_input": _rand(rng, (256, 1024), "bfloat16"), "b_input": _rand(rng, (256, 1024), "bfloat16")},
              grid=(2, 2), reference=ref_add),
        Entry(S, T + "tensor_addition/tensor_addition_nki_kernels.py", "nki_tensor_add_kernel_",
              lambda rng: {"a_input": _rand(rng, (256, 1024), "bfloat16"), "b_input": _rand(rng, (256, 1024), "bfloat16")},
              grid=(2, 2), reference=ref_add),
        Entry(S, T + "transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_",
              lambda rng: {"in_tensor": np.arange(5 * 37 * 44).astype(np.int8).reshape(5, 37 * 44)},
              args={"shape2D": (37, 44)}, reference=ref_transpose2d),
    ]
    # nki-samples HEAD: the current-API matmul tutorial (the other tutorials are the same files)
    for name, (M, K, N) in MATMULS:
        out.append(Entry(H, T + "matrix_multiplication/matrix_multiplication_nki_kernels.py", name,
                         _matmul_inputs(M, K, N), reference=ref_matmul))
    return out


def reference_entries() -> list[Entry]:
    return [
        Entry(S, R + "attention.py", "fused_self_attn_for_SD_small_head_size",
              lambda rng: {"q_ref": _rand(rng, (1, 128, 4096)), "k_ref": _rand(rng, (1, 4096, 128)),
                           "v_ref": _rand(rng, (1, 4096, 128))}, grid=(1,), reference=ref_sd_attention),
        Entry(S, R + "allocated_attention.py", "allocated_fused_self_attn_for_SD_small_head_size",
              lambda rng: {"q_ref": _rand(rng, (1, 128, 4096)), "k_ref": _rand(rng, (1, 128, 4096)),
                           "v_ref": _rand(rng, (1, 4096, 128))}, grid=(1,), reference=ref_sd_attention_t,
              compute_dtype="bfloat16"),  # mixed_precision (default): Tensor Engine work in bfloat16
        Entry(S, R + "allocated_fused_linear.py", "allocated_fused_rms_norm_qkv",
              lambda rng: {"hidden": _rand(rng, (1, 128, 512), "float16"), "weights": _rand(rng, (512, 512), "float16")},
              reference=ref_rms_norm_qkv),
        Entry(S, R + "vision.py", "adaptive_avg_pool2d_kernel",
              lambda rng: {"in_tensor": rng.standard_normal((1, 64, 56, 56)).astype(np.float32)},
              args={"output_size": 7}, reference=ref_adaptive_avg_pool2d),
        Entry(S, R + "vision.py", "resize_nearest_fixed_dma_kernel",
              lambda rng: {"data_tensor": _rand(rng, (1, 30, 20, 1280), "float16")},
              args={"out_shape": (1, 59, 38, 1280)}, grid=(1,), reference=ref_resize_nearest),
        Entry(S, R + "vision.py", "select_and_scatter_kernel",
              lambda rng: {"operand_tensor": _rand(rng, (8, 64, 112, 112)), "source_tensor": _rand(rng, (8, 64, 56, 56))},
              reference=ref_select_and_scatter),
        Entry(S, R + "tutorial.py", "add_kernel_nx8x128x512",
              lambda rng: {"a_ptr": _rand(rng, (4, 8, 128, 512)), "b_ptr": _rand(rng, (4, 8, 128, 512))},
              args={"n_elements": 4 * 8 * 128 * 512}, grid=(4,), reference=ref_add_nx8),
        Entry(S, R + "attention.py", "flash_fwd",
              lambda rng: {"q": _rand(rng, (1, 1, 128, 4096), low=-1.0), "k": _rand(rng, (1, 1, 128, 4096), low=-1.0),
                           "v": _rand(rng, (1, 1, 4096, 128), low=-1.0), "seed": None},
              args={"use_causal_mask": True, "mixed_precision": True}, grid=(1, 1), reference=ref_flash_fwd,
              compute_dtype="bfloat16"),  # mixed_precision: its matmuls take bfloat16 operands
    ]


# ----- nki-library (aws-neuron/nki-library: the package nkilib, current NKI API, trn2) ----------
# Each kernel runs from its package folder (relative imports, the package __init__) at a shape its
# own test (test/integration/nkilib/...) uses, on trn2 (the tests' default platform) with the
# tests' logical NeuronCore count: LNC=2 is a grid of 2 programs. Enum arguments are the kernel
# package's own (KernelValue). Kernels considered and why each is in or out (a fair sample: every
# entry below was run, whether it passes or not):
#   in:  cumsum; subkernels rmsnorm_tkg, layernorm_tkg; embeddings RoPE, rope_hf; attention attention_cte;
#        qkv qkv_cte, qkv_tkg; rmsnorm rmsnorm_quant_kernel (fp8 row quantization); mlp (the entry
#        point: its file does not parse in this snapshot); output_projection _cte, _tkg;
#        router_topk; topk rotational_topk (its host-side config needs scipy); max cascaded_max;
#        experimental conv1d, cross_entropy_forward, dynamic_elementwise_add.
#   out: attention_tkg, attention_bwd, gen_mask_tkg (attention_tkg takes an AttnTKGConfig and an
#        SbufManager its test builds inside its own jit wrapper, with torch-made masks);
#        mlp_cte / mlp_tkg (take an MLPParameters that only mlp() builds); moe_cte, moe_tkg,
#        moe_block (MX/fp8 expert weights, not yet tried); subkernels find_nonzero_indices,
#        indexed_flatten, rmsnorm_mx_quantize_tkg and
#        experimental collectives, transformer, moe (multi-device, MX or helper subkernels).

def _dtype(name: str):
    from axon.targets.trainium.runner import numpy_dtype

    return numpy_dtype(name)


def _normal(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(np.float32).astype(_dtype(dtype))


def _tkg_layout(y):  # [B, S, H] -> [128, B*S, H/128], H split as (128, H/128)
    b, s, h = y.shape
    return y.reshape(b * s, 128, h // 128).transpose(1, 0, 2)


def ref_cumsum(x, **_):
    return np.cumsum(_f32(x), axis=-1)


def ref_rmsnorm_tkg(input, gamma, output, eps=1e-6, **_):  # noqa: A002 - the kernel's own names
    x = _f32(input)
    return _tkg_layout(x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * _f32(gamma))


def ref_layernorm_tkg(input, gamma, output, beta=None, eps=1e-6, **_):  # noqa: A002
    x = _f32(input)
    y = (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + eps) * _f32(gamma)
    return _tkg_layout(y + (0.0 if beta is None else _f32(beta)))


def ref_rope(x_in, cos, sin, **_):  # x [d, B, n_heads, S], cos/sin [d/2, B, S]; halves rotate
    x, c, s = _f32(x_in), _f32(cos)[:, :, None, :], _f32(sin)[:, :, None, :]
    x1, x2 = np.split(x, 2, axis=0)
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c])


def ref_rope_hf(q, k, q_out, k_out, cos, sin, **_):  # [b, heads, seq, d], cos/sin [b, seq, d]
    def rot(x):  # (x1, x2) -> (-x2, x1) over the head dimension's halves
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    c, s = _f32(cos)[:, None], _f32(sin)[:, None]
    return [_f32(q) * c + rot(_f32(q)) * s, _f32(k) * c + rot(_f32(k)) * s]


def ref_attention_cte(q, k, v, scale=1.0, causal_mask=True, tp_q=True, tp_out=False, **_):
    q = _f32(q) if tp_q else _f32(q).transpose(0, 2, 1)  # [b, sq, d]
    s = scale * np.matmul(q, _f32(k))  # k [b, d, skv]
    if causal_mask:
        sq, skv = s.shape[-2:]
        s = np.where(np.arange(skv)[None, :] <= np.arange(sq)[:, None], s, -np.inf)
    o = np.matmul(_softmax(s, axis=-1), _f32(v))
    return o.transpose(0, 2, 1) if tp_out else o


def ref_qkv_cte_rms_fused_add(input, fused_qkv_weights, mlp_prev, attention_prev, gamma_norm_weights,  # noqa: A002
                              norm_eps=1e-6, **_):
    h = _f32(input) + _f32(mlp_prev) + _f32(attention_prev)
    h = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + norm_eps) * _f32(gamma_norm_weights)
    return h @ _f32(fused_qkv_weights)


def ref_mlp_rms_fused_add(hidden_tensor, gate_proj_weights_tensor, up_proj_weights_tensor, down_proj_weights_tensor,
                          normalization_weights_tensor, fused_add_tensor, eps=1e-6, **_):  # SiLU gate
    h = _f32(hidden_tensor) + _f32(fused_add_tensor)
    h = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + eps) * _f32(normalization_weights_tensor)
    gate = h @ _f32(gate_proj_weights_tensor)
    return (gate / (1.0 + np.exp(-gate)) * (h @ _f32(up_proj_weights_tensor))) @ _f32(down_proj_weights_tensor)


def ref_output_projection(attention, weight, bias=None, **_):  # attention [B, N, D, S] -> [B, S, H]
    b, n, d, s = attention.shape
    out = _f32(attention).transpose(0, 3, 1, 2).reshape(b, s, n * d) @ _f32(weight)
    return out + (0.0 if bias is None else _f32(bias))


def ref_output_projection_tkg(attention, weight, bias=None, **_):  # attention [D, B, N, S] -> [B*S, H]
    d, b, n, s = attention.shape
    out = _f32(attention).transpose(1, 3, 2, 0).reshape(b * s, n * d) @ _f32(weight)
    return out + (0.0 if bias is None else _f32(bias))


def ref_router_topk_softmax_after(x, w, w_bias, router_logits, expert_affinities, expert_index, k, **_):
    """x [H, T]: logits = x.T @ w + bias; the k largest per token (descending); their softmax,
    scattered back to the experts they came from."""
    logits = _f32(x).T @ _f32(w) + _f32(w_bias)
    index = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
    top = np.take_along_axis(logits, index, axis=-1)
    affinities = np.zeros_like(logits)
    np.put_along_axis(affinities, index, _softmax(top, axis=-1), axis=-1)
    return [logits, index, affinities]


def ref_topk_sorted(inp, config=None, k=256, **_):  # the k largest per row, descending, and their indices
    x = _f32(inp)
    index = np.argsort(-x, axis=-1, kind="stable")[:, :k]
    return [np.take_along_axis(x, index, axis=-1), index]


def ref_cascaded_max(input_tensor):  # [B, S, V] -> the max over V and its index, each [B, S, 1]
    x = _f32(input_tensor)
    return [x.max(axis=-1, keepdims=True), x.argmax(axis=-1)[..., None]]


def ref_conv1d(x_in, filters, bias=None, stride=1, padding=(0, 0), dilation=1, **_):
    """x [B, C_in, L], filters [K, C_in, C_out] -> GELU(conv + bias) [B, C_out, L_out] (cross-correlation)."""
    x = np.pad(_f32(x_in), ((0, 0), (0, 0), tuple(padding)))
    k = filters.shape[0]
    n_out = (x.shape[-1] - dilation * (k - 1) - 1) // stride + 1
    taps = [x[:, :, i * dilation: i * dilation + stride * (n_out - 1) + 1: stride] for i in range(k)]
    y = sum(np.einsum("bcl,co->bol", t, _f32(filters)[i]) for i, t in enumerate(taps))
    y = y + (0.0 if bias is None else _f32(bias)[None, :, None])
    erf = np.vectorize(math.erf)
    return 0.5 * y * (1.0 + erf(y / math.sqrt(2.0)))


def ref_cross_entropy(logits_hbm, targets_hbm, **_):  # per position: lse - logit[target], and the lse
    x = _f32(logits_hbm)
    top = x.max(axis=-1, keepdims=True)
    lse = (top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True)))[:, 0]
    return [lse - x[np.arange(x.shape[0]), targets_hbm], lse]


def ref_rmsnorm_fp8_row_quant(hidden, ln_w, eps=1e-6, **_):
    """RMSNorm (x / (rms + eps) * gamma, as its test's golden), then per-row FP8 (e4m3, range 240)
    quantization: the quantized row and its float32 dequantization scale max|row| / 240."""
    x = _f32(hidden)
    norm = x / (np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) + eps) * _f32(ln_w).reshape(-1)
    scale = np.abs(norm).max(axis=-1, keepdims=True) / 240.0
    import ml_dtypes  # NKI's float8_e4m3 is the IEEE-style e4m3 (largest finite 240), not e4m3fn

    return [(norm / scale).astype(ml_dtypes.float8_e4m3), scale]


def unpack_fp8_rows_with_scale(out):  # [B, S, H + 4] fp8: H values, then the fp32 scale's 4 bytes
    q = np.asarray(out)
    return [q[..., :-4], np.ascontiguousarray(q[..., -4:]).view(np.float32)]


def ref_dynamic_add(input_a, input_b, num_m_tiles):  # the first num_m_tiles * 128 rows hold a + b
    rows = int(num_m_tiles.reshape(-1)[0]) * 128
    return (_f32(input_a) + _f32(input_b))[:rows]


L = "src/nkilib_src/nkilib/"


def library_entries() -> list[Entry]:
    from axon.targets.trainium.simulator import KernelValue

    lib = "nki-library"
    return [
        Entry(lib, L + "core/cumsum/cumsum.py", "cumsum",  # test_cumsum_fast 64_1024_3_4_bfloat16
              lambda rng: {"x": _normal(rng, (64, 4, 1024), "bfloat16")}, grid=(2,), reference=ref_cumsum,
              target="trn2"),
        Entry(lib, L + "core/subkernels/rmsnorm_tkg.py", "rmsnorm_tkg",  # lnc 1, b 1, s 8, h 8192, fp16
              lambda rng: {"input": _normal(rng, (1, 8, 8192), "float16"), "gamma": _normal(rng, (1, 8192), "float16"),
                           "output": np.zeros((128, 8, 64), np.float16)},
              reference=ref_rmsnorm_tkg, target="trn2"),
        Entry(lib, L + "core/subkernels/layernorm_tkg.py", "layernorm_tkg",  # lnc 1, b 1, s 8, h 8192, fp16
              lambda rng: {"input": _normal(rng, (1, 8, 8192), "float16"), "gamma": _normal(rng, (1, 8192), "float16"),
                           "beta": _normal(rng, (1, 8192), "float16"), "output": np.zeros((128, 8, 64), np.float16)},
              reference=ref_layernorm_tkg, target="trn2"),
        Entry(lib, L + "core/embeddings/rope.py", "RoPE",  # test_rope_manual (128, 4, 8, 1024), contiguous
              lambda rng: {"x_in": _normal(rng, (128, 4, 8, 1024), "bfloat16"),
                           "cos": _normal(rng, (64, 4, 1024), "bfloat16"), "sin": _normal(rng, (64, 4, 1024), "bfloat16")},
              args={"lnc_shard": True, "contiguous_layout": True, "relayout_in_sbuf": False}, grid=(2,),
              reference=ref_rope, target="trn2"),
        Entry(lib, L + "core/embeddings/rope_hf.py", "rope_hf",  # (2, 16, 4, 512, 128, bf16, forward), lnc 2
              lambda rng: {"q": _normal(rng, (2, 16, 512, 128), "bfloat16"), "k": _normal(rng, (2, 4, 512, 128), "bfloat16"),
                           "q_out": np.zeros((2, 16, 512, 128), _dtype("bfloat16")),
                           "k_out": np.zeros((2, 4, 512, 128), _dtype("bfloat16")),
                           **{n: v.astype(_dtype("bfloat16")) for n, v in
                              _rotary_inputs(rng, b=2, h=1, seq=512, d=128).items() if n in ("cos", "sin")}},
              grid=(2,), reference=ref_rope_hf, target="trn2"),
        Entry(lib, L + "core/attention/attention_cte.py", "attention_cte",  # no_cp_unit [3, 2048, 2048, 128, fp16]
              lambda rng: {"q": _rand(rng, (3, 2048, 128), "float16"), "k": _rand(rng, (3, 128, 2048), "float16"),
                           "v": _rand(rng, (3, 2048, 128), "float16")},
              args={"scale": 1.0, "causal_mask": True, "tp_q": True, "tp_out": False}, grid=(2,),
              reference=ref_attention_cte, target="trn2"),
        Entry(lib, L + "core/qkv/qkv_cte.py", "qkv_cte",  # accuracy_unit [1, 1, 512, 1024, None, 512, bf16, RMS, add]
              lambda rng: {n: _normal(rng, s, "bfloat16") for n, s in (
                  ("input", (1, 512, 1024)), ("fused_qkv_weights", (1024, 512)), ("mlp_prev", (1, 512, 1024)),
                  ("attention_prev", (1, 512, 1024)), ("gamma_norm_weights", (1, 1024)))},
              args={"fused_residual_add": True, "fused_norm_type": KernelValue("NormType.RMS_NORM"), "norm_eps": 1e-6},
              reference=ref_qkv_cte_rms_fused_add, target="trn2"),
        Entry(lib, L + "core/qkv/qkv_tkg.py", "qkv_tkg",  # accuracy [lnc 1, B 4, S 1, H 4096, I 896, RMS, add]
              lambda rng: {n: _normal(rng, s, "bfloat16") for n, s in (
                  ("hidden", (4, 1, 4096)), ("qkv_w", (4096, 896)), ("norm_w", (1, 4096)),
                  ("mlp_prev", (4, 1, 4096)), ("attn_prev", (4, 1, 4096)))},
              args={"fused_add": True, "d_head": 128, "num_kv_heads": 1, "num_q_heads": 5,
                    "norm_type": KernelValue("NormType.RMS_NORM"), "eps": 1e-6},
              # with fused_add it also returns the residual sum hidden + mlp_prev + attn_prev
              reference=lambda hidden, qkv_w, norm_w, mlp_prev, attn_prev, eps, **_: [ref_qkv_cte_rms_fused_add(
                  hidden, qkv_w, mlp_prev, attn_prev, norm_w, eps), _f32(hidden) + _f32(mlp_prev) + _f32(attn_prev)],
              target="trn2"),
        Entry(lib, L + "core/rmsnorm/rmsnorm_quant.py", "rmsnorm_quant_kernel",
              # lnc_unit (seqlen 160, RMS norm, ROW quant, lower_bound 0, lnc 2, batch 1, hidden 16384), bf16
              lambda rng: {"hidden": _normal(rng, (1, 160, 16384), "bfloat16"), "ln_w": _normal(rng, (1, 16384), "bfloat16")},
              args={"kargs": KernelValue.call("RmsNormQuantKernelArgs", quantization_type=KernelValue(
                  "QuantizationType.ROW"), lower_bound=0.0, norm_type=KernelValue("NormType.RMS_NORM"), eps=1e-6)},
              grid=(2,), reference=lambda hidden, ln_w, kargs: ref_rmsnorm_fp8_row_quant(hidden, ln_w),
              unpack=unpack_fp8_rows_with_scale, target="trn2"),
        Entry(lib, L + "core/mlp/mlp.py", "mlp",  # mlp_cte unit [1, 1, 512, 1024, 448, RMS_NORM, fused_add, SiLU]
              lambda rng: {n: _normal(rng, s, "bfloat16") for n, s in (
                  ("hidden_tensor", (1, 512, 1024)), ("gate_proj_weights_tensor", (1024, 448)),
                  ("up_proj_weights_tensor", (1024, 448)), ("down_proj_weights_tensor", (448, 1024)),
                  ("normalization_weights_tensor", (1, 1024)), ("fused_add_tensor", (1, 512, 1024)))},
              args={"normalization_type": KernelValue("NormType.RMS_NORM"), "activation_fn": KernelValue("ActFnType.SiLU")},
              reference=ref_mlp_rms_fused_add, target="trn2"),
        Entry(lib, L + "core/output_projection/output_projection_cte/output_projection_cte.py",
              "output_projection_cte",  # unit (1, 1024, 3072, 16, 64, bias), bf16
              lambda rng: {"attention": _normal(rng, (1, 16, 64, 1024), "bfloat16"),
                           "weight": _normal(rng, (1024, 3072), "bfloat16"),
                           "bias": (100 * _normal(rng, (1, 3072))).astype(_dtype("bfloat16"))},
              grid=(2,), reference=ref_output_projection, target="trn2"),
        Entry(lib, L + "core/output_projection/output_projection_tkg.py", "output_projection_tkg",
              # [B 4, n_heads 8, S 4, d_head 64, H 3072, NONE, bias, no transpose]
              lambda rng: {"attention": _rand(rng, (64, 4, 8, 4), "bfloat16"), "weight": _rand(rng, (512, 3072), "bfloat16"),
                           "bias": (100 * _normal(rng, (1, 3072))).astype(_dtype("bfloat16"))},
              grid=(2,), reference=ref_output_projection_tkg, target="trn2"),
        Entry(lib, L + "core/router_topk/router_topk.py", "router_topk",
              # (128, 3072, 128, 4, SOFTMAX, bias, no pre-norm), x in HBM as [H, T]
              lambda rng: {"x": _rand(rng, (3072, 128), "bfloat16", -0.1, 0.1), "w": _rand(rng, (3072, 128), "bfloat16", -0.1, 0.1),
                           "w_bias": _rand(rng, (1, 128), "bfloat16", -0.1, 0.1),
                           "router_logits": np.zeros((128, 128), _dtype("bfloat16")),
                           "expert_affinities": np.zeros((128, 128), _dtype("bfloat16")),
                           "expert_index": np.zeros((128, 4), np.uint32)},
              args={"act_fn": KernelValue("common_types.RouterActFnType.SOFTMAX"), "k": 4, "x_hbm_layout": 0,
                    "x_sb_layout": 0, "router_pre_norm": False},
              grid=(2,), reference=ref_router_topk_softmax_after, target="trn2"),
        Entry(lib, L + "core/topk/rotational_topk.py", "rotational_topk",
              # topk_unit [lnc 2, batch 8, seqlen 5, vocab 4058, K 256, float32]; the config is built
              # by the package's own host functions, as the test does
              lambda rng: {"inp": _normal(rng, (40, 4058))},
              args={"config": KernelValue.call("prepare_rotational_constants", KernelValue.call(
                  "create_rotational_topk_config", inp_shape=(40, 4058), topk_config=KernelValue.call(
                      "create_topk_config", inp_shape=(8, 5, 4058), inp_dtype=np.dtype(np.float32), k=256,
                      sorted=True, num_programs=2)))},
              grid=(2,), reference=lambda inp, config: ref_topk_sorted(inp, k=256), target="trn2"),
        Entry(lib, L + "core/max/cascaded_max.py", "cascaded_max",  # unit [lnc 1, 8, 5, 4058, float32]
              lambda rng: {"input_tensor": _normal(rng, (8, 5, 4058))}, reference=ref_cascaded_max, target="trn2"),
        Entry(lib, L + "experimental/conv/conv1d.py", "conv1d",
              # basic (2, 64, 128, 40, K 5, stride 2, pad 2/2, dilation 2, bias, GELU, no lnc_shard, fp32)
              lambda rng: {"x_in": _normal(rng, (2, 64, 40)), "filters": _normal(rng, (5, 64, 128)),
                           "bias": _normal(rng, (128,))},
              args={"stride": 2, "padding": (2, 2), "dilation": 2, "activation_fn": KernelValue("ActFnType.GELU"),
                    "lnc_shard": False},
              grid=(2,), reference=ref_conv1d, target="trn2"),
        Entry(lib, L + "experimental/loss/cross_entropy.py", "cross_entropy_forward",
              # switch_transformers_fast minimal [B 1, T 1, V 32128, bfloat16, positions 1, chunk 32128]
              # (the "tiny" [1, 128, 129280, chunk 65535] needs two 128 KiB bfloat16 chunks live in
              # one instruction, more than a trn2 partition's SBUF: the simulator refuses it)
              lambda rng: {"logits_hbm": _normal(rng, (1, 32128), "bfloat16"),
                           "targets_hbm": rng.integers(0, 32128, size=(1,)).astype(np.int32)},
              args={"positions_per_batch": 1, "chunk_size": 32128}, grid=(2,), reference=ref_cross_entropy,
              target="trn2"),
        Entry(lib, L + "experimental/dynamic_shapes/dynamic_elementwise_add.py", "dynamic_elementwise_add",
              # fast (m 1024, h 2048), every M tile processed
              lambda rng: {"input_a": _normal(rng, (1024, 2048), "bfloat16"), "input_b": _normal(rng, (1024, 2048), "bfloat16"),
                           "num_m_tiles": np.array([[8]], np.int32)},
              grid=(2,), reference=ref_dynamic_add, target="trn2"),
    ]


# ----- NKIBench ------------------------------------------------------------------------------

def _measured_nkibench(column: int = 2) -> dict[str, float]:
    """A column of shared/fidelity.md's NKIBench table: 2 latency ms, 5 spill reload MB."""
    path = REPO.parent / "shared" / "fidelity.md"
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) > column and re.match(r"^[a-z_]+_[A-Z]\d", cells[0]):
                try:
                    out[cells[0]] = float(cells[column])
                except ValueError:
                    pass
    return out


def nkibench_entries(corpus: Path) -> list[Entry]:
    root = corpus / "AccelOpt" / "NKIBench"
    measured = _measured_nkibench()
    spill = _measured_nkibench(5)
    out = []
    for kfile in sorted((root / "kernels").glob("*_0.py")):
        name = kfile.stem[:-2]
        refs = sorted((root / "reference").glob(f"{name}_numpy_*.py"))
        out.append(Entry("AccelOpt", f"NKIBench/kernels/{kfile.name}", "kernel",
                         nkibench=str(refs[-1]) if refs else None, measured_ms=measured.get(name),
                         measured_spill_mb=spill.get(name)))
    return out


def _load_module(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ----- running one kernel --------------------------------------------------------------------

def _tolerance(dtype) -> float:
    size = np.dtype(dtype).itemsize
    # 8-bit floats (fp8 e4m3 outputs of quantizing kernels): 2**-4, so that one rounding step of a
    # 3-bit mantissa (a different but equally valid rounding of the same value) is within it
    return 2e-3 if size >= 4 else 3e-2 if size == 2 else 2.0 ** -4


def _compare(got, want, compute_dtype=None) -> tuple[bool, float]:
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    if len(got) != len(want):
        return False, float("nan")
    worst = 0.0
    ok = True
    for g, w in zip(got, want):
        g = np.asarray(g)
        w = np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            if g.size != w.size:
                return False, float("nan")
            g = g.reshape(w.shape)
        # ml_dtypes' bfloat16/float8 are kind "V": still 16/8-bit floating outputs
        floating = g.dtype.kind == "f" or g.dtype.name.startswith(("bfloat", "float8"))
        tol = _tolerance(g.dtype if floating else np.float32)
        if compute_dtype is not None:
            tol = max(tol, _tolerance(compute_dtype))
        g64 = g.astype(np.float64)
        scale = max(float(np.abs(w).max()), 1e-30) if w.size else 1.0
        err = np.abs(g64 - w)
        rel = float(err.max() / scale) if err.size else 0.0
        if not np.isfinite(rel) or not np.all(err <= tol * np.abs(w) + tol * scale):
            ok = False
        worst = max(worst, rel) if np.isfinite(rel) else float("nan")
    return ok, worst


def run_entry(entry: Entry, corpus: str) -> dict:
    from axon.errors import AxonError
    from axon.targets.trainium.hardware import get_target
    from axon.targets.trainium.perfmodel import estimate
    from axon.targets.trainium.simulator import load_kernel, simulate

    path = os.path.join(corpus, entry.corpus, entry.path)
    res = {"name": entry.name, "runs": False, "match": None, "latency_ns": None, "error": None}
    t0 = time.time()
    try:
        np.random.seed(0)
        rng = np.random.default_rng(0)
        if entry.nkibench:
            ref_mod = _load_module(entry.nkibench)
            raw = ref_mod.get_inputs()
            nki_in = ref_mod.transform_to_nki_inputs(raw)
            kernel = load_kernel(path, entry.func)
            inputs = dict(zip(kernel.params, nki_in))
            reference = lambda: ref_mod.forward(*raw)  # noqa: E731
            post = lambda out, ref: ref_mod.transform_nki_outputs(out, ref)  # noqa: E731
        else:
            kernel = load_kernel(path, entry.func)
            inputs = dict(entry.inputs(rng))
            reference = (lambda: entry.reference(**inputs, **entry.args)) if entry.reference else None
            post = (lambda out, ref: entry.unpack(out)) if entry.unpack else None
        args = {**inputs, **entry.args}
        sim = simulate(kernel, args, target=entry.target, grid=entry.grid, time_limit_s=TIME_LIMIT_S)
        est = estimate(sim.trace, get_target(entry.target))
        res["runs"], res["latency_ns"] = True, est.latency_ns
        res["spill_bytes"], res["reload_bytes"] = sim.spill_bytes, sim.reload_bytes
        if reference is not None:
            with np.errstate(all="ignore"):
                want = reference()
            got = sim.outputs
            if post is not None:
                got = post(got, want)
            res["match"], res["rel_err"] = _compare(got, want, entry.compute_dtype)
    except AxonError as err:
        res["error"] = str(err).replace(corpus.rstrip("/") + "/", "")
    except Exception as err:  # noqa: BLE001 - a harness failure is reported, not raised
        res["error"] = f"harness: {type(err).__name__}: {err}"
    res["seconds"] = time.time() - t0
    return res


def _worker(entry, corpus, q):
    try:
        q.put(run_entry(entry, corpus))
    except BaseException as err:  # noqa: BLE001
        q.put({"name": entry.name, "runs": False, "match": None, "latency_ns": None,
               "error": f"harness: {type(err).__name__}: {err}"})


def run_all(entries, corpus, jobs, timeout_s):
    ctx = mp.get_context("fork")
    pending = list(entries)
    running = {}
    results = {}
    while pending or running:
        while pending and len(running) < jobs:
            e = pending.pop(0)
            q = ctx.Queue()
            p = ctx.Process(target=_worker, args=(e, corpus, q))
            p.start()
            running[e.name] = (p, q, time.time(), e)
        time.sleep(0.2)
        for name, (p, q, start, e) in list(running.items()):
            r = None
            try:
                r = q.get_nowait()
            except Exception:  # noqa: BLE001 - queue empty
                pass
            if r is not None:
                results[name] = r
                p.join()
                del running[name]
                model = f"model {r['latency_ns'] / 1e3:.1f} us " if r.get("latency_ns") else ""
                print(f"{'ok ' if r['runs'] and r['match'] is not False else 'BAD'} {name}: "
                      f"{r['error'] + ' ' if r.get('error') else model}({r.get('seconds', 0):.0f} s)", flush=True)
            elif not p.is_alive() or time.time() - start > timeout_s:
                p.kill()
                p.join()
                results[name] = {"name": name, "runs": False, "match": None, "latency_ns": None,
                                 "error": f"did not finish within {timeout_s:.0f} s (harness limit)"
                                 if p.exitcode in (None, -9) else f"process died (exit {p.exitcode})"}
                del running[name]
                print(f"BAD {name}: {results[name]['error']}", flush=True)
    return [results[e.name] for e in entries]


def _group(e: Entry) -> str:
    if e.corpus == "AccelOpt":
        return "NKIBench (AccelOpt)"
    if e.corpus == "nki-library":
        return "nki-library"
    if "/reference/" in e.path:
        return "nki-samples reference kernels (fc5c69f)"
    return "nki-samples tutorials (fc5c69f and HEAD)"


def write_report(entries, results, out: Path, command: str):
    groups: dict[str, list] = {}
    for e, r in zip(entries, results):
        groups.setdefault(_group(e), []).append((e, r))
    lines = ["# Public NKI kernels in Axon's simulator and model", "",
             f"Made by `{command}` (trn1 model; nki-library on trn2, its tests' platform). Each kernel runs unchanged from its own file, given",
             "only array inputs, scalar arguments and an SPMD grid, at the shapes its own test or reference",
             "code uses; it matches when every output element is within rtol = atol/max|ref| = 2e-3 (float32)",
             "or 3e-2 (16-bit outputs; 2**-4 for fp8) of a NumPy reference. SPMD instances run one after another on one",
             "NeuronCore and the model schedules their instructions as one stream. Measured latencies are",
             "from ../shared/fidelity.md (trn1) where it has the same kernel at the same shape. The model",
             "latency is the kernel's schedule (what nki.benchmark reports); NKIBench's measured figures are",
             "whole-NEFF neuron-profile times, which add the fixed launch cost hardware.py holds (fitted in",
             "benchmarks/results/calibration.md, where those rows are compared). On-chip memory is allocated by liveness (per block of a",
             "multi-block tensor, from first to last use); where the live set still exceeds SBUF/PSUM the",
             "kernel spills to HBM as the compiler would (axon/targets/trainium/simulator/liveness.py):",
             "\"spill / reload MB\" is that traffic, timed as DMAs in the model latency; \"measured reload\"",
             "is the profile's spill reload MB (reported, not fitted).", "", "## Summary", "",
             "| corpus | kernels | run unchanged | run and match the reference |", "|---|---|---|---|"]
    tot = [0, 0, 0]
    for g, rows in groups.items():
        n = len(rows)
        runs = sum(1 for _, r in rows if r["runs"])
        match = sum(1 for _, r in rows if r["runs"] and r["match"] is not False)
        tot = [tot[0] + n, tot[1] + runs, tot[2] + match]
        lines.append(f"| {g} | {n} | {runs} | {match} |")
    lines.append(f"| **all** | {tot[0]} | {tot[1]} ({100 * tot[1] / max(tot[0], 1):.0f}%) | "
                 f"{tot[2]} ({100 * tot[2] / max(tot[0], 1):.0f}%) |")
    for g, rows in groups.items():
        lines += ["", f"## {g}", "", "| kernel | runs | matches reference | model latency | measured | "
                  "model spill / reload MB | measured reload MB |", "|---|---|---|---|---|---|---|"]
        for e, r in rows:
            lat = f"{r['latency_ns'] / 1e3:.1f} us" if r["latency_ns"] is not None else "-"
            meas = f"{e.measured_ms * 1e3:.1f} us" if e.measured_ms else "-"
            match = "-" if r["match"] is None else ("yes" if r["match"] else f"NO (rel err {r.get('rel_err', float('nan')):.3g})")
            spill = (f"{r['spill_bytes'] / 1e6:.1f} / {r['reload_bytes'] / 1e6:.1f}"
                     if r.get("spill_bytes") is not None else "-")
            mspill = f"{e.measured_spill_mb:.1f}" if e.measured_spill_mb is not None else "-"
            lines.append(f"| `{e.path.split('/')[-1]}:{e.func}` | {'yes' if r['runs'] else 'no'} | {match} | {lat} | "
                         f"{meas} | {spill} | {mspill} |")
    fails = [(e, r) for e, r in zip(entries, results) if not r["runs"] or r["match"] is False]
    lines += ["", "## Failures (one line each: the kernel line and the feature)", ""]
    if not fails:
        lines.append("None.")
    for e, r in fails:
        why = r["error"] or f"output differs from the reference (max error {r.get('rel_err', float('nan')):.3g} of max|ref|)"
        lines.append(f"- `{e.corpus}:{e.path}:{e.func}`: {why.splitlines()[0]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, metavar="DIR")
    ap.add_argument("--only", action="append", default=[], help="run entries whose name contains this")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--timeout", type=float, default=1200.0, help="per-kernel wall-clock limit (s)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "fidelity.md"))
    a = ap.parse_args(argv)
    corpus = Path(a.corpus).resolve()
    entries = nkibench_entries(corpus) + tutorial_entries(str(corpus)) + reference_entries() + library_entries()
    entries = [e for e in entries if (corpus / e.corpus / e.path).is_file()]
    if a.only:
        entries = [e for e in entries if any(o in e.name for o in a.only)]
    results = run_all(entries, str(corpus), a.jobs, a.timeout)
    command = "python benchmarks/fidelity.py --corpus DIR" + "".join(f" --only {o}" for o in a.only)
    if not a.only:
        write_report(entries, results, Path(a.out), command)
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
