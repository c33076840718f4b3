"""The 20 benchmarks (shared/axon-paper.md, "Benchmark suite"), HF RoPE, a fused-weight SwiGLU, scaled and causal attention, as axon
programs with shape cases.

Every benchmark has: `small` (CI-sized), `quick` (the representative case of the quick grid),
a sweep grid (25 shapes for single operators, 27 for MatMul-family kernels, sizes 128 to 8192),
and model configurations (Llama-3-8B/70B, vocabularies of Llama 3 and Qwen).
Decisions where the paper is silent: rmsnorm and layernorm carry a learned scale (and layernorm a
bias) over the last axis; the norm inside rmsnorm_matmul has none (it is folded into W, as
deployed models do); eps = 1e-6; RoPE returns the even and odd halves as two outputs, and
rope_hf is Hugging Face's rotate-half form (one output, cos and sin full width); gqa is
softmax(q k^T) v without a 1/sqrt(d) scale, as the suite defines it, with query heads grouped
as (kv heads, group) sharing each kv head by broadcasting; its cases include prefill and decode
(1 to 16 query rows per head against up to 32768 keys) at Llama-3 head counts. `attention` is
the same with the 1/sqrt(d) scale of deployed models, at their head dim d = 128 (a literal: the
scale is a number). `causal_gqa` is gqa with a causal mask (axon.where on axon.arange; query row
i at context position i + t - s, masked scores -30000) at prefill cases s = t = 2048 and 8192.
`swiglu_mlp` is gated_mlp with the gate and up projections as one [k, 2n] weight whose product
is sliced in halves (SwiGLU with one concatenated up-projection).
rmsnorm_matmul's `*_qkv` cases are RMSNorm followed by Llama-3's fused QKV
projection (n = (heads + 2 kv heads) x 128).
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import axon.frontend.functions as F
from axon.errors import InputError
from axon.frontend.program import Program, program

EPS = 1e-6


@dataclass(frozen=True)
class Benchmark:
    name: str
    family: str  # "single" (individual operators) or "multi" (MatMul and multi-operator)
    program: Program
    cases: dict[str, dict[str, int]]

    def sizes(self, case: str) -> dict[str, int]:
        if case not in self.cases:
            raise InputError(f"benchmark {self.name} has no case {case!r}; cases: {', '.join(self.cases)}")
        return dict(self.cases[case])


# --- programs ------------------------------------------------------------------------------
def _softmax(x):
    e = F.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _rms(x):
    return x / F.sqrt((x * x).mean(axis=-1, keepdims=True) + EPS)


@program(x=("m", "n"))
def relu(x):
    return F.relu(x)


@program(x=("m", "n"))
def silu(x):
    return F.silu(x)


@program(x=("m", "n"), y=("m", "n"))
def mul(x, y):
    return x * y


@program(x=("m", "n"))
def softmax(x):
    return _softmax(x)


@program(x=("m", "n"), g=("n",))
def rmsnorm(x, g):
    return _rms(x) * g


@program(x=("m", "n"), g=("n",), b=("n",))
def layernorm(x, g, b):
    centered = x - x.mean(axis=-1, keepdims=True)
    return centered / F.sqrt((centered * centered).mean(axis=-1, keepdims=True) + EPS) * g + b


@program(x=("m", "n"))
def cumsum(x):
    return x.cumsum(axis=-1)


@program(x=("m", "2*h"), cos=("m", "h"), sin=("m", "h"))
def rope(x, cos, sin):
    even, odd = x[:, 0::2], x[:, 1::2]
    return even * cos - odd * sin, odd * cos + even * sin


@program(x=("m", "2*h"), cos=("m", "2*h"), sin=("m", "2*h"))
def rope_hf(x, cos, sin):
    # Hugging Face's rotate-half form: the halves swap, the first negated; cos and sin full width
    half = x.shape[1] // 2
    return x * cos + F.concatenate([-x[:, half:], x[:, :half]], axis=1) * sin


@program(x=("m", "k"), w=("k", "n"))
def matmul(x, w):
    return x @ w


@program(x=("k", "m"), w=("k", "n"))
def transpose_matmul(x, w):
    return x.T @ w


@program(x=("m", "k"), w=("k", "n"))
def matmul_transpose(x, w):
    return (x @ w).T


@program(x=("m", "k"), w=("k", "n"))
def relu_matmul(x, w):
    return F.relu(x) @ w


@program(x=("m", "k"), w=("k", "n"))
def silu_matmul(x, w):
    return F.silu(x) @ w


@program(x=("m", "k"), w=("k", "n"))
def rmsnorm_matmul(x, w):
    return _rms(x) @ w


@program(x=("m", "k"), w=("k", "n"))
def softmax_matmul(x, w):
    return _softmax(x) @ w


@program(x=("m", "k"), y=("m", "k"), w=("k", "n"))
def reduce_mul_matmul(x, y, w):
    return (x * y.sum(axis=1, keepdims=True)) @ w


@program(x=("m", "k"), y=("m", "k"), w=("k", "n"))
def reduce_div_matmul(x, y, w):
    return (x / y.sum(axis=1, keepdims=True)) @ w


@program(x=("m", "k"), w1=("k", "n"), w2=("k", "n"))
def gated_projection(x, w1, w2):
    return F.silu(x @ w1) * (x @ w2)


@program(x=("m", "k"), w1=("k", "n"), w2=("k", "n"), w3=("n", "k"))
def gated_mlp(x, w1, w2, w3):
    return (F.silu(x @ w1) * (x @ w2)) @ w3


@program(x=("m", "k"), w_gate_up=("k", "2*n"), w_down=("n", "k"))
def swiglu_mlp(x, w_gate_up, w_down):
    # the gate and up projections as one fused weight, as checkpoints store it (gate_up_proj)
    u = x @ w_gate_up
    half = u.shape[1] // 2
    return (F.silu(u[:, :half]) * u[:, half:]) @ w_down


@program(q=("kv", "g", "s", "d"), k=("kv", 1, "t", "d"), v=("kv", 1, "t", "d"))
def gqa(q, k, v):
    return _softmax(q @ k.transpose(0, 1, 3, 2)) @ v


HEAD_DIM = 128  # Llama-3 8B and 70B


@program(q=("kv", "g", "s", HEAD_DIM), k=("kv", 1, "t", HEAD_DIM), v=("kv", 1, "t", HEAD_DIM))
def attention(q, k, v):
    return _softmax((q @ k.transpose(0, 1, 3, 2)) * HEAD_DIM ** -0.5) @ v


MASKED = -30000.0  # a masked score: exp(MASKED - row max) is 0 in float32 for any row max above -29900


@program(q=("kv", "g", "s", "d"), k=("kv", 1, "t", "d"), v=("kv", 1, "t", "d"))
def causal_gqa(q, k, v):
    # query row i sits at position i + t - s of the context (prefill: s = t) and sees keys up to it
    visible = F.arange("s")[:, None] + (k.shape[2] - q.shape[2]) >= F.arange("t")[None, :]
    return _softmax(F.where(visible, q @ k.transpose(0, 1, 3, 2), MASKED)) @ v


# --- shape cases ---------------------------------------------------------------------------
def _grid(**axes) -> dict[str, dict[str, int]]:
    names = list(axes)
    return {"_".join(f"{n}{v}" for n, v in zip(names, values)): dict(zip(names, values))
            for values in itertools.product(*axes.values())}


ROWS = (128, 512, 1024, 2048, 4096)
COLS = (128, 512, 1024, 4096, 8192)
SINGLE = {"small": {"m": 128, "n": 512}, "quick": {"m": 1024, "n": 4096}, **_grid(m=ROWS, n=COLS)}
CUMSUM = {**SINGLE, "llama3_vocab": {"m": 128, "n": 128256}, "qwen_vocab": {"m": 128, "n": 151936}}
ROPE = {"small": {"m": 128, "h": 64}, "quick": {"m": 128, "h": 2048},
        **{f"m{m}_d{2 * h}": {"m": m, "h": h} for m, h in itertools.product(ROWS, (64, 256, 512, 2048, 4096))},
        "rope_128x4096": {"m": 128, "h": 2048}, "rope_128x32768": {"m": 128, "h": 16384}}
MATMUL = {"small": {"m": 128, "k": 256, "n": 512}, "quick": {"m": 1024, "k": 4096, "n": 4096},
          **_grid(m=(128, 1024, 4096), k=(1024, 4096, 8192), n=(1024, 4096, 8192)),
          "llama3_8b_attn_proj": {"m": 2048, "k": 4096, "n": 4096},
          "llama3_8b_mlp_up": {"m": 2048, "k": 4096, "n": 14336},
          "llama3_70b_mlp_up": {"m": 2048, "k": 8192, "n": 28672}}
# RMSNorm + the fused QKV projection: n = (query heads + 2 kv heads) x head dim
NORM_MATMUL = {**MATMUL, "llama3_8b_qkv": {"m": 2048, "k": 4096, "n": (32 + 2 * 8) * 128},
               "llama3_70b_qkv": {"m": 2048, "k": 8192, "n": (64 + 2 * 8) * 128}}
GATED = {"small": {"m": 128, "k": 256, "n": 512}, "quick": {"m": 1024, "k": 2048, "n": 4096},
         **_grid(m=(128, 1024, 4096), k=(1024, 4096, 8192), n=(1024, 4096, 8192)),
         "llama3_8b": {"m": 2048, "k": 4096, "n": 14336}, "llama3_70b": {"m": 2048, "k": 8192, "n": 28672}}
HEADS = {"llama3_8b": {"kv": 8, "g": 4}, "llama3_70b": {"kv": 8, "g": 8}, "small_model": {"kv": 2, "g": 4}}
GQA = {"small": {"kv": 2, "g": 2, "s": 128, "t": 128, "d": 64},
       "quick": {"kv": 8, "g": 4, "s": 512, "t": 2048, "d": 128},
       # one head, as AWS's attention performance tutorial computes it (benchmarks/attention.py)
       **{f"one_head_s{n}": {"kv": 1, "g": 1, "s": n, "t": n, "d": 128} for n in (128, 4096)},
       **{f"{model}_s{s}_t{t}": {**heads, "s": s, "t": t, "d": 128}
          for model, heads in HEADS.items() for s in (128, 512, 2048) for t in (512, 2048, 8192)},
       # decode: a few new query rows per head against the whole context
       **{f"{model}_decode_s{s}_t{t}": {**HEADS[model], "s": s, "t": t, "d": d}
          for model, d in (("llama3_8b", 128), ("llama3_70b", 128), ("small_model", 64))
          for s in (1, 4, 16) for t in (4096, 32768)}}
ATTENTION = {"small": {"kv": 2, "g": 2, "s": 128, "t": 128}, "quick": {"kv": 8, "g": 4, "s": 512, "t": 2048},
             "llama3_8b_s4096": {**HEADS["llama3_8b"], "s": 4096, "t": 4096},
             "llama3_70b_s2048": {**HEADS["llama3_70b"], "s": 2048, "t": 2048},
             **{f"{model}_decode_s{s}_t{t}": {**HEADS[model], "s": s, "t": t}
                for model in ("llama3_8b", "llama3_70b") for s in (1, 16) for t in (4096, 32768)}}

# causal prefill (s = t) at Llama-3 head counts, head dim 128, and Llama-3.2-1B's (32 query
# heads over 8 kv heads, head dim 64)
CAUSAL = {"small": {"kv": 2, "g": 2, "s": 256, "t": 256, "d": 64},
          "quick": {**HEADS["llama3_8b"], "s": 2048, "t": 2048, "d": 128},
          **{f"{model}_s{n}": {**HEADS[model], "s": n, "t": n, "d": 128}
             for model in ("llama3_8b", "llama3_70b") for n in (2048, 8192)},
          **{f"llama3_2_1b_s{n}": {"kv": 8, "g": 4, "s": n, "t": n, "d": 64} for n in (2048, 8192)}}

SUITE: dict[str, Benchmark] = {
    b.name: b
    for b in [
        Benchmark("relu", "single", relu, SINGLE),
        Benchmark("silu", "single", silu, SINGLE),
        Benchmark("mul", "single", mul, SINGLE),
        Benchmark("softmax", "single", softmax, SINGLE),
        Benchmark("rmsnorm", "single", rmsnorm, SINGLE),
        Benchmark("layernorm", "single", layernorm, SINGLE),
        Benchmark("cumsum", "single", cumsum, CUMSUM),
        Benchmark("rope", "single", rope, ROPE),
        Benchmark("rope_hf", "single", rope_hf, ROPE),
        Benchmark("matmul", "multi", matmul, MATMUL),
        Benchmark("transpose_matmul", "multi", transpose_matmul, MATMUL),
        Benchmark("matmul_transpose", "multi", matmul_transpose, MATMUL),
        Benchmark("relu_matmul", "multi", relu_matmul, MATMUL),
        Benchmark("silu_matmul", "multi", silu_matmul, MATMUL),
        Benchmark("rmsnorm_matmul", "multi", rmsnorm_matmul, NORM_MATMUL),
        Benchmark("softmax_matmul", "multi", softmax_matmul, MATMUL),
        Benchmark("reduce_mul_matmul", "multi", reduce_mul_matmul, MATMUL),
        Benchmark("reduce_div_matmul", "multi", reduce_div_matmul, MATMUL),
        Benchmark("gated_projection", "multi", gated_projection, GATED),
        Benchmark("gated_mlp", "multi", gated_mlp, GATED),
        Benchmark("swiglu_mlp", "multi", swiglu_mlp, GATED),
        Benchmark("gqa", "multi", gqa, GQA),
        Benchmark("attention", "multi", attention, ATTENTION),
        Benchmark("causal_gqa", "multi", causal_gqa, CAUSAL),
    ]
}


def get(name: str) -> Benchmark:
    """A benchmark of the suite, or a user's program named `FILE.py:NAME` (family "user", no
    cases of its own: it runs at the sizes given)."""
    if ":" in name:
        return _user_benchmark(name)
    if name not in SUITE:
        raise InputError(f"no benchmark named {name!r}; benchmarks: {', '.join(SUITE)}")
    return SUITE[name]


def benchmark(name: str) -> Program:
    """The program of a benchmark, e.g. `axon.benchmark("rmsnorm_matmul")`."""
    return get(name).program


@functools.cache
def _user_benchmark(spec: str) -> Benchmark:
    from axon.frontend.loading import load_program

    return Benchmark(spec, "user", load_program(spec)[0], {})
