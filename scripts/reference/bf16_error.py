#!/usr/bin/env python3
"""How far transformers itself lands from the float32 references in bf16.

The cuda backend multiplies with activations rounded to bf16, so `vlanode
eval --device cuda` is judged against the float32 references with a
tolerance as a fraction of the largest |logit| (cmd/vlanode/expect.go).
This script measures what that rounding costs an independent
implementation on the same cases: each Qwen3 and Qwen3-VL reference
checkpoint under testdata/reference, on each of its inputs, run by
transformers

  - under torch.autocast(bfloat16) (float32 weights and softmax, bf16
    matmul inputs: what the cuda backend does), and
  - with the model cast to bfloat16 (every activation bf16),

and prints max |logits - reference| as a fraction of max |reference| for
each. Run on the GPU machine:

  python3 scripts/reference/bf16_error.py [--root testdata/reference]
"""

from __future__ import annotations

import argparse
import glob
import inspect
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402,F401  (sets the offline environment before transformers is imported)
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import Qwen3ForCausalLM, Qwen3VLForConditionalGeneration  # noqa: E402


def fraction(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    diff = (got.float().cpu() - want).abs().max().item()
    return diff, diff / want.abs().max().item()


@torch.inference_mode()
def run(model, kw: dict, mode: str) -> torch.Tensor:
    if mode == "autocast":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return model(**kw).logits[0]
    return model(**kw).logits[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="testdata/reference")
    args = ap.parse_args()
    dev = torch.device("cuda")
    rows = []
    for case_dir in sorted(glob.glob(os.path.join(args.root, "qwen3*"))):
        case = os.path.basename(case_dir)
        vl = case.startswith("qwen3vl")
        cls = Qwen3VLForConditionalGeneration if vl else Qwen3ForCausalLM
        for inp in sorted(glob.glob(os.path.join(case_dir, "inputs*.safetensors"))):
            suffix = os.path.basename(inp)[len("inputs"):]
            want = load_file(os.path.join(case_dir, "expected" + suffix))["logits"].float()
            x = load_file(inp)
            for mode in ("autocast", "bf16"):
                model = cls.from_pretrained(case_dir, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
                if mode == "bf16":
                    model = model.to(torch.bfloat16)
                ids = x["input_ids"].to(dev)
                kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": False}
                if vl:
                    px = x["pixel_values"].to(dev)
                    kw["pixel_values"] = px.to(torch.bfloat16) if mode == "bf16" else px
                    kw["image_grid_thw"] = x["image_grid_thw"].to(dev)
                    takes = set(inspect.signature(model.forward).parameters) | set(inspect.signature(model.model.forward).parameters)
                    if "mm_token_type_ids" in x and "mm_token_type_ids" in takes:
                        kw["mm_token_type_ids"] = x["mm_token_type_ids"].to(dev)
                diff, frac = fraction(run(model, kw, mode), want)
                rows.append({"case": case, "inputs": os.path.basename(inp), "mode": mode,
                             "max_abs_ref": want.abs().max().item(), "max_abs_diff": diff, "fraction": frac})
                print(f"{case:18s} {os.path.basename(inp):30s} {mode:8s} max |ref| {rows[-1]['max_abs_ref']:7.3f}"
                      f"  max |diff| {diff:.4f} = {100 * frac:.2f}%", flush=True)
    print(json.dumps({"torch": torch.__version__, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
