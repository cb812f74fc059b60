#!/usr/bin/env python3
"""Reference outputs of the Qwen2-VL/Qwen3-VL image processor, from Hugging Face transformers.

Usage (on a machine with torch, torchvision, transformers and PIL; no network needed):

    python3 scripts/reference/vision_reference.py --out testdata/vision [--diag DIR] [--full]
    python3 scripts/reference/vision_reference.py --out testdata/vision --images-only   # stdlib only

It builds transformers' default (torchvision backend) Qwen2VLImageProcessor locally with
Alpamayo-R1's settings -- patch 16, temporal patch 2, merge 2, min_pixels 163840, max_pixels
196608, mean = std = 0.5, rescale 1/255, bicubic -- generates deterministic test images (integer
gradients, hard-edged checkers, a noise patch; no numpy needed), saves them as lossless PNG and
records for each image OUT/<case>.*:

    <case>.png                    the input, 8-bit RGB
    <case>.resized.png            transformers' resized uint8 image, recovered exactly from its
                                  pixel_values (the script checks the recovery bit for bit)
    <case>.expected.safetensors   image_grid_thw  int64   [1, 3]
                                  sample_rows     int64   [k]        row indices
                                  sample_values   float32 [k, 1536]  pixel_values[sample_rows]
                                  pixel_values    float32 [N, 1536]  only with --full
                                  metadata: sha256 of the whole pixel_values (float32 LE bytes),
                                  its shape, the resized size, versions
    smart_resize.safetensors      sizes int64 [n, 7]: h, w, factor, min_pixels, max_pixels, rh, rw
                                  from transformers' smart_resize (rh = rw = -1 where it raises)
    manifest.json                 every case with its checks and diagnostics (which resize ran,
                                  how far PIL's and the float32 resize are from it)

The whole pixel_values would be megabytes per image, so only its hash and a few rows are kept;
together with the resized image they pin every value. --diag DIR writes the source of the
functions that produced the numbers (processor, torchvision resize, normalize) for the record.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
import zlib
from typing import Any

GENERATOR = "vision_reference.py"

# Alpamayo-R1's processor settings (NVlabs/alpamayo helper.py: MIN_PIXELS, MAX_PIXELS on the
# Qwen3-VL processor, whose preprocessor_config gives patch 16, merge 2, mean/std 0.5).
PATCH_SIZE = 16
TEMPORAL_PATCH_SIZE = 2
MERGE_SIZE = 2
MIN_PIXELS = 163840
MAX_PIXELS = 196608
IMAGE_MEAN = [0.5, 0.5, 0.5]
IMAGE_STD = [0.5, 0.5, 0.5]
RESCALE_FACTOR = 1 / 255
BICUBIC = 3  # PILImageResampling.BICUBIC

# (name, width, height, what it exercises)
CASES = [
    ("grad-1920x1080", 1920, 1080, "Alpamayo camera frame: downscale 3.33x3.375 to 576x320"),
    ("grad-640x480", 640, 480, "downscale 1.25 to 512x384"),
    ("grad-512x384", 512, 384, "already a valid size: no resize"),
    ("grad-1001x777", 1001, 777, "odd size: downscale to 480x384"),
    ("grad-512x400", 512, 400, "vertical resize only; 400/32 = 12.5 rounds half to even"),
    ("grad-520x384", 520, 384, "horizontal resize only (520 -> 512)"),
    ("grad-320x240", 320, 240, "upscale to min_pixels: 480x352"),
]


# --------------------------------------------------------------------------
# test images (stdlib only, deterministic on every platform)
# --------------------------------------------------------------------------


def make_image(width: int, height: int, seed: int) -> bytearray:
    """RGB bytes, row-major: gradients, 8-pixel XOR blocks, a 0/255 checker of 3-pixel cells
    (overshoot and clamping in the bicubic resize) and a 64x64 xorshift noise patch."""
    buf = bytearray(3 * width * height)
    cx0, cx1 = width // 8, width // 8 + width // 6
    cy0, cy1 = height // 8, height // 8 + height // 5
    nx0, ny0 = (width * 5) // 8, (height * 3) // 5
    state = (seed * 2654435761 + 1) & 0xFFFFFFFF or 1
    wm, hm = max(width - 1, 1), max(height - 1, 1)
    for y in range(height):
        g = (y * 255) // hm
        row = 3 * width * y
        for x in range(width):
            i = row + 3 * x
            if cx0 <= x < cx1 and cy0 <= y < cy1:
                v = 255 if ((x - cx0) // 3 + (y - cy0) // 3) % 2 == 0 else 0
                buf[i] = buf[i + 1] = buf[i + 2] = v
            elif nx0 <= x < nx0 + 64 and ny0 <= y < ny0 + 64:
                state ^= (state << 13) & 0xFFFFFFFF
                state ^= state >> 17
                state ^= (state << 5) & 0xFFFFFFFF
                buf[i], buf[i + 1], buf[i + 2] = state & 255, (state >> 8) & 255, (state >> 16) & 255
            else:
                buf[i] = (x * 255) // wm
                buf[i + 1] = g
                buf[i + 2] = ((x >> 3) ^ (y >> 3)) & 255
    return buf


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png(path: str, width: int, height: int, rgb: bytes | bytearray) -> None:
    """An 8-bit RGB PNG; each row gets the None, Sub or Up filter, whichever is smallest."""
    stride = 3 * width
    raw = bytearray()
    prev = bytes(stride)
    for y in range(height):
        row = bytes(rgb[y * stride : (y + 1) * stride])
        sub = bytes((row[i] - (row[i - 3] if i >= 3 else 0)) & 255 for i in range(stride))
        up = bytes((row[i] - prev[i]) & 255 for i in range(stride))

        def cost(b: bytes) -> int:
            return sum(v if v < 128 else 256 - v for v in b)

        best = min(((0, row), (1, sub), (2, up)), key=lambda fb: cost(fb[1]))
        raw.append(best[0])
        raw += best[1]
        prev = row
    png = b"\x89PNG\r\n\x1a\n"
    png += _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    png += _png_chunk(b"IDAT", zlib.compress(bytes(raw), 9))
    png += _png_chunk(b"IEND", b"")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(png)
    os.replace(tmp, path)


def write_images(out_dir: str) -> dict[str, tuple[int, int, bytearray]]:
    images = {}
    for seed, (name, w, h, _) in enumerate(CASES, start=1):
        rgb = make_image(w, h, seed)
        write_png(os.path.join(out_dir, f"{name}.png"), w, h, rgb)
        images[name] = (w, h, rgb)
        print(f"image {name}: {w}x{h}, {os.path.getsize(os.path.join(out_dir, name + '.png'))} bytes", flush=True)
    return images


# --------------------------------------------------------------------------
# the reference (torch, torchvision, transformers, PIL)
# --------------------------------------------------------------------------


def smart_resize_sizes() -> list[tuple[int, int, int, int, int]]:
    """(h, w, factor, min_pixels, max_pixels) cases: the test images, half-way roundings,
    tiny and huge images, the aspect-ratio limit, other settings and seeded random sizes."""
    fixed = [(h, w) for _, w, h, _ in CASES] + [
        (48, 80), (80, 48), (16, 16), (10, 10), (1, 1), (1, 200), (1, 201), (300, 1), (31, 32),
        (720, 1280), (1200, 1920), (2160, 3840), (3000, 4000), (4096, 4096), (1080, 1440),
        (400, 400), (368, 560), (336, 528), (2, 16384),
    ]
    out = [(h, w, PATCH_SIZE * MERGE_SIZE, MIN_PIXELS, MAX_PIXELS) for h, w in fixed]
    out += [(h, w, 28, 56 * 56, 28 * 28 * 1280) for h, w in fixed[:12]]
    out += [(h, w, 32, 65536, 16777216) for h, w in fixed[:12]]
    state = 12345
    for _ in range(40):
        state = (1103515245 * state + 12345) & 0x7FFFFFFF
        h = 1 + state % 5000
        state = (1103515245 * state + 12345) & 0x7FFFFFFF
        w = 1 + state % 5000
        out.append((h, w, PATCH_SIZE * MERGE_SIZE, MIN_PIXELS, MAX_PIXELS))
    return out


def build_processors():
    """transformers' default (torchvision) Qwen2-VL image processor, and the PIL one if any."""
    import transformers

    kwargs = dict(
        do_resize=True,
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        min_pixels=MIN_PIXELS,
        max_pixels=MAX_PIXELS,
        resample=BICUBIC,
        do_rescale=True,
        rescale_factor=RESCALE_FACTOR,
        do_normalize=True,
        image_mean=list(IMAGE_MEAN),
        image_std=list(IMAGE_STD),
        do_convert_rgb=True,
        patch_size=PATCH_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
        merge_size=MERGE_SIZE,
    )
    fast = None
    for cls_name in ("Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast"):
        cls = getattr(transformers, cls_name, None)
        if cls is None:
            continue
        proc = cls(**dict(kwargs, size=dict(kwargs["size"])))
        backend = getattr(proc, "backend", None)
        if backend == "torchvision" or (backend is None and cls_name.endswith("Fast")):
            fast = proc
            break
    if fast is None:
        raise SystemExit("no torchvision-backend Qwen2-VL image processor in this transformers")
    slow = None
    cls = getattr(transformers, "Qwen2VLImageProcessorPil", None)
    if cls is None:
        try:
            from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as cls
        except ImportError:
            cls = None
    if cls is not None:
        slow = cls(**dict(kwargs, size=dict(kwargs["size"])))
    return fast, slow


def auto_mapping() -> dict[str, Any]:
    """Which image processor class AutoImageProcessor picks for qwen3_vl and qwen2_vl."""
    out: dict[str, Any] = {}
    try:
        from transformers.models.auto import image_processing_auto as ipa

        names = getattr(ipa, "IMAGE_PROCESSOR_MAPPING_NAMES", {})
        for key in ("qwen3_vl", "qwen2_vl"):
            v = names.get(key)
            out[key] = v if isinstance(v, (str, type(None))) else list(v) if isinstance(v, tuple) else str(v)
    except Exception as exc:  # noqa: BLE001 - diagnostic only
        out["error"] = repr(exc)
    return out


def write_sources(path: str, proc: Any) -> None:
    """The source of what produced the numbers, for the record."""
    import inspect

    from torchvision.transforms.v2 import functional as tvF

    parts = []
    targets = [
        ("processor._preprocess", type(proc)._preprocess),
        ("processor.resize", type(proc).resize),
    ]
    for name in ("_rescale_and_normalize", "rescale_and_normalize", "_fuse_mean_std_and_rescale_factor", "normalize"):
        fn = getattr(type(proc), name, None)
        if fn is not None:
            targets.append((f"processor.{name}", getattr(fn, "__wrapped__", fn)))
    mod = sys.modules[type(proc).__module__]
    if hasattr(mod, "smart_resize"):
        targets.append(("smart_resize", mod.smart_resize))
    tv_mod = sys.modules.get("torchvision.transforms.v2.functional._geometry")
    for name in ("resize_image", "_do_native_uint8_resize_on_cpu"):
        fn = getattr(tv_mod, name, None) if tv_mod else None
        if fn is not None:
            targets.append((f"torchvision.{name}", fn))
    tv_misc = sys.modules.get("torchvision.transforms.v2.functional._misc")
    if tv_misc is not None and hasattr(tv_misc, "normalize_image"):
        targets.append(("torchvision.normalize_image", tv_misc.normalize_image))
    _ = tvF
    for name, fn in targets:
        try:
            src = inspect.getsource(fn)
            where = inspect.getsourcefile(fn)
        except Exception as exc:  # noqa: BLE001 - diagnostic only
            src, where = f"<unavailable: {exc!r}>", "?"
        parts.append(f"### {name}  ({where})\n{src}\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


def recover_resized(pv, grid_h: int, grid_w: int):
    """Invert patchify and normalize: pixel_values [N, 3*T*P*P] -> uint8 [3, H, W], plus a flag
    that every temporal copy is identical and that re-normalizing gives pv back bit for bit."""
    import torch

    m, p, t = MERGE_SIZE, PATCH_SIZE, TEMPORAL_PATCH_SIZE
    x = pv.reshape(grid_h // m, grid_w // m, m, m, 3, t, p, p)
    same_t = all(torch.equal(x[:, :, :, :, :, 0], x[:, :, :, :, :, k]) for k in range(1, t))
    x = x[:, :, :, :, :, 0]  # bh, bw, mh, mw, C, py, px
    img = x.permute(4, 0, 2, 5, 1, 3, 6).reshape(3, grid_h * p, grid_w * p)
    u8 = torch.round(img.double() * 127.5 + 127.5).clamp(0, 255).to(torch.uint8)
    mean = torch.tensor(IMAGE_MEAN, dtype=torch.float32) * (1.0 / RESCALE_FACTOR)
    std = torch.tensor(IMAGE_STD, dtype=torch.float32) * (1.0 / RESCALE_FACTOR)
    back = (u8.float() - mean.view(3, 1, 1)) / std.view(3, 1, 1)
    exact = bool(torch.equal(back, img))
    return u8, same_t and exact


def compare_u8(a, b) -> dict[str, Any]:
    d = (a.int() - b.int()).abs()
    return {"exact_fraction": float((d == 0).double().mean()), "max_abs_diff": int(d.max())}


def diagnose(entry, fast, slow, arr, chw, pv, resized, rh, rw, h, w) -> None:
    """Checks that do not make the expected values but say what produced them: the same output
    from a PIL image and from a batch, and how far other resizes are from the one that ran.
    A failing check is recorded, never fatal."""
    import numpy as np
    import torch
    from PIL import Image
    from torchvision.transforms.v2 import functional as tvF

    try:
        # Same numbers from a PIL image, and from a batch of two same-size images (Alpamayo
        # sends 16 frames of one size, which the processor resizes as one stacked tensor).
        pv_pil = fast(images=[Image.fromarray(arr)], return_tensors="pt")["pixel_values"]
        pv_pil = pv_pil.reshape(-1, pv_pil.shape[-1])
        flipped = torch.flip(chw, dims=[2]).contiguous()
        pv_pair = fast(images=[chw, flipped], return_tensors="pt")["pixel_values"]
        pv_pair = pv_pair.reshape(-1, pv_pair.shape[-1])
        entry["pil_input_identical"] = bool(torch.equal(pv_pil, pv))
        entry["batch_of_two_identical"] = bool(torch.equal(pv_pair[: pv.shape[0]], pv))

        # Which resize ran: torchvision's on the uint8 tensor, bicubic, antialias=True.
        if (rh, rw) != (h, w):
            tv_u8 = tvF.resize(chw, [rh, rw], interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
            tv_f32 = tvF.resize(chw.float(), [rh, rw], interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
            tv_f32 = tv_f32.clamp(0, 255).round().to(torch.uint8)
            pil = torch.from_numpy(np.asarray(Image.fromarray(arr).resize((rw, rh), Image.BICUBIC)).copy()).permute(2, 0, 1)
            entry["vs_torchvision_uint8_resize"] = compare_u8(tv_u8, resized)
            entry["vs_torchvision_float32_resize"] = compare_u8(tv_f32, resized)
            entry["vs_pil_bicubic_resize"] = compare_u8(pil, resized)
            try:
                import cv2

                for label, flag in (("cubic", cv2.INTER_CUBIC), ("area", cv2.INTER_AREA)):
                    cv = torch.from_numpy(cv2.resize(arr, (rw, rh), interpolation=flag)).permute(2, 0, 1)
                    entry[f"vs_opencv_{label}_resize"] = compare_u8(cv, resized)
            except ImportError:
                pass
        else:
            entry["vs_input_no_resize"] = compare_u8(chw, resized)
        if slow is not None:
            pv_slow = slow(images=[Image.fromarray(arr)], return_tensors="pt")["pixel_values"]
            pv_slow = pv_slow.reshape(-1, pv_slow.shape[-1])
            d = (pv_slow.float() - pv).abs()
            entry["pil_backend_processor"] = {"max_abs_diff": float(d.max()), "exact_fraction": float((d == 0).double().mean())}

    except Exception as exc:  # noqa: BLE001 - diagnostic only
        entry["diagnostics_error"] = repr(exc)


def reference(args: argparse.Namespace) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common  # noqa: F401  (offline environment before transformers)
    import numpy as np
    import torch
    from PIL import Image
    from transformers.models.qwen2_vl import image_processing_qwen2_vl as ipq

    torch.manual_seed(0)
    out_dir = args.out
    fast, slow = build_processors()
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"processor {type(fast).__module__}.{type(fast).__name__} backend={getattr(fast, 'backend', '?')} "
          f"cpu_capability={capability}", flush=True)
    if args.diag:
        os.makedirs(args.diag, exist_ok=True)
        write_sources(os.path.join(args.diag, "sources.txt"), fast)

    images = write_images(out_dir)
    cases_out = []
    failed = 0
    for name, w, h, note in CASES:
        entry: dict[str, Any] = {"name": name, "width": w, "height": h, "note": note}
        try:
            _, _, rgb = images[name]
            arr = np.asarray(Image.open(os.path.join(out_dir, f"{name}.png")).convert("RGB"))
            want = np.frombuffer(bytes(rgb), dtype=np.uint8).reshape(h, w, 3)
            if not np.array_equal(arr, want):
                raise RuntimeError("PNG does not decode to the generated pixels")
            chw = torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous()  # uint8, as Alpamayo passes frames

            out = fast(images=[chw], return_tensors="pt")
            pv = out["pixel_values"]
            pv = pv.reshape(-1, pv.shape[-1]).contiguous()
            grid = out["image_grid_thw"].to(torch.int64)
            if pv.dtype != torch.float32:
                raise RuntimeError(f"pixel_values dtype {pv.dtype}")
            gt, gh, gw = (int(v) for v in grid[0])
            rh, rw = ipq.smart_resize(h, w, factor=PATCH_SIZE * MERGE_SIZE, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
            entry.update(grid_thw=[gt, gh, gw], resized=[rw, rh], rows=int(pv.shape[0]), row_size=int(pv.shape[1]))

            resized, recovered = recover_resized(pv, gh, gw)
            entry["recovered_exactly"] = recovered
            if not recovered:
                # Keep going so that the rows and the hash are still written, and keep the whole
                # tensor for a look; the Go test then reports the disagreement.
                failed += 1
                entry["error"] = "pixel_values are not (u8 - 127.5) / 127.5 of one uint8 image repeated in time"
                if args.diag:
                    common.save_tensors(os.path.join(args.diag, f"{name}.pixel_values.safetensors"), {"pixel_values": pv}, {})
            diagnose(entry, fast, slow, arr, chw, pv, resized, rh, rw, h, w)
            Image.fromarray(resized.permute(1, 2, 0).contiguous().numpy()).save(
                os.path.join(out_dir, f"{name}.resized.png"), optimize=True
            )
            n = pv.shape[0]
            rows = sorted({0, MERGE_SIZE * MERGE_SIZE - 1, (n * 5) // 11, n - 1})
            tensors = {
                "image_grid_thw": grid,
                "sample_rows": torch.tensor(rows, dtype=torch.int64),
                "sample_values": pv[rows].contiguous(),
            }
            if args.full:
                tensors["pixel_values"] = pv
            digest = hashlib.sha256(pv.numpy().astype("<f4").tobytes()).hexdigest()
            meta = {
                "case": name,
                "pixel_values_sha256": digest,
                "pixel_values_shape": list(pv.shape),
                "resized_width": rw,
                "resized_height": rh,
                "processor": f"{type(fast).__module__}.{type(fast).__name__}",
                "backend": str(getattr(fast, "backend", "?")),
                "cpu_capability": capability,
                **{f"version_{k}": v for k, v in common.versions().items()},
            }
            common.save_tensors(os.path.join(out_dir, f"{name}.expected.safetensors"), tensors, meta)
            entry["pixel_values_sha256"] = digest
            entry["sample_rows"] = rows
            print(f"case={name} grid={entry['grid_thw']} resized={rw}x{rh} "
                  + " ".join(f"{k}={v}" for k, v in entry.items() if k.startswith("vs_") or k.endswith("identical")), flush=True)
        except Exception as exc:  # noqa: BLE001 - record, go on with the other cases
            import traceback

            failed += 1
            entry["error"] = f"{exc!r}"
            traceback.print_exc()
        cases_out.append(entry)

    table = []
    for h, w, factor, lo, hi in smart_resize_sizes():
        try:
            rh, rw = ipq.smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)
        except ValueError:
            rh, rw = -1, -1
        table.append([h, w, factor, lo, hi, rh, rw])
    common.save_tensors(
        os.path.join(out_dir, "smart_resize.safetensors"),
        {"sizes": torch.tensor(table, dtype=torch.int64)},
        {"columns": "h,w,factor,min_pixels,max_pixels,rh,rw (-1: smart_resize raised)"},
    )
    manifest = {
        "generator": GENERATOR,
        "settings": {
            "patch_size": PATCH_SIZE, "temporal_patch_size": TEMPORAL_PATCH_SIZE, "merge_size": MERGE_SIZE,
            "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "image_mean": IMAGE_MEAN, "image_std": IMAGE_STD,
            "rescale_factor": RESCALE_FACTOR, "resample": "bicubic",
        },
        "processor": f"{type(fast).__module__}.{type(fast).__name__}",
        "backend": str(getattr(fast, "backend", "?")),
        "auto_image_processor": auto_mapping(),
        "cpu_capability": capability,
        "versions": common.versions(),
        "argv": sys.argv[1:],
        "cases": cases_out,
    }
    common.write_json(os.path.join(out_dir, "manifest.json"), manifest)
    print(f"done: {len(CASES) - failed} cases ok, {failed} failed", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder, e.g. testdata/vision")
    ap.add_argument("--diag", help="also write the source of the functions that ran into this folder")
    ap.add_argument("--full", action="store_true", help="also store the whole pixel_values (megabytes per image)")
    ap.add_argument("--images-only", action="store_true", help="only write the test PNGs (needs no torch)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.images_only:
        write_images(args.out)
        return 0
    return reference(args)


if __name__ == "__main__":
    sys.exit(main())
