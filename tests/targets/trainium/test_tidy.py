"""The emitter's index tidying: one-iteration loop bindings substituted where they are in scope,
windows written nl.ds(start, size), and anything not integer-linear left as it was."""
from axon.targets.trainium.tidy import simplify_subscripts, tidy


def test_a_binding_is_substituted_in_its_scope_and_dropped():
    lines = ["    i_rb = 0",
             "    x_t = nl.ndarray((128, 256), dtype=DT, buffer=nl.sbuf)",
             "    nisa.dma_copy(dst=x_t[0:128, 0:256], src=x[i_rb * 1024 + 128:i_rb * 1024 + 128 + 128, 0:256])",
             "    for i_rb in nl.affine_range(2):",  # rebinds: no longer the constant
             "        nisa.dma_copy(dst=out[i_rb * 128:i_rb * 128 + 128, 0:256], src=x_t[0:128, 0:256])"]
    out = tidy(lines, {0: ("i_rb", 0)})
    assert out == ["    x_t = nl.ndarray((128, 256), dtype=DT, buffer=nl.sbuf)",
                   "    nisa.dma_copy(dst=x_t[0:128, 0:256], src=x[128:256, 0:256])",
                   "    for i_rb in nl.affine_range(2):",
                   "        nisa.dma_copy(dst=out[nl.ds(i_rb * 128, 128), 0:256], src=x_t[0:128, 0:256])"]


def test_a_binding_ends_with_its_block():
    lines = ["    for i_b in nl.affine_range(4):",
             "        i_r = 1",
             "        a[i_r * 128:i_r * 128 + 128] = b",
             "    c[i_r:i_r + 1] = d"]  # outside the loop: another i_r, left alone
    assert tidy(lines, {1: ("i_r", 1)}) == ["    for i_b in nl.affine_range(4):", "        a[128:256] = b",
                                             "    c[nl.ds(i_r, 1)] = d"]


def test_like_terms_combine_and_other_arithmetic_is_left_alone():
    assert simplify_subscripts("t[0:128, i_kt * 512 + i_kt * 0 + 64:i_kt * 512 + 64 + 512]") == \
        "t[0:128, nl.ds(i_kt * 512 + 64, 512)]"
    assert simplify_subscripts("t[0:128, i // 2:i // 2 + 4]") == "t[0:128, i // 2:i // 2 + 4]"
    assert simplify_subscripts("t[a * b:a * b + 1]") == "t[a * b:a * b + 1]"
    assert simplify_subscripts("t[0:128, n - 64:n]") == "t[0:128, nl.ds(n - 64, 64)]"
    assert simplify_subscripts("w[i_b0, 0, 0:128, ::2]") == "w[i_b0, 0, 0:128, ::2]"
    assert simplify_subscripts("pattern=[[1, 512]], x=(0, 16)[k]") == "pattern=[[1, 512]], x=(0, 16)[k]"
