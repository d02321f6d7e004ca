"""The one exception hierarchy of collage.

Every error a user can cause (a bad model, an unsupported op, a corrupted artifact) is a
``CollageError`` whose message names the file, node or tensor at fault and says what to do.
The CLI prints the message on one line and exits with code 2; no traceback.
"""
from __future__ import annotations


class CollageError(Exception):
    """Base of every error collage raises on purpose."""


class OptionError(CollageError, ValueError):
    """An option or argument out of its range (a ValueError too, for Python callers)."""


class OptionTypeError(OptionError, TypeError):
    """An option or argument of the wrong kind (a TypeError too, for Python callers, and an OptionError)."""


class InputError(CollageError, ValueError):
    """An input tensor collage cannot take or draw values for (a ValueError too, for Python callers)."""


class InputTypeError(CollageError, TypeError):
    """Inputs handed over in the wrong form, e.g. a list where a dict by input name is expected (a TypeError
    too, for Python callers)."""


class ModelError(CollageError):
    """The input model cannot be read, checked or given static shapes."""


class TransientError(CollageError):
    """A failure of this moment or this process (a resource it holds), not of the model or the backend: never
    remembered as an answer (a support check or a cost), asked again next time."""


class UnsupportedError(CollageError):
    """A backend cannot take a node or subgraph (names the op and the node)."""


class CompileError(CollageError):
    """A backend failed to compile a subgraph it claimed to support."""


class MeasurementError(CollageError):
    """A measurement failed: the worker crashed, hung or raised."""


class NumericsError(CollageError):
    """A plan's outputs differ from the ONNX Runtime reference beyond the tolerance (names the outputs, the error
    and the first partition that diverges); ``what``: that finding alone, without the remedy."""

    def __init__(self, message: str, what: str = "") -> None:
        super().__init__(message)
        self.what = what or message


class ArtifactError(CollageError):
    """An artifact is missing, corrupted or from an incompatible version (names the file)."""


class BackendUnavailable(CollageError):
    """A backend's runtime is not installed or cannot run on this machine."""


class ClusterUnreachable(CollageError, ConnectionError):
    """``--cluster`` names an address where no Ray cluster answers (a ConnectionError too, for Python callers)."""
