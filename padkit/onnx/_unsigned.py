"""Element-wise arithmetic, comparisons and bit operations that also work on uint16, uint32
and uint64 tensors, which torch stores but has few CPU kernels for.

uint16 / uint32 values are computed exactly in int64 and narrowed back (wrapping modulo
2**16 / 2**32, as ONNX's unsigned arithmetic does). uint64 values are reinterpreted as int64
bits: addition, subtraction, multiplication and bit operations are the same bits; ordering
flips the sign bit first; division and remainder use the unsigned long-division identity.
Every other dtype goes straight to torch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "add",
    "binary",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "div",
    "eq",
    "fmod",
    "ge",
    "gt",
    "le",
    "lt",
    "max",
    "min",
    "mod",
    "mul",
    "shift_left",
    "shift_right",
    "sub",
    "unary",
]

_WIDE = (torch.uint16, torch.uint32)
_SIGN = -(2**63)


def _is_unsigned(t: Tensor) -> bool:
    return t.dtype in _WIDE or t.dtype == torch.uint64


def _to_int64(t: Tensor) -> Tensor:
    return t.view(torch.int64) if t.dtype == torch.uint64 else t.to(torch.int64)


def _from_int64(t: Tensor, dtype: torch.dtype) -> Tensor:
    if dtype == torch.uint64:
        return t.view(torch.uint64)
    bits = 16 if dtype == torch.uint16 else 32
    return torch.bitwise_and(t, (1 << bits) - 1).to(dtype)


def _u64_ge(a: Tensor, b: Tensor) -> Tensor:
    return (a ^ _SIGN) >= (b ^ _SIGN)


def _u64_divmod(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Unsigned 64-bit quotient and remainder of int64 bit patterns."""
    a, b = torch.broadcast_tensors(a, b)  # type: ignore[no-untyped-call]
    big_b = b < 0  # b >= 2**63: the quotient is 0 or 1
    safe_b = torch.where(big_b | (b == 0), torch.ones_like(b), b)
    half = (a >> 1) & (2**63 - 1)  # a // 2, non-negative
    q = (half // safe_b) << 1
    r = a - q * safe_b
    step = _u64_ge(r, safe_b)
    q = q + step.to(torch.int64)
    r = r - torch.where(step, safe_b, torch.zeros_like(safe_b))
    big_q = _u64_ge(a, b).to(torch.int64)
    q = torch.where(big_b, big_q, q)
    r = torch.where(big_b, a - big_q * b, r)
    return q, r


def _u64_shift_right(a: Tensor, n: Tensor) -> Tensor:
    shifted = (a >> n) & ~((-1) << (64 - n).clamp(max=63))
    return torch.where(n == 0, a, torch.where(n >= 64, torch.zeros_like(a), shifted))


_SAME_BITS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor,
    "shift_left": torch.bitwise_left_shift,
}
_COMPARE: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "eq": torch.eq,
    "lt": torch.lt,
    "gt": torch.gt,
    "le": torch.le,
    "ge": torch.ge,
}
_ORDER: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "max": torch.maximum,
    "min": torch.minimum,
}
_TORCH: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    **_SAME_BITS,
    **_COMPARE,
    **_ORDER,
    "div": lambda a, b: (
        a / b
        if a.dtype.is_floating_point or b.dtype.is_floating_point
        else torch.div(a, b, rounding_mode="trunc")
    ),
    "mod": torch.remainder,
    "fmod": torch.fmod,
    "shift_right": torch.bitwise_right_shift,
}


def binary(op: str, a: Tensor, b: Tensor) -> Tensor:
    """``op`` of ``a`` and ``b`` (same dtype), exact for unsigned integers too."""
    if not (_is_unsigned(a) and a.dtype == b.dtype):
        return _TORCH[op](a, b)
    dtype = a.dtype
    x, y = _to_int64(a), _to_int64(b)
    if op in _COMPARE:
        if dtype == torch.uint64:
            x, y = x ^ _SIGN, y ^ _SIGN
        return _COMPARE[op](x, y)
    if op in _ORDER:
        if dtype == torch.uint64:
            return _from_int64(_ORDER[op](x ^ _SIGN, y ^ _SIGN) ^ _SIGN, dtype)
        return _from_int64(_ORDER[op](x, y), dtype)
    if op in _SAME_BITS:
        return _from_int64(_SAME_BITS[op](x, y), dtype)
    if op == "shift_right":
        out = _u64_shift_right(x, y) if dtype == torch.uint64 else x >> y
        return _from_int64(out, dtype)
    if dtype == torch.uint64:
        q, r = _u64_divmod(x, y)
        return _from_int64(q if op == "div" else r, dtype)
    out = torch.div(x, y, rounding_mode="trunc") if op == "div" else torch.remainder(x, y)
    return _from_int64(out, dtype)


def unary(op: str, a: Tensor) -> Tensor:
    """``bitwise_not`` (the only unsigned unary op torch lacks kernels for)."""
    if _is_unsigned(a):
        return _from_int64(torch.bitwise_not(_to_int64(a)), a.dtype)
    return torch.bitwise_not(a)


# named entry points, so that the generated forward() reads add(x, y), not binary("add", ...)


def add(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``add``, unsigned integers included."""
    return binary("add", a, b)


def sub(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``sub``, unsigned integers included."""
    return binary("sub", a, b)


def mul(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``mul``, unsigned integers included."""
    return binary("mul", a, b)


def div(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``div``, unsigned integers included."""
    return binary("div", a, b)


def mod(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``mod``, unsigned integers included."""
    return binary("mod", a, b)


def fmod(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``fmod``, unsigned integers included."""
    return binary("fmod", a, b)


def eq(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``eq``, unsigned integers included."""
    return binary("eq", a, b)


def lt(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``lt``, unsigned integers included."""
    return binary("lt", a, b)


def gt(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``gt``, unsigned integers included."""
    return binary("gt", a, b)


def le(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``le``, unsigned integers included."""
    return binary("le", a, b)


def ge(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``ge``, unsigned integers included."""
    return binary("ge", a, b)


def max(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``max``, unsigned integers included."""
    return binary("max", a, b)


def min(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``min``, unsigned integers included."""
    return binary("min", a, b)


def bitwise_and(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``bitwise_and``, unsigned integers included."""
    return binary("bitwise_and", a, b)


def bitwise_or(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``bitwise_or``, unsigned integers included."""
    return binary("bitwise_or", a, b)


def bitwise_xor(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``bitwise_xor``, unsigned integers included."""
    return binary("bitwise_xor", a, b)


def shift_left(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``shift_left``, unsigned integers included."""
    return binary("shift_left", a, b)


def shift_right(a: Tensor, b: Tensor) -> Tensor:
    """ONNX semantics of ``shift_right``, unsigned integers included."""
    return binary("shift_right", a, b)
