"""Bad inputs: exception type, message and *when* it is raised.

Each row is ``(id, build, input, exception, regex, raised_at)``. ``build`` makes the layer,
``input`` is fed to it when the error is expected at forward. Messages must name the
argument and echo the offending value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import padkit.functional as PF
import padkit.nn as pn
from padkit import Padding, PaddingError, resolve_padding

torch.set_num_threads(1)

CONSTRUCTION = "construction"
FORWARD = "forward"


@dataclass(frozen=True)
class ErrorCase:
    id: str
    build: Callable[[], torch.nn.Module]
    input: Callable[[], torch.Tensor] | None
    error: type[Exception]
    regex: str
    raised_at: str


def x4(*shape: int, dtype: torch.dtype = torch.float32) -> Callable[[], torch.Tensor]:
    return lambda: torch.ones(*shape, dtype=dtype)


def c(
    id: str,
    build: Callable[[], torch.nn.Module],
    error: type[Exception],
    regex: str,
    input: Callable[[], torch.Tensor] | None = None,
) -> ErrorCase:
    return ErrorCase(id, build, input, error, regex, CONSTRUCTION if input is None else FORWARD)


PE = PaddingError
T = TypeError

CASES: list[ErrorCase] = [
    # ---- padding strings
    c("conv_unknown_string", lambda: pn.Conv2d(1, 1, 3, padding="foo"), PE, r"padding.*'foo'"),
    c("pool_unknown_string", lambda: pn.MaxPool2d(3, padding="foo"), PE, r"padding.*'foo'"),
    c("avg_unknown_string", lambda: pn.AvgPool1d(3, padding="tf_same"), PE, r"padding.*'tf_same'"),
    c(
        "convT_unknown_string",
        lambda: pn.ConvTranspose2d(1, 1, 3, padding="foo"),
        PE,
        r"padding.*'foo'",
    ),
    c(
        "per_axis_unknown_string",
        lambda: pn.Conv2d(1, 1, 3, padding=(1, "half")),
        PE,
        r"padding\[1\].*'half'",
    ),
    # ---- wrong length / malformed tuples
    c("len1_for_2d", lambda: pn.Conv2d(1, 1, 3, padding=(1,)), PE, r"padding has 1 axis"),
    c("len3_for_2d", lambda: pn.Conv2d(1, 1, 3, padding=(1, 1, 1)), PE, r"padding has 3 axis"),
    c("pool_len3_for_2d", lambda: pn.MaxPool2d(3, padding=(1, 1, 1)), PE, r"padding has 3 axis"),
    c(
        "pairs_len3_for_2d",
        lambda: pn.Conv2d(1, 1, 3, padding=((0, 1), (0, 1), (0, 1))),
        PE,
        r"padding has 3 axis",
    ),
    c(
        "flat4_conv2d",
        lambda: pn.Conv2d(1, 1, 3, padding=(0, 1, 0, 1)),
        PE,
        r"padding=\(0, 1, 0, 1\).*Padding\.from_torch_pad.*Padding\.from_onnx",
    ),
    c(
        "flat4_maxpool2d",
        lambda: pn.MaxPool2d(3, padding=(0, 1, 0, 1)),
        PE,
        r"padding=\(0, 1, 0, 1\).*from_torch_pad.*from_onnx",
    ),
    c(
        "flat4_avgpool2d",
        lambda: pn.AvgPool2d(3, padding=[1, 0, 1, 0]),
        PE,
        r"padding=\(1, 0, 1, 0\).*from_torch_pad.*from_onnx",
    ),
    c(
        "flat2_conv1d",
        lambda: pn.Conv1d(1, 1, 3, padding=(0, 2)),
        PE,
        r"padding=\(0, 2\).*from_torch_pad.*from_onnx",
    ),
    c(
        "flat6_conv3d",
        lambda: pn.Conv3d(1, 1, 3, padding=(0, 1, 0, 1, 0, 1)),
        PE,
        r"padding=\(0, 1, 0, 1, 0, 1\).*from_torch_pad.*from_onnx",
    ),
    c(
        "triple_in_pairs",
        lambda: pn.Conv2d(1, 1, 3, padding=((1, 2, 3), 1)),
        PE,
        r"padding\[0\] must be a \(lo, hi\) pair, got \(1, 2, 3\)",
    ),
    c("empty_tuple", lambda: pn.Conv2d(1, 1, 3, padding=()), PE, r"padding must not be empty"),
    # ---- non-integer pads
    c("float_pad", lambda: pn.Conv2d(1, 1, 3, padding=1.5), T, r"padding.*float \(1\.5\)"),
    c("float_integral_pad", lambda: pn.Conv2d(1, 1, 3, padding=1.0), T, r"padding.*float \(1\.0\)"),
    c("bool_pad", lambda: pn.Conv2d(1, 1, 3, padding=True), T, r"padding must not be a bool.*True"),
    c("pool_bool_pad", lambda: pn.MaxPool2d(3, padding=True), T, r"padding.*bool.*True"),
    c("pool_float_pad", lambda: pn.AvgPool2d(3, padding=1.5), T, r"padding.*1\.5"),
    c("lp_float_pad", lambda: pn.LPPool2d(2, 3, padding=0.5), T, r"padding.*0\.5"),
    c(
        "float_in_pair",
        lambda: pn.Conv2d(1, 1, 3, padding=((1, 2.5), 1)),
        T,
        r"padding\[0\]\[1\] must be an int.*2\.5",
    ),
    c(
        "bool_in_tuple",
        lambda: pn.Conv2d(1, 1, 3, padding=(1, False)),
        T,
        r"padding\[1\].*bool.*False",
    ),
    c(
        "tensor_pad_1d",
        lambda: pn.Conv2d(1, 1, 3, padding=torch.tensor([1, 1])),  # type: ignore[arg-type]
        T,
        r"padding.*Tensor",
    ),
    c(
        "tensor_pad_0d",
        lambda: pn.Conv2d(1, 1, 3, padding=torch.tensor(1)),  # type: ignore[arg-type]
        T,
        r"padding.*[Tt]ensor",
    ),
    c(
        "float_tensor_pad",
        lambda: pn.Conv2d(1, 1, 3, padding=torch.tensor(1.0)),  # type: ignore[arg-type]
        T,
        r"padding.*[Tt]ensor",
    ),
    # ---- negative pads
    c(
        "negative_int",
        lambda: pn.Conv2d(1, 1, 3, padding=-1),
        PE,
        r"padding must be non-negative.*-1",
    ),
    c(
        "negative_in_pair",
        lambda: pn.Conv2d(1, 1, 3, padding=((0, -2), 0)),
        PE,
        r"padding must be non-negative.*-2",
    ),
    c("pool_negative", lambda: pn.MaxPool1d(3, padding=-1), PE, r"padding must be non-negative"),
    c(
        "convT_negative",
        lambda: pn.ConvTranspose2d(1, 1, 3, padding=-1),
        PE,
        r"padding must be non-negative.*-1",
    ),
    # ---- kernel / stride / dilation
    c("kernel_zero", lambda: pn.Conv2d(1, 1, 0), PE, r"kernel_size\[0\] must be >= 1, got 0"),
    c("kernel_neg", lambda: pn.Conv2d(1, 1, (3, -1)), PE, r"kernel_size\[1\] must be >= 1, got -1"),
    c("kernel_float", lambda: pn.Conv2d(1, 1, 2.5), T, r"kernel_size.*2\.5"),  # type: ignore[arg-type]
    c("kernel_len3_2d", lambda: pn.Conv2d(1, 1, (3, 3, 3)), PE, r"kernel_size.*\(3, 3, 3\)"),
    c("stride_zero", lambda: pn.Conv2d(1, 1, 3, stride=0), PE, r"stride\[0\] must be >= 1, got 0"),
    c("stride_neg", lambda: pn.Conv1d(1, 1, 3, stride=-1), PE, r"stride must be >= 1, got -1"),
    c("dilation_zero", lambda: pn.Conv2d(1, 1, 3, dilation=0), PE, r"dilation\[0\].*got 0"),
    c("dilation_neg", lambda: pn.Conv3d(1, 1, 3, dilation=-1), PE, r"dilation\[0\].*got -1"),
    c("convT_stride_zero", lambda: pn.ConvTranspose1d(1, 1, 3, stride=0), PE, r"stride.*got 0"),
    c("convT_dilation_zero", lambda: pn.ConvTranspose2d(1, 1, 3, dilation=0), PE, r"dilation.*0"),
    c("maxpool_kernel_zero", lambda: pn.MaxPool1d(0), PE, r"kernel_size must be >= 1, got 0"),
    c("maxpool_stride_zero", lambda: pn.MaxPool2d(3, stride=0), PE, r"stride\[0\].*got 0"),
    c("maxpool_dilation_zero", lambda: pn.MaxPool2d(3, dilation=0), PE, r"dilation\[0\].*got 0"),
    c("avgpool_kernel_neg", lambda: pn.AvgPool3d(-2), PE, r"kernel_size\[0\].*got -2"),
    c("avgpool_stride_zero", lambda: pn.AvgPool2d(2, stride=(1, 0)), PE, r"stride\[1\].*got 0"),
    c("avgpool_dilation_zero", lambda: pn.AvgPool1d(2, dilation=0), PE, r"dilation.*got 0"),
    c("lppool_kernel_zero", lambda: pn.LPPool2d(2, 0), PE, r"kernel_size\[0\].*got 0"),
    c("lppool_stride_zero", lambda: pn.LPPool1d(2, 2, stride=0), PE, r"stride.*got 0"),
    # ---- padding modes
    c(
        "unknown_mode",
        lambda: pn.Conv2d(1, 1, 3, padding_mode="reflection"),
        PE,
        r"padding_mode must be one of.*'reflection'",
    ),
    c(
        "constant_mode_for_conv",
        lambda: pn.Conv2d(1, 1, 3, padding_mode="constant"),
        PE,
        r"padding_mode must be one of.*'zeros'.*'constant'",
    ),
    c(
        "int_mode",
        lambda: pn.Conv1d(1, 1, 3, padding_mode=3),  # type: ignore[arg-type]
        PE,
        r"padding_mode must be one of.*got 3",
    ),
    c(
        "convT_reflect",
        lambda: pn.ConvTranspose2d(1, 1, 3, padding_mode="reflect"),
        PE,
        r"padding_mode must be 'zeros'.*'reflect'",
    ),
    c(
        "convT_circular",
        lambda: pn.ConvTranspose1d(1, 1, 3, padding_mode="circular"),
        PE,
        r"padding_mode must be 'zeros'.*'circular'",
    ),
    # ---- transposed conv output_padding
    c(
        "output_padding_ge_stride",
        lambda: pn.ConvTranspose2d(1, 1, 3, stride=2, output_padding=2),
        PE,
        r"output_padding\[0\]=2 must be smaller than stride \(2\) or dilation \(1\)",
    ),
    c(
        "output_padding_ge_dilation",
        lambda: pn.ConvTranspose1d(1, 1, 3, stride=1, dilation=2, output_padding=2),
        PE,
        r"output_padding\[0\]=2 must be smaller than stride \(1\) or dilation \(2\)",
    ),
    c(
        "output_padding_second_axis",
        lambda: pn.ConvTranspose2d(1, 1, 3, stride=(3, 1), output_padding=(2, 1)),
        PE,
        r"output_padding\[1\]=1",
    ),
    c(
        "output_padding_negative",
        lambda: pn.ConvTranspose1d(1, 1, 3, stride=2, output_padding=-1),
        PE,
        r"output_padding.*-1",
    ),
    # ---- avg pool divisor / lp norm
    c(
        "divisor_zero_2d",
        lambda: pn.AvgPool2d(3, divisor_override=0),
        PE,
        r"divisor_override must not be zero, got 0",
    ),
    c(
        "divisor_zero_1d",
        lambda: pn.AvgPool1d(3, divisor_override=0),
        PE,
        r"divisor_override must not be zero, got 0",
    ),
    c(
        "divisor_zero_3d",
        lambda: pn.AvgPool3d(3, divisor_override=0),
        PE,
        r"divisor_override must not be zero, got 0",
    ),
    c(
        "divisor_float",
        lambda: pn.AvgPool2d(3, divisor_override=1.5),  # type: ignore[arg-type]
        T,
        r"divisor_override.*1\.5",
    ),
    c(
        "norm_zero",
        lambda: pn.LPPool2d(0, 3),
        PE,
        r"norm_type must be a positive number or -inf, got 0",
    ),
    c("norm_negative", lambda: pn.LPPool1d(-2.0, 3), PE, r"norm_type.*got -2\.0"),
    c(
        "norm_string",
        lambda: pn.LPPool2d("two", 3),  # type: ignore[arg-type]
        (PE, T),  # type: ignore[arg-type]
        r"norm_type.*'two'",
    ),
    c("norm_bool", lambda: pn.LPPool3d(True, 2), (PE, T), r"norm_type.*True"),  # type: ignore[arg-type]
    # ---- forward-time: reflect / circular pads vs input size
    c(
        "reflect_pad_eq_size",
        lambda: pn.Conv2d(1, 1, 3, padding=((0, 0), (4, 0)), padding_mode="reflect"),
        PE,
        r"reflect padding \(4, 0\) on (spatial )?axis \d.*\(4\)",
        x4(1, 1, 6, 4),
    ),
    c(
        "reflect_same_huge_dilation",
        lambda: pn.Conv2d(1, 1, 3, dilation=10, padding="same", padding_mode="reflect"),
        PE,
        r"reflect padding \(10, 10\) on (spatial )?axis \d.*\(8\)",
        x4(1, 1, 8, 8),
    ),
    c(
        "reflect_1d",
        lambda: pn.Conv1d(1, 1, 5, padding="causal", padding_mode="reflect"),
        PE,
        r"reflect padding \(4, 0\) on (spatial )?axis \d.*\(3\)",
        x4(1, 1, 3),
    ),
    c(
        "circular_pad_gt_size",
        lambda: pn.Conv1d(1, 1, 3, padding=((3, 0),), padding_mode="circular"),
        PE,
        r"circular padding \(3, 0\) on (spatial )?axis \d.*\(2\)",
        x4(1, 1, 2),
    ),
    # ---- forward-time: zero-size spatial inputs
    c(
        "conv_zero_spatial",
        lambda: pn.Conv2d(1, 1, 1),
        PE,
        r"size 0 along spatial axis 0.*\(1, 1, 0, 5\)",
        x4(1, 1, 0, 5),
    ),
    c(
        "conv_zero_spatial_same",
        lambda: pn.Conv2d(1, 1, 3, padding="same"),
        PE,
        r"size 0 along spatial axis 1",
        x4(1, 1, 5, 0),
    ),
    c(
        "convT_zero_spatial",
        lambda: pn.ConvTranspose1d(1, 1, 3),
        PE,
        r"size 0 along spatial axis 0",
        x4(1, 1, 0),
    ),
    c(
        "maxpool_zero_spatial",
        lambda: pn.MaxPool2d(1),
        PE,
        r"size 0 along spatial axis 0",
        x4(1, 1, 0, 4),
    ),
    c(
        "avgpool_zero_spatial",
        lambda: pn.AvgPool3d(1, padding="same"),
        PE,
        r"size 0 along spatial axis 2",
        x4(1, 1, 2, 2, 0),
    ),
    c(
        "lppool_zero_spatial",
        lambda: pn.LPPool1d(2, 1),
        PE,
        r"size 0 along spatial axis 0",
        x4(1, 1, 0),
    ),
    # ---- forward-time: effective kernel larger than the padded input
    c(
        "conv_kernel_gt_input",
        lambda: pn.Conv2d(1, 1, 5),
        PE,
        r"axis 0 the padded input \(3 \+ 0 \+ 0 = 3\) is smaller than the effective kernel \(5\)",
        x4(1, 1, 3, 8),
    ),
    c(
        "conv_dilated_kernel_gt_input",
        lambda: pn.Conv1d(1, 1, 3, dilation=3, padding=((1, 0),)),
        PE,
        r"padded input \(4 \+ 1 \+ 0 = 5\) is smaller than the effective kernel \(7\)",
        x4(1, 1, 4),
    ),
    c(
        "maxpool_kernel_gt_input",
        lambda: pn.MaxPool2d(5),
        PE,
        r"axis 1 the padded input \(3 \+ 0 \+ 0 = 3\).*effective kernel \(5\)",
        x4(1, 1, 8, 3),
    ),
    c(
        "avgpool_dilated_kernel_gt_input",
        lambda: pn.AvgPool1d(2, dilation=4),
        PE,
        r"padded input \(3 \+ 0 \+ 0 = 3\).*effective kernel \(5\)",
        x4(1, 1, 3),
    ),
    # ---- forward-time: channels and rank
    c(
        "conv_channel_mismatch",
        lambda: pn.Conv2d(2, 1, 3),
        PE,
        r"input has 1 channels.*expects 2",
        x4(1, 1, 5, 5),
    ),
    c(
        "conv_groups_channel_mismatch",
        lambda: pn.Conv1d(4, 4, 3, groups=2),
        PE,
        r"input has 3 channels.*groups=2 expects 4",
        x4(1, 3, 5),
    ),
    c(
        "convT_channel_mismatch",
        lambda: pn.ConvTranspose2d(3, 1, 3),
        PE,
        r"input has 2 channels.*expects 3",
        x4(1, 2, 5, 5),
    ),
    c(
        "conv_wrong_rank",
        lambda: pn.Conv2d(1, 1, 3),
        PE,
        r"expected a 3-D \(unbatched\) or 4-D \(batched\) input, got a 5-D input",
        x4(1, 1, 1, 5, 5),
    ),
    c(
        "pool_wrong_rank",
        lambda: pn.MaxPool1d(2),
        PE,
        r"expected a 2-D \(unbatched\) or 3-D \(batched\) input, got a 1-D input",
        x4(5),
    ),
    # ---- forward-time: dtypes
    c(
        "maxpool_bool",
        lambda: pn.MaxPool2d(2, padding="same"),
        T,
        r"max pool.*bool",
        x4(1, 1, 4, 4, dtype=torch.bool),
    ),
    c(
        "avgpool_bool",
        lambda: pn.AvgPool1d(2),
        T,
        r"average pool.*bool",
        x4(1, 1, 4, dtype=torch.bool),
    ),
    c(
        "lppool_bool",
        lambda: pn.LPPool2d(2, 2),
        T,
        r"LP pool.*bool",
        x4(1, 1, 4, 4, dtype=torch.bool),
    ),
    # ---- forward-time: windows that cannot be honoured
    c(
        "avg_window_all_padding_excluded",
        lambda: pn.AvgPool1d(2, 2, padding=((2, 0),), count_include_pad=False),
        PE,
        r"window on spatial axis 0 holds no input element.*\(2, 0\)",
        x4(1, 1, 4),
    ),
    c(
        "caffe_window_outside",
        lambda: pn.MaxPool1d(1, 2, padding=Padding.from_caffe(0, ndim=1)),
        PE,
        r"Caffe ceil rounding.*axis 0",
        x4(1, 1, 4),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_error_inputs(case: ErrorCase) -> None:
    if case.raised_at == CONSTRUCTION:
        with pytest.raises(case.error, match=case.regex) as info:
            case.build()
    else:
        layer = case.build()  # must not raise: the problem is only visible with the input
        assert case.input is not None
        x = case.input()
        with pytest.raises(case.error, match=case.regex) as info:
            layer(x)
    assert isinstance(info.value, (PaddingError, TypeError)), type(info.value)
    if isinstance(info.value, ValueError):
        assert isinstance(info.value, PaddingError)


def test_construction_errors_name_the_layer() -> None:
    for case in CASES:
        if case.raised_at != CONSTRUCTION:
            continue
        try:
            case.build()
        except (PaddingError, TypeError) as err:
            message = str(err)
        else:
            continue  # test_error_inputs reports the missing error
        layer_name = re.search(r"pn\.(\w+)\(", _source_of(case))
        if layer_name is not None:
            assert layer_name.group(1) in message, (case.id, message)


def _source_of(case: ErrorCase) -> str:
    import inspect

    try:
        return inspect.getsource(case.build)
    except OSError:  # pragma: no cover
        return ""


# ----------------------------------------------------------------------------- accepted inputs


@pytest.mark.parametrize("text", ["Same", "SAME", "same", "sAmE"])
def test_padding_strings_are_case_insensitive(text: str) -> None:
    conv = pn.Conv2d(1, 1, 3, padding=text)
    assert conv.pad_spec == Padding.parse("same", 2)
    pool = pn.MaxPool2d(3, 1, padding=text)
    assert pool(torch.ones(1, 1, 5, 5)).shape == (1, 1, 5, 5)


def test_output_padding_below_dilation_is_accepted() -> None:
    # torch: output_padding < max(stride, dilation) is legal even with stride 1
    layer = pn.ConvTranspose2d(1, 1, 3, stride=1, dilation=2, output_padding=1)
    ref = torch.nn.ConvTranspose2d(1, 1, 3, stride=1, dilation=2, output_padding=1)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(1, 1, 4, 4)
    torch.testing.assert_close(layer(x), ref(x))


def test_reflect_pad_just_below_size_is_accepted() -> None:
    layer = pn.Conv1d(1, 1, 4, padding="causal", padding_mode="reflect")
    x = torch.randn(1, 1, 4)
    ref = F.conv1d(F.pad(x, (3, 0), mode="reflect"), layer.weight, layer.bias)
    torch.testing.assert_close(layer(x), ref)


# ----------------------------------------------------------------------------- spec / functional


SPEC_CASES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("resolve_same_no_input_size", lambda: resolve_padding("same", 3, 2), PE, r"input_size"),
    (
        "resolve_same_lower_no_input_size",
        lambda: Padding.parse("same_lower").resolve(3, (2, 1), ndim=2),
        PE,
        r"'same_lower' with stride 2 on axis 0.*input_size",
    ),
    ("torch_pad_odd_length", lambda: Padding.from_torch_pad((1, 2, 3)), PE, r"pad.*\(1, 2, 3\)"),
    ("torch_pad_float", lambda: Padding.from_torch_pad((1, 2.0)), T, r"pad\[1\].*2\.0"),
    (
        "onnx_bad_auto_pad",
        lambda: Padding.from_onnx(auto_pad="SAME_MIDDLE"),
        PE,
        r"auto_pad.*'SAME_MIDDLE'",
    ),
    (
        "onnx_pads_wrong_length",
        lambda: Padding.from_onnx(pads=[0, 1, 2], ndim=1),
        PE,
        r"pads must have length 2, got \[0, 1, 2\]",
    ),
    (
        "onnx_pads_with_auto_pad",
        lambda: Padding.from_onnx(pads=[1, 1], auto_pad="SAME_UPPER"),
        PE,
        r"pads=\[1, 1\].*auto_pad='SAME_UPPER'",
    ),
    ("onnx_negative_pads", lambda: Padding.from_onnx(pads=[-1, 0]), PE, r"non-negative.*-1"),
    ("jax_bad_string", lambda: Padding.from_jax("FULL"), PE, r"padding.*'FULL'"),
    ("jax_not_pairs", lambda: Padding.from_jax((3, 3)), PE, r"pairs.*\(3, 3\)"),  # type: ignore[arg-type]
    ("flux_bad_length", lambda: Padding.from_flux((1, 2, 3), ndim=2), PE, r"pad.*\(1, 2, 3\)"),
    ("flux_bad_string", lambda: Padding.from_flux("Valid", ndim=2), PE, r"pad.*'Valid'"),
    ("parse_none", lambda: Padding.parse(None), T, r"padding.*NoneType"),  # type: ignore[arg-type]
    (
        "to_torch_asymmetric",
        lambda: Padding.parse(((0, 1),)).to_torch(),
        PE,
        r"asymmetric",
    ),
    (
        "functional_unknown_string",
        lambda: PF.conv2d(torch.ones(1, 1, 4, 4), torch.ones(1, 1, 3, 3), padding="foo"),
        PE,
        r"conv2d\(\).*padding.*'foo'",
    ),
    (
        "functional_flat4",
        lambda: PF.max_pool2d(torch.ones(1, 1, 4, 4), 2, padding=(0, 1, 0, 1)),
        PE,
        r"max_pool2d\(\).*\(0, 1, 0, 1\).*from_torch_pad",
    ),
    (
        "functional_pad_value_non_constant",
        lambda: PF.pad(torch.ones(1, 1, 4), ((1, 1),), mode="reflect", value=1.0),
        PE,
        r"value=.*mode='reflect'",
    ),
    (
        "functional_pad_unknown_mode",
        lambda: PF.pad(torch.ones(1, 1, 4), ((1, 1),), mode="mirror"),
        PE,
        r"mode must be one of.*'mirror'",
    ),
    (
        "functional_pad_int_value",
        lambda: PF.pad(torch.ones(1, 1, 4, dtype=torch.int64), ((1, 1),), value=0.5),
        PE,
        r"value 0\.5.*torch\.int64",
    ),
    (
        "functional_pad_crop_too_much",
        lambda: PF.pad(torch.ones(1, 1, 3), ((-2, -2),)),
        PE,
        r"pads \(-2, -2\) on axis 2 remove 4 elements from a dimension of size 3",
    ),
    (
        "convT_output_size_unreachable",
        lambda: pn.ConvTranspose1d(1, 1, 3, stride=2, padding=1)(
            torch.ones(1, 1, 4), output_size=[10]
        ),
        PE,
        r"output_size\[0\]=10 is not reachable.*7\.\.8",
    ),
    (
        "functional_divisor_zero",
        lambda: PF.avg_pool2d(torch.ones(1, 1, 4, 4), 2, divisor_override=0),
        PE,
        r"divisor_override must not be zero, got 0",
    ),
    (
        "functional_norm_type",
        lambda: PF.lp_pool1d(torch.ones(1, 1, 4), -1, 2),
        PE,
        r"norm_type.*-1",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "regex"),
    [case[1:] for case in SPEC_CASES],
    ids=[case[0] for case in SPEC_CASES],
)
def test_spec_and_functional_errors(
    call: Callable[[], Any], error: type[Exception], regex: str
) -> None:
    with pytest.raises(error, match=regex) as info:
        call()
    assert isinstance(info.value, (PaddingError, TypeError))
    if isinstance(info.value, ValueError):
        assert isinstance(info.value, PaddingError)


def test_padding_error_is_a_value_error() -> None:
    assert issubclass(PaddingError, ValueError)
    with pytest.raises(ValueError, match="foo"):
        pn.Conv1d(1, 1, 3, padding="foo")
