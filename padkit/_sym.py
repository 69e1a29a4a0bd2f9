"""torch's symbolic-size tests, imported only when a symbolic size can meet them.

``torch.fx.experimental.symbolic_shapes`` pulls in sympy (~0.3 s and ~40 MB at import).
padkit asks it about sizes on every call, but eagerly a size is a plain ``int`` and the
question a plain ``bool``, which the answers below give as torch's functions do. A
``torch.SymBool`` or ``torch.SymInt`` exists only inside a trace (``torch.compile``,
``torch.export``, ``make_fx``), whose machinery has imported the module already.

Under dynamo a symbolic size passes ``isinstance(n, int)`` and ``type(n) is int`` (dynamo
answers both for the value the size stands for), so the plain-value shortcut is taken only
where ``torch.compiler.is_compiling()`` is False; a compiled trace always asks torch's
function, which dynamo handles itself.
"""

from __future__ import annotations

from typing import Any

from torch.compiler import is_compiling


def statically_known_true(x: Any) -> bool:
    """``torch.fx.experimental.symbolic_shapes.statically_known_true``: a plain bool is
    its own answer (as there); anything else, and everything under dynamo, is asked of
    torch's function."""
    if isinstance(x, bool) and not is_compiling():
        return x
    from torch.fx.experimental.symbolic_shapes import statically_known_true as known

    return known(x)


def has_static_value(a: Any) -> bool:
    """``torch.fx.experimental.symbolic_shapes.has_static_value``: a plain number has one
    (as there); anything else, and everything under dynamo, is asked of torch's function."""
    if isinstance(a, (bool, int, float)) and not is_compiling():
        return True
    from torch.fx.experimental.symbolic_shapes import has_static_value as static

    return static(a)
