"""Shared by the propagation tests: one SMT verifier for the session (its caches make reruns cheap)."""
import pytest

from axon.verification import Verifier


@pytest.fixture(scope="session")
def checker():
    return Verifier(timeout_ms=2000)
