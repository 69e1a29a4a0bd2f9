"""``padkit.onnx.verify_export`` and ``padkit verify FILE --against SPEC``: an exported file
against the torch model it came from, at sizes the export never saw (issue 45).

The right file is a padkit model with TF-style 'same' padding at stride 2, exported by the
TorchScript exporter with dynamic batch and spatial axes. The wrong file is the same
network written with torch layers and the pads that 'same' gives at the export size,
33x29, hard-coded in a ``ZeroPad2d``: equal to the padkit model there (checked here with
torch alone), different at most other sizes. onnxruntime runs the file; the reference is
the torch model itself.
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import padkit
from padkit.cli import main
from padkit.onnx import load_model, verify_export
from padkit.onnx._verify_export import default_sizes

pytest.importorskip("onnxruntime")

EXPORT = (1, 3, 33, 29)

FACTORY = """
import torch
from torch import nn
import padkit


def build():
    torch.manual_seed(0)
    return nn.Sequential(
        padkit.nn.Conv2d(3, 4, 3, stride=2, padding="same"),
        nn.ReLU(),
        padkit.nn.MaxPool2d(2, 2, padding="same"),
    )


def not_a_module():
    return 3


def broken():
    raise RuntimeError("no weights here")


VALUE = 7
"""


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        padkit.nn.Conv2d(3, 4, 3, stride=2, padding="same"),
        nn.ReLU(),
        padkit.nn.MaxPool2d(2, 2, padding="same"),
    ).eval()


def baked(model: nn.Module) -> nn.Module:
    """The model with its conv's 'same' pads at the export size written in as constants."""
    conv = model[0]
    (top, bottom), (left, right) = conv.resolved_padding(EXPORT[2:])
    plain = nn.Conv2d(3, 4, 3, stride=2)
    plain.weight, plain.bias = conv.weight, conv.bias
    return nn.Sequential(
        nn.ZeroPad2d((left, right, top, bottom)), plain, nn.ReLU(), model[2]
    ).eval()


def export(model: nn.Module) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.randn(*EXPORT),),
            buf,
            input_names=["x"],
            dynamo=False,
            dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}},
        )
    return buf.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("against")
    model = build()
    wrong = baked(model)
    x = torch.randn(*EXPORT)
    with torch.no_grad():  # the wrong model is right at the export size, wrong elsewhere
        assert torch.equal(wrong(x), model(x))
        y = torch.randn(1, 3, 34, 30)
        assert not torch.allclose(wrong(y), model(y))
    right_file, wrong_file = folder / "right.onnx", folder / "wrong.onnx"
    right_file.write_bytes(export(model))
    wrong_file.write_bytes(export(wrong))
    factory = folder / "nets.py"
    factory.write_text(FACTORY)
    return right_file, wrong_file, factory


def test_default_sizes_move_every_dynamic_dim_to_sizes_the_export_never_saw() -> None:
    sizes = default_sizes([("x", ("n", 3, "h", "w"), 1)], EXPORT)
    assert sizes[0] == (EXPORT,)
    assert ((2, 3, 34, 30),) in sizes  # a batch of 2
    spatial = {s[0][2:] for s in sizes}
    assert len(spatial) == 5 and any(h % 2 and w % 2 for h, w in spatial if (h, w) != (33, 29))
    assert any(h - 33 != w - 29 for h, w in spatial)  # the axes move apart once
    # fixed dims stay; dynamic ones without a base start at 1 (batch) and 32
    assert default_sizes([("x", (1, 3, "t"), 1)])[0] == ((1, 3, 32),)
    with pytest.raises(ValueError, match=r"dim 1 of input 'x' is fixed at 3"):
        default_sizes([("x", ("n", 3, "h", "w"), 1)], (1, 4, 8, 8))


def test_the_right_file_passes(files: tuple[Path, Path, Path]) -> None:
    report = verify_export(build(), files[0], input_shape=EXPORT)
    assert report.passed, str(report)
    assert report.compared == 5 and "PASS: 5 size(s)" in str(report)


def test_a_file_exact_only_at_its_export_size_fails(files: tuple[Path, Path, Path]) -> None:
    report = verify_export(build(), files[1], input_shape=EXPORT)
    assert not report.passed
    assert report.sizes[0].passed  # the export size itself matches
    failed = [s for s in report.sizes if not s.passed]
    assert failed and all(s.inputs[0][1] != EXPORT for s in failed)
    assert "FAIL:" in str(report) and "MISMATCH" in str(report)
    # and the importer check alone cannot see it: the file is what onnxruntime runs
    from padkit.onnx.verify import verify

    assert verify(files[1], input_shapes=[(1, 3, 34, 30)]).passed


def test_shapes_are_compared_too(files: tuple[Path, Path, Path]) -> None:
    """A file one cell short at other sizes fails on the shape, as issue 45's pools did."""
    model = build()

    class Longer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.pad(self.net(x), (0, 1))

    report = verify_export(Longer().eval(), files[0], sizes=[EXPORT])
    (size,) = report.sizes
    (out,) = size.outputs
    assert not report.passed and out.padkit_shape[-1] == out.shape[-1] + 1
    assert "(torch 1x4x9x9)" in str(report)


def test_given_sizes_and_sizes_the_model_refuses(files: tuple[Path, Path, Path]) -> None:
    report = verify_export(build(), files[0], sizes=[(1, 3, 9, 8), {"x": (2, 3, 5, 7)}])
    assert report.passed and [s.inputs[0][1] for s in report.sizes] == [(1, 3, 9, 8), (2, 3, 5, 7)]
    with pytest.raises(ValueError, match=r"sizes\[0\]: \(1, 3, 9\) does not fit input 'x'"):
        verify_export(build(), files[0], sizes=[(1, 3, 9)])
    with pytest.raises(ValueError, match=r"unknown input\(s\) \['y'\]"):
        verify_export(build(), files[0], sizes=[{"y": (1, 3, 9, 9)}])
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module, got str"):
        verify_export("net", files[0])  # type: ignore[arg-type]

    class Picky(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[-1] % 2:
                raise ValueError("even widths only")
            return build()(x)  # type: ignore[no-any-return]

    report = verify_export(Picky().eval(), files[0], sizes=[(1, 3, 9, 9), (1, 3, 8, 8)])
    assert report.sizes[0].skipped is not None and "even widths only" in report.sizes[0].skipped
    assert "skipped" in str(report) and report.compared == 1


def test_a_static_file_fails_at_sizes_the_model_runs(tmp_path: Path) -> None:
    model = build()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(*EXPORT),), buf, input_names=["x"], dynamo=False)
    report = verify_export(model, buf.getvalue(), sizes=[EXPORT, (1, 3, 34, 30)])
    assert report.sizes[0].passed and not report.passed
    assert "onnxruntime fails where the torch model runs" in str(report.sizes[1].error)


def test_load_model(files: tuple[Path, Path, Path]) -> None:
    factory = files[2]
    model = load_model(f"{factory}:build")
    assert not model.training and isinstance(model[0], padkit.nn.Conv2d)
    assert type(load_model("torch.nn:Identity")).__name__ == "Identity"
    forms = r"accepted forms: 'path/to/file\.py:factory'.*'package\.module:factory'"
    for spec, why in [
        ("nets.py", "is not 'module:factory'"),
        (f"{factory}:", "is not 'module:factory'"),
        (str(factory.parent / "missing.py") + ":build", "no such file"),
        (f"{factory}:nope", "has no attribute 'nope'"),
        (f"{factory}:VALUE", "'VALUE' is a int, not a factory"),
        (f"{factory}:not_a_module", r"not_a_module\(\) returned a int, not a torch\.nn\.Module"),
        ("no_such_package_45:build", "cannot import 'no_such_package_45'"),
    ]:
        with pytest.raises(ValueError, match=why + ".*" + forms):
            load_model(spec)
    with pytest.raises(ValueError, match=r"broken\(\) raised RuntimeError: no weights here"):
        load_model(f"{factory}:broken")


def test_cli_against(files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    right, wrong, factory = files
    shape = ",".join(map(str, EXPORT))
    assert (
        main(["verify", str(right), "--against", f"{factory}:build", "--input-shape", shape]) == 0
    )
    out, err = capsys.readouterr()
    assert "PASS: 5 size(s)" in out and "building the model from --against" in err
    assert (
        main(["verify", str(wrong), "--against", f"{factory}:build", "-q", "--input-shape", shape])
        == 1
    )
    out, err = capsys.readouterr()
    assert "FAIL:" in out and "size x 2x3x34x30: MISMATCH" in out and not err
    argv = ["verify", str(wrong), "--against", f"{factory}:build", "-q", "--size", shape]
    assert main(argv) == 0  # at the export size alone the wrong file matches
    capsys.readouterr()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--against", "nets.py"],
            r"--against: 'nets\.py' is not 'module:factory'; accepted forms",
        ),
        (
            ["--against", "{factory}:nope"],
            r"--against: '.*nets\.py:nope': .* has no attribute 'nope'",
        ),
        (["--against", "missing.py:build"], r"--against: 'missing\.py:build': no such file"),
        (["--against", "{factory}:build", "--float64"], r"--float64 is for the importer check"),
        (["--size", "1,3,8,8"], r"--size needs --against"),
        (
            ["--against", "{factory}:build", "--input-shape", "x=1,3,8,8"],
            r"with --against, --input-shape is one unnamed shape",
        ),
    ],
)
def test_cli_against_usage_errors(
    files: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    right, _, factory = files
    argv = ["verify", str(right), *(e.replace("{factory}", str(factory)) for e in extra)]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("padkit verify: error: ")
    assert re.search(message, last), last


def test_cli_against_needs_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--against", "torch.nn:Identity"]) == 2
    assert "needs MODEL, the ONNX file" in capsys.readouterr().err


def test_inputs_keep_their_values_between_torch_and_onnxruntime(
    files: tuple[Path, Path, Path],
) -> None:
    """Both sides see the same arrays: an identity-like model gives differences of 0."""
    report = verify_export(build(), files[0], sizes=[(1, 3, 16, 16)], seed=3)
    (out,) = report.sizes[0].outputs
    assert out.max_abs_diff < 1e-5 and np.isfinite(out.max_abs_ref)
