"""padkit in one page: the conventions that silently disagree, reproduced exactly.

Run: python examples/quickstart.py   (exits 1 if any check fails)
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import padkit
import padkit.nn as pnn


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return ok


def main() -> int:
    torch.manual_seed(0)
    results = []

    # 1. TF/Keras 'same' at stride 2 (EfficientNet stem): pads depend on the input size.
    conv = pnn.Conv2d(3, 8, 3, stride=2, padding="same")
    for size in (224, 225):
        x = torch.randn(1, 3, size, size)
        (top, bottom), (left, right) = conv.resolved_padding(x.shape)
        ref = F.conv2d(F.pad(x, (left, right, top, bottom)), conv.weight, conv.bias, 2)
        err = (conv(x) - ref).abs().max().item()
        results.append(
            check(f"TF 'same' 3x3/2 on {size}", err < 1e-5, f"pads {(top, bottom)}, err {err:.1e}")
        )

    # 2. The odd pixel: TF/ONNX SAME_UPPER at the end, SAME_LOWER and Flux at the start.
    x = torch.arange(1.0, 6.0).view(1, 1, 5)
    w = torch.ones(1, 1, 2)
    upper = padkit.functional.conv1d(x, w, padding="same").flatten().tolist()
    lower = padkit.functional.conv1d(x, w, padding="same_lower").flatten().tolist()
    results.append(check("even kernel, SAME_UPPER", upper == [3, 5, 7, 9, 5], str(upper)))
    results.append(check("even kernel, SAME_LOWER", lower == [1, 3, 5, 7, 9], str(lower)))

    # 3. Caffe ceil pooling as exported to ONNX (GoogLeNet pool1): 112 -> 56, pads (0, 1).
    caffe = padkit.Padding.from_caffe(0)
    pads = caffe.resolve(kernel_size=3, stride=2, input_size=(112, 112))
    pool = pnn.MaxPool2d(3, 2, padding=caffe)
    shape = tuple(pool(torch.randn(1, 4, 112, 112)).shape[-2:])
    results.append(check("Caffe pool1 112x112", shape == (56, 56), f"{shape}, ONNX pads {pads}"))

    # 4. tiny-YOLOv2's last pool: k=2, s=1, pads [0,0,1,1] keeps 13x13.
    yolo = pnn.MaxPool2d(2, 1, padding=padkit.Padding.from_onnx(pads=[0, 0, 1, 1]))
    shape = tuple(yolo(torch.randn(1, 125, 13, 13)).shape[-2:])
    results.append(check("tiny-YOLOv2 final pool", shape == (13, 13), str(shape)))

    # 5. TF SAME average pooling excludes the pad (timm's AvgPool2dSame does not).
    avg = pnn.AvgPool1d(3, 2, padding="same", count_include_pad=False)
    last = avg(torch.arange(1.0, 9.0).view(1, 1, 8))[0, 0, -1].item()
    results.append(check("TF SAME avg pool, last", last == 7.5, f"{last} (pad counted: 5.0)"))

    # 6. Causal, dilated: the output never sees the future.
    tcn = pnn.Conv1d(1, 1, 3, dilation=4, padding="causal")
    x = torch.randn(1, 1, 32)
    y = tcn(x)
    x2 = x.clone()
    x2[..., 20:] += 1.0
    same_past = torch.equal(tcn(x2)[..., :20], y[..., :20])
    results.append(check("causal conv ignores the future", same_past, "pads (8, 0)"))

    # 7. Drop-in: torch weights load unchanged.
    ref = torch.nn.Conv2d(3, 8, 3, stride=2)
    conv.load_state_dict(ref.state_dict())
    results.append(check("loads torch.nn.Conv2d weights", True, f"keys {list(conv.state_dict())}"))

    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
