"""Example models shipped with padkit (package data, found through ``importlib.resources``).

``googlenet_mini`` is a small GoogLeNet-style ONNX graph with the asymmetric ``[0, 0, 1, 1]``
and ``ceil_mode`` pools that Caffe-origin models carry; ``padkit verify`` runs it when no model
is given. ``scripts/make_example_model.py`` in the repository generates it.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["EXAMPLE_MODELS", "example_model"]

#: The names :func:`example_model` accepts.
EXAMPLE_MODELS: tuple[str, ...] = ("googlenet_mini",)


def example_model(name: str = "googlenet_mini") -> bytes:
    """The serialized ONNX bytes of a bundled example model.

    Args:
        name: one of :data:`EXAMPLE_MODELS`.

    Raises:
        ValueError: ``name`` is not a bundled model.

    Example:
        >>> data = example_model()
        >>> len(data) < 300_000
        True
    """
    if name not in EXAMPLE_MODELS:
        raise ValueError(f"name must be one of {EXAMPLE_MODELS}, got {name!r}")
    return resources.files(__name__).joinpath(f"{name}.onnx").read_bytes()
