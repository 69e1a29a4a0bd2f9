"""One recogniser of model code: what a model computes for one input, as a typed record.

* :func:`record` runs a model once under module forward hooks and one torch function mode
  and writes a :class:`Record`: module calls (path, class, shapes, tensors), and on the way
  every pad however written (:class:`Pad`: ``F.pad`` in any mode, pad modules and their
  subclasses, ``torch.cat`` with constants or a state buffer), every crop (:class:`Crop`:
  a slice or ``narrow`` of one axis, in any module's code), every move of axes
  (:class:`AxisMove`), every conv and pool (:class:`~padkit.op.Op`), and which call reads
  which tensor. One pass writes; :func:`padkit.streaming.convert_causal` reads.
* :func:`probe` records a model at lengths it accepts, on copies (:class:`ProbeError` names
  the module that refused every length).
* :mod:`._calls`: one call or layer in padkit's terms (``call_op``, ``call_pad``,
  ``module_op``, ``owns``), :func:`layer_kind` (the one answer to "is this a conv or pool,
  and does its forward run just that") and :func:`padding_pairs` / :func:`torch_pairs`
  (the one reading of a layer's ``padding`` into pairs).

Imports ``op`` and ``spec`` only; ``surgery`` and ``streaming`` import it.
"""

from ._calls import (
    REDUCTIONS,
    PadCall,
    base_name,
    call_op,
    call_pad,
    layer_kind,
    module_op,
    owns,
    padding_pairs,
    torch_pairs,
)
from ._probe import ProbeError, model_copy, probe, probe_lengths
from ._record import (
    AxisMove,
    Call,
    Crop,
    ModuleCall,
    Pad,
    Record,
    Reduction,
    failing_module,
    func_name,
    record,
)

__all__ = [
    "REDUCTIONS",
    "AxisMove",
    "Call",
    "Crop",
    "ModuleCall",
    "Pad",
    "PadCall",
    "ProbeError",
    "Record",
    "Reduction",
    "base_name",
    "call_op",
    "call_pad",
    "failing_module",
    "func_name",
    "layer_kind",
    "model_copy",
    "module_op",
    "owns",
    "padding_pairs",
    "probe",
    "probe_lengths",
    "record",
    "torch_pairs",
]
