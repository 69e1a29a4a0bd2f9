"""Read an ONNX file, saying what is wrong with it when it is not a usable model.

``onnx.load`` reads an empty file as an empty model, and reports a truncated or foreign
file with protobuf's bare "Error parsing message". :func:`read_onnx_file` names the file
and what it found instead. :func:`check_onnx_path` does the checks that need no parsing
(the file exists, is not empty, is not text) without importing onnx or torch, so a
command can run them before its slow imports.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["OnnxFileError", "check_onnx_path", "read_onnx_file"]

_HEAD = 4096


class OnnxFileError(ValueError):
    """A file that is not a usable ONNX model: empty, truncated, text, or without a graph."""


def _text_head(path: Path) -> str | None:
    """The file's first line when its start reads as text, else None.

    An ONNX file is binary: it starts with a protobuf field tag such as ``0x08``
    (``ir_version``), which is not text.
    """
    with path.open("rb") as f:
        head = f.read(_HEAD)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 3:  # not a multi-byte character cut at the end
            return None
        text = head[: err.start].decode("utf-8")
    if not text or any(not (c.isprintable() or c in "\t\n\r\f") for c in text):
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:60] + ("..." if len(first) > 60 else "")


def check_onnx_path(path: str | os.PathLike[str]) -> Path:
    """Check, without parsing, that ``path`` could be an ONNX model file.

    Raises:
        FileNotFoundError: no such file.
        OnnxFileError: a directory, an empty file, or a text file.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "model.onnx"
        ...     _ = path.write_text("hello")
        ...     try:
        ...         check_onnx_path(path)
        ...     except OnnxFileError as err:
        ...         print(str(err).split(": ", 1)[1])
        is a text file (it starts 'hello'), not an ONNX model, which is binary protobuf
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such ONNX file: {os.fspath(path)!r}")
    if p.is_dir():
        raise OnnxFileError(f"{os.fspath(path)}: is a directory, not an ONNX file")
    if p.stat().st_size == 0:
        raise OnnxFileError(f"{os.fspath(path)}: the file is empty (0 bytes), not an ONNX model")
    first = _text_head(p)
    if first is not None:
        raise OnnxFileError(
            f"{os.fspath(path)}: is a text file (it starts {first!r}), not an ONNX model, "
            "which is binary protobuf"
        )
    return p


def read_onnx_file(path: str | os.PathLike[str], *, load_external_data: bool = True) -> Any:
    """``onnx.load(path)``, refusing files that hold no ONNX graph with a one-line reason.

    Raises:
        FileNotFoundError: no such file.
        OnnxFileError: an empty, text, truncated or corrupt file, or a model without a
            graph; the message names the file.
        ImportError: the onnx package is missing.
    """
    p = check_onnx_path(path)
    try:
        import onnx
    except ImportError:
        raise ImportError(
            'reading an ONNX file needs the onnx package: pip install "padkit[onnx]"'
        ) from None
    size = p.stat().st_size
    try:
        model = onnx.load(str(p), load_external_data=load_external_data)
    except Exception as err:
        if not type(err).__module__.startswith("google.protobuf"):  # DecodeError
            raise
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise OnnxFileError(
            f"{os.fspath(path)}: does not parse as an ONNX model ({size} bytes; truncated, "
            f"corrupt or not ONNX): {detail}"
        ) from None
    if not model.HasField("graph"):
        raise OnnxFileError(
            f"{os.fspath(path)}: holds no ONNX graph ({size} bytes that parse as a model "
            "without a graph), so there is nothing to inspect or run"
        )
    return model
