"""`axon verify FILE.py:F FILE.py:G`: exit status 0 proved, 1 not equivalent (with a NumPy
counterexample), 3 undecided (with the query), 2 for a bad argument (one line)."""
import textwrap

import pytest

from axon.cli import main

PROGRAMS = textwrap.dedent('''
    import axon

    @axon.program(x=("m", "k"), w=("k", "n"))
    def softmax_matmul(x, w):
        e = axon.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ w

    @axon.program(x=("m", "k"), w=("k", "n"))
    def late(x, w):
        e = axon.exp(x)
        return (e @ w) / e.sum(axis=-1, keepdims=True)

    @axon.program(x=("m", "k"), w=("k", "n"))
    def wrong(x, w):
        e = axon.exp(x)
        return (e @ w) / e.sum(axis=0, keepdims=True).sum(axis=1, keepdims=True)

    @axon.program(x=("m", "k"))
    def th(x):
        return axon.tanh(x)

    @axon.program(x=("m", "k"))
    def th_exp(x):
        e = axon.exp(2 * x)
        return (e - 1) / (e + 1)

    not_a_program = 3
''')


@pytest.fixture()
def progs(tmp_path):
    path = tmp_path / "progs.py"
    path.write_text(PROGRAMS)
    return str(path)


def test_verify_cli_proved(progs, capsys):
    assert main(["verify", f"{progs}:softmax_matmul", f"{progs}:late"]) == 0
    assert "equivalent: equal for all sizes" in capsys.readouterr().out


def test_verify_cli_refuted_prints_counterexample(progs, capsys):
    assert main(["verify", f"{progs}:softmax_matmul", f"{progs}:wrong"]) == 1
    out = capsys.readouterr().out
    assert "NOT equivalent" in out and "counterexample: sizes m=" in out and "high precision" in out


def test_verify_cli_shape_mismatch(progs, capsys):
    assert main(["verify", f"{progs}:softmax_matmul", "matmul_transpose"]) == 1
    assert "shape (m, n) vs (n, m)" in capsys.readouterr().out


def test_verify_cli_unknown_names_the_query(progs, capsys):
    assert main(["verify", f"{progs}:th", f"{progs}:th_exp", "--timeout-ms", "500"]) == 3
    assert "undecided query: output 0:" in capsys.readouterr().out


def test_verify_cli_benchmark_names(capsys):
    assert main(["verify", "softmax", "softmax"]) == 0


@pytest.mark.parametrize("arg,message", [("missing.py:f", "no such file"), ("{}:nope", "has no program 'nope'"),
                                         ("{}:not_a_program", "is not an @axon.program"),
                                         ("no_such_bench", "no benchmark named")])
def test_verify_cli_errors_are_one_line(progs, capsys, arg, message):
    assert main(["verify", arg.format(progs), "softmax"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
