"""Classes padkit makes at run time that pickle.

Surgery and streaming replace a module by an instance of a subclass made at run time and
named like the class it stands in for (tools find layers by type or class name). Python's
pickle cannot name such a class, so each one carries the factory that made it and the
factory's arguments: a pickle records those, and unpickling asks the factory (which
caches its classes) for the class again and restores the instance's state into it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["made_by", "stand_in"]


def made_by(factory: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """Namespace entries for the class ``factory(*args)`` returns (module-level
    ``factory``, picklable ``args``), so that its instances pickle."""
    return {"__reduce_ex__": _reduce, "_padkit_made": (factory, args)}


_MADE: dict[tuple[Any, ...], type] = {}


def stand_in(
    factory: Callable[..., Any],
    args: tuple[Any, ...],
    like: type,
    bases: tuple[type, ...],
    members: Callable[[], dict[str, Any]],
    doc: str | None = None,
) -> type:
    """The class ``factory(*args)`` stands for: named like ``like`` (module and docstring
    too, unless ``doc``), deriving from ``bases``, with ``members()`` (called once), made
    once per ``factory`` and ``args`` and pickled by :func:`made_by`. Raises what ``type``
    raises where Python cannot combine ``bases`` (the next call tries again)."""
    key = (factory, *args)
    cls = _MADE.get(key)
    if cls is None:
        namespace = {
            "__module__": like.__module__,
            "__doc__": like.__doc__ if doc is None else doc,
            **members(),
            **made_by(factory, *args),
        }
        cls = _MADE[key] = type(like.__name__, bases, namespace)
    return cls


def _reduce(self: Any, protocol: Any) -> Any:
    factory, args = type(self)._padkit_made
    return _remake, (factory, args, self.__dict__.copy())


def _remake(factory: Callable[..., Any], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    cls = factory(*args)
    obj = cls.__new__(cls)
    obj.__setstate__(state)
    return obj
