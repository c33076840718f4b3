"""A Llama-style transformer block in JAX, brought into Axon with `axon.from_jax`.

    axon optimize examples/llama_jax.py:block

The same block as examples/llama_torch.py, written with jax.numpy: parameters in a dict, the
attention as an einsum with a causal `jnp.where` and `jax.nn.softmax`. `block` is the program at a
small configuration; `Config` and `import_block` give others.
"""
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import axon


@dataclass(frozen=True)
class Config:
    seq: int = 128
    hidden: int = 256
    head_dim: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 512


def rms_norm(x, g):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g


def rotate_half(x):
    h = x.shape[-1] // 2
    return jnp.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def llama_block(p, x, cos, sin):
    s, d = x.shape[0], cos.shape[-1]
    kv, heads = p["wk"].shape[1] // d, p["wq"].shape[1] // d
    h = rms_norm(x, p["input_norm"])
    q = (h @ p["wq"]).reshape(s, kv, heads // kv, d).transpose(1, 2, 0, 3)
    k = (h @ p["wk"]).reshape(s, kv, 1, d).transpose(1, 2, 0, 3)
    v = (h @ p["wv"]).reshape(s, kv, 1, d).transpose(1, 2, 0, 3)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    scores = jnp.einsum("kgsd,kgtd->kgst", q, k) / np.sqrt(d)
    scores = jnp.where(jnp.arange(s)[:, None] >= jnp.arange(s)[None, :], scores, -30000.0)
    a = jax.nn.softmax(scores, axis=-1) @ v
    x = x + a.transpose(2, 0, 1, 3).reshape(s, heads * d) @ p["wo"]
    h = rms_norm(x, p["post_norm"])
    return x + (jax.nn.silu(h @ p["wg"]) * (h @ p["wu"])) @ p["wd"]


def example_inputs(c: Config, seed: int = 0):
    """Parameters scaled as a trained block's (1/sqrt(fan-in)), and x, cos, sin."""
    shapes = dict(input_norm=(c.hidden,), post_norm=(c.hidden,), wq=(c.hidden, c.heads * c.head_dim),
                  wk=(c.hidden, c.kv_heads * c.head_dim), wv=(c.hidden, c.kv_heads * c.head_dim),
                  wo=(c.heads * c.head_dim, c.hidden), wg=(c.hidden, c.ffn), wu=(c.hidden, c.ffn),
                  wd=(c.ffn, c.hidden))
    keys = jax.random.split(jax.random.PRNGKey(seed), len(shapes) + 1)
    p = {n: jax.random.normal(k, s) / np.sqrt(s[0]) for (n, s), k in zip(shapes.items(), keys)}
    p["input_norm"] = p["post_norm"] = jnp.ones((c.hidden,))
    angle = np.arange(c.seq)[:, None] * 10000.0 ** (-np.arange(0, c.head_dim, 2) / c.head_dim)
    angle = np.concatenate([angle, angle], axis=-1).astype(np.float32)
    return p, jax.random.normal(keys[-1], (c.seq, c.hidden)), jnp.cos(angle), jnp.sin(angle)


def import_block(c: Config = Config(), name: str = "block"):
    inputs = example_inputs(c)
    return inputs, axon.from_jax(llama_block, inputs, name=name)


_, block = import_block()
