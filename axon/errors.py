"""Errors a user can act on. Each renders as one line naming the problem; the CLI prints
`axon: error: <message>` and exits with status 2 instead of showing a traceback."""


class AxonError(Exception):
    """Base of every error Axon reports to a user."""


class ShapeError(AxonError):
    """Operand ranks or sizes do not fit an operator, or dimension names disagree."""


class UnsupportedError(AxonError):
    """An operator, dtype or construct Axon does not support."""


class InputError(AxonError):
    """A concrete input (array, size binding, file) does not match what the program expects."""


class KernelError(AxonError):
    """An NKI kernel could not be parsed, run, or broke a hardware rule (the message names the line)."""


class ModelError(AxonError):
    """The performance model could not account for a kernel's trace (an instruction it did not
    place): reported, because an estimate that leaves work out would look like a saving."""
