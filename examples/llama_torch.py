"""A Llama-style transformer block in PyTorch, brought into Axon with `axon.from_torch`.

    axon optimize examples/llama_torch.py:block

RMSNorm with gain, the Q/K/V projections, rotate-half RoPE, causal grouped-query attention
(F.scaled_dot_product_attention), the output projection and a SwiGLU MLP, both with residuals:
written as a PyTorch user writes it. `block` is the program at a small configuration; `Config`
and `import_block` give others.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import axon


@dataclass(frozen=True)
class Config:
    seq: int = 128
    hidden: int = 256
    head_dim: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 512


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(hidden)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.input_norm, self.post_norm = RMSNorm(c.hidden), RMSNorm(c.hidden)
        self.q_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)
        self.gate_proj = nn.Linear(c.hidden, c.ffn, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.ffn, bias=False)
        self.down_proj = nn.Linear(c.ffn, c.hidden, bias=False)

    def forward(self, x, cos, sin):
        c, s = self.c, x.shape[0]
        h = self.input_norm(x)
        q = self.q_proj(h).view(s, c.heads, c.head_dim).transpose(0, 1)
        k = self.k_proj(h).view(s, c.kv_heads, c.head_dim).transpose(0, 1)
        v = self.v_proj(h).view(s, c.kv_heads, c.head_dim).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o_proj(a.transpose(0, 1).reshape(s, c.heads * c.head_dim))
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def example_inputs(c: Config, seed: int = 0):
    """A block with PyTorch's default initialisation, and its x, cos, sin."""
    torch.manual_seed(seed)
    module = LlamaBlock(c)
    pos = torch.arange(c.seq, dtype=torch.float32)[:, None]
    freq = 10000.0 ** (-torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim)
    angle = torch.cat([pos * freq, pos * freq], dim=-1)
    return module, (torch.randn(c.seq, c.hidden), torch.cos(angle), torch.sin(angle))


def import_block(c: Config = Config(), name: str = "block"):
    module, inputs = example_inputs(c)
    return module, inputs, axon.from_torch(module, inputs, name=name)


_, _, block = import_block()
