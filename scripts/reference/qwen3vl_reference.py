#!/usr/bin/env python3
"""Reference outputs of tiny random-weight Qwen3-VL models, from Hugging Face transformers.

Usage (on a machine with torch + transformers; no network needed):

    python3 scripts/reference/qwen3vl_reference.py --out testdata/reference

For every model case it writes OUT/<case>/:
    config.json (model_type qwen3_vl), generation_config.json (if transformers writes one)
    model.safetensors                       bf16 weights (Qwen3VLForConditionalGeneration)
and for every input case of that model (suffix "" for the main one, "-<name>" for the others):
    inputs<suffix>.safetensors    input_ids          int64   [1, T]
                                  pixel_values       float32 [patches, 3*2*16*16]
                                  image_grid_thw     int64   [images, 3]
                                  mm_token_type_ids  int64   [1, T]
    expected<suffix>.safetensors  logits             float32 [T, vocab]   one forward, no cache
                                  position_ids       int64   [3, T]       get_rope_index
                                  rope_deltas        int64   [1]
                                  patch_embeds       float32 [patches, vision hidden]  the Conv3d patch embedding
                                  vision_input       float32 [patches, vision hidden]  patch embed + position embed
                                  text_input         float32 [T, text hidden]          embeddings with the visual tokens placed
                                  vision_blocks      float32 [depth, patches, vision hidden]  each block's output
                                  image_embeds       float32 [tokens, text hidden]      the patch merger's output
                                  deepstack_embeds   float32 [n, tokens, text hidden]   deepstack_merger_list[j] outputs
                                  text_layers        float32 [layers, T, text hidden]   each decoder layer's output
                                                                                          (before the DeepStack addition)
                                  greedy_ids         int64   [N]          argmax loop, a full forward per step
                                  step_logits        float32 [N, vocab]   the logits each greedy id was the argmax of
                                  step_gaps          float32 [N]
and OUT/manifest.json entries (merged with the other families'). See README.md beside this file.

The float32 reference is computed from the same bf16 weights that were saved
(reloaded from the checkpoint and upcast), with TF32 off and eager attention.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import os
import shutil
import sys
import time
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402  (sets the offline environment before transformers is imported)
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration  # noqa: E402

GENERATOR = "qwen3vl_reference.py"
TF_VERSION = common.parse_version(transformers.__version__)
MAX_POSITION_EMBEDDINGS = 1024
PATCH_SIZE = 16
TEMPORAL_PATCH_SIZE = 2
IN_CHANNELS = 3
MERGE = 2
VISION_THETA = 10000.0


@dataclasses.dataclass(frozen=True)
class InputCase:
    # "" writes inputs.safetensors / expected.safetensors, else inputs-<name>...
    name: str
    # (t, h, w) patch grid of every image, in prompt order
    grids: tuple[tuple[int, int, int], ...]
    # text tokens before the first image, between images, after the last (len(grids) + 1 entries)
    text_lens: tuple[int, ...]
    note: str = ""


@dataclasses.dataclass(frozen=True)
class VLCase:
    name: str
    # text decoder
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    rope_theta: float
    mrope_section: tuple[int, int, int]
    rms_norm_eps: float
    # vision tower
    depth: int
    vision_hidden: int
    vision_heads: int
    vision_intermediate: int
    num_position_embeddings: int
    deepstack: tuple[int, ...]
    inputs: tuple[InputCase, ...]
    seed: int = 0
    matrix_gain: float = 1.0
    note: str = ""

    # special tokens at the top of the vocabulary; text ids are drawn below them
    @property
    def vision_start_token_id(self) -> int:
        return self.vocab_size - 4

    @property
    def vision_end_token_id(self) -> int:
        return self.vocab_size - 3

    @property
    def image_token_id(self) -> int:
        return self.vocab_size - 2

    @property
    def video_token_id(self) -> int:
        return self.vocab_size - 1


CASES: list[VLCase] = [
    VLCase(
        name="qwen3vl-d3-tied",
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=320,
        tie_word_embeddings=True,
        rope_theta=1e6,
        mrope_section=(4, 2, 2),
        rms_norm_eps=1e-6,
        depth=3,
        vision_hidden=32,
        vision_heads=2,
        vision_intermediate=64,
        num_position_embeddings=64,
        deepstack=(0, 1),
        inputs=(
            InputCase("", ((1, 4, 6), (1, 6, 4), (1, 2, 2)), (5, 3, 4, 6), "three images of different grids"),
            InputCase("one-image", ((1, 4, 6),), (6, 7), "one image"),
        ),
        seed=4101,
        matrix_gain=1.5,
        note="vision depth 3 with deepstack [0, 1] (after text layers 0, 1 of 3); vision head_dim 16; "
        "text GQA 4/2, head_dim 16, mrope [4, 2, 2]; tied lm_head; 8x8 position table",
    ),
    VLCase(
        name="qwen3vl-d4-untied",
        hidden_size=96,
        num_hidden_layers=4,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=160,
        vocab_size=400,
        tie_word_embeddings=False,
        rope_theta=5e6,
        mrope_section=(6, 5, 5),
        rms_norm_eps=1e-5,
        depth=4,
        vision_hidden=48,
        vision_heads=4,
        vision_intermediate=96,
        num_position_embeddings=36,
        deepstack=(1, 2, 3),
        inputs=(
            InputCase("", ((1, 4, 6), (1, 8, 4), (1, 2, 2)), (4, 2, 5, 7), "three images; an 8-patch side over a 6x6 table"),
            InputCase("one-image", ((1, 6, 10),), (3, 5), "one 6x10 image"),
            InputCase("frames", ((2, 4, 4), (1, 2, 4)), (3, 4, 5), "a two-frame grid (t=2) then a one-frame image"),
        ),
        seed=4202,
        note="vision depth 4 with deepstack [1, 2, 3]; vision head_dim 12; text GQA 6/2, head_dim 32 "
        "(heads*head_dim 192 != hidden 96), mrope [6, 5, 5], eps 1e-5; untied lm_head; 6x6 position table",
    ),
]


# --------------------------------------------------------------------------
# building and saving
# --------------------------------------------------------------------------


def text_config_dict(case: VLCase) -> dict[str, Any]:
    return {
        "vocab_size": case.vocab_size,
        "hidden_size": case.hidden_size,
        "intermediate_size": case.intermediate_size,
        "num_hidden_layers": case.num_hidden_layers,
        "num_attention_heads": case.num_attention_heads,
        "num_key_value_heads": case.num_key_value_heads,
        "head_dim": case.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "rms_norm_eps": float(case.rms_norm_eps),
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": float(case.rope_theta),
            "mrope_section": list(case.mrope_section),
            "mrope_interleaved": True,
        },
    }


def vision_config_dict(case: VLCase) -> dict[str, Any]:
    return {
        "depth": case.depth,
        "hidden_size": case.vision_hidden,
        "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": case.vision_intermediate,
        "num_heads": case.vision_heads,
        "in_channels": IN_CHANNELS,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        "out_hidden_size": case.hidden_size,
        "num_position_embeddings": case.num_position_embeddings,
        "deepstack_visual_indexes": list(case.deepstack),
    }


def top_config_dict(case: VLCase) -> dict[str, Any]:
    return {
        "image_token_id": case.image_token_id,
        "video_token_id": case.video_token_id,
        "vision_start_token_id": case.vision_start_token_id,
        "vision_end_token_id": case.vision_end_token_id,
        "tie_word_embeddings": case.tie_word_embeddings,
    }


def build_config(case: VLCase) -> Qwen3VLConfig:
    text, vision, top = text_config_dict(case), vision_config_dict(case), top_config_dict(case)
    try:
        config = Qwen3VLConfig(text_config=text, vision_config=vision, **top)
    except Exception as exc:  # noqa: BLE001 - try sub-config objects before giving up
        print(f"  note: Qwen3VLConfig(text_config=dict, ...) failed ({exc!r}); trying sub-config objects")
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig, Qwen3VLVisionConfig

        config = Qwen3VLConfig(
            text_config=Qwen3VLTextConfig(**text), vision_config=Qwen3VLVisionConfig(**vision), **top
        )
    tc, vc = config.text_config, config.vision_config
    checks = [(tc, k, v) for k, v in text.items() if k != "rope_parameters"]
    checks += [(vc, k, v) for k, v in vision.items()]
    # tie_word_embeddings is checked on the built model (lm_head_tied), not on the config object
    checks += [(config, k, v) for k, v in top.items() if k != "tie_word_embeddings"]
    for obj, key, want in checks:
        got = getattr(obj, key, None)
        if isinstance(want, list) and got is not None:
            got = list(got)
        if got != want:
            raise RuntimeError(f"{case.name}: {type(obj).__name__}.{key} is {got!r}, asked for {want!r}")
    rp = getattr(tc, "rope_parameters", None) or getattr(tc, "rope_scaling", None) or {}
    if list(rp.get("mrope_section", [])) != list(case.mrope_section):
        raise RuntimeError(f"{case.name}: text rope parameters are {rp!r}, asked for mrope {case.mrope_section}")
    print(f"  config built: text rope {rp!r}; attn impl {getattr(config, '_attn_implementation', None)!r}")
    return config


def lm_head_tied(model: Qwen3VLForConditionalGeneration) -> bool:
    return model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def vision_kind(name: str, param: torch.Tensor) -> str:
    return common.default_param_kind(name, param)


def required_config(case: VLCase) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    text = text_config_dict(case)
    text.pop("attention_dropout")
    text.pop("rope_parameters")
    top = {"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"], **top_config_dict(case)}
    return top, text, vision_config_dict(case)


def ensure_nested_config(case_dir: str, case: VLCase) -> list[str]:
    """Spell every architecture key out in config.json (top level, text_config, vision_config).

    transformers may leave keys equal to a default out of config.json; a key that
    is present with another value is an error. Returns the keys added.
    """
    path = os.path.join(case_dir, "config.json")
    cfg = common.read_json(path)
    top, text, vision = required_config(case)
    added: list[str] = []

    def merge(d: dict[str, Any], want: dict[str, Any], where: str) -> None:
        for key, value in want.items():
            if key not in d:
                d[key] = value
                added.append(where + key)
            elif not common._same(d[key], value):  # noqa: SLF001 - the shared comparison
                raise RuntimeError(f"{path}: {where}{key} is {d[key]!r}, expected {value!r}")

    # tie_word_embeddings: spelled at the top level and, where transformers keeps a copy, in
    # text_config, both as asked; the reloaded model's lm_head is then checked to follow it.
    tie = top.pop("tie_word_embeddings")
    merge(cfg, top, "")
    for d, where in ((cfg, ""), (cfg.get("text_config"), "text_config.")):
        if isinstance(d, dict) and (where == "" or "tie_word_embeddings" in d) and d.get("tie_word_embeddings") is not tie:
            added.append(f"{where}tie_word_embeddings (was {d.get('tie_word_embeddings')!r})")
            d["tie_word_embeddings"] = tie
    for sub in ("text_config", "vision_config"):
        if not isinstance(cfg.get(sub), dict):
            cfg[sub] = {}
            added.append(sub)
    merge(cfg["text_config"], text, "text_config.")
    merge(cfg["vision_config"], vision, "vision_config.")
    tc = cfg["text_config"]
    rp = tc.get("rope_parameters") or tc.get("rope_scaling")
    if not isinstance(rp, dict):
        rp = {}
        tc["rope_parameters"] = rp
        added.append("text_config.rope_parameters")
    theta = rp.get("rope_theta", tc.get("rope_theta"))
    if theta is None:
        rp["rope_theta"] = float(case.rope_theta)
        added.append("text_config.rope_parameters.rope_theta")
    elif abs(float(theta) - case.rope_theta) > 1e-9 * case.rope_theta:
        raise RuntimeError(f"{path}: text rope theta {theta}, expected {case.rope_theta}")
    if "mrope_section" not in rp:
        rp["mrope_section"] = list(case.mrope_section)
        added.append("text_config.rope_parameters.mrope_section")
    elif list(rp["mrope_section"]) != list(case.mrope_section):
        raise RuntimeError(f"{path}: mrope_section {rp['mrope_section']}, expected {list(case.mrope_section)}")
    if rp.get("rope_type", rp.get("type", "default")) != "default":
        raise RuntimeError(f"{path}: text rope type {rp!r} is not default")
    if added:
        common.write_json(path, cfg)
    return added


def build_and_save(case: VLCase, case_dir: str) -> dict[str, Any]:
    """Build the random model, save it as bf16 into case_dir; describe the checkpoint."""
    torch.manual_seed(case.seed)
    config = build_config(case)
    model = Qwen3VLForConditionalGeneration(config)
    model.eval()

    tied = lm_head_tied(model)
    if case.tie_word_embeddings and not tied:
        model.tie_weights()
        tied = lm_head_tied(model)
    if tied != case.tie_word_embeddings:
        raise RuntimeError(f"{case.name}: lm_head tied={tied}, config says {case.tie_word_embeddings}")

    init_log = common.reinit_parameters(
        model,
        seed=case.seed,
        matrix_gain=case.matrix_gain,
        embed_std=1.0,
        norm_jitter=0.1,
        bias_std=0.1,
        kind_fn=vision_kind,
        std_overrides={"pos_embed": 0.5},
    )
    kinds = {e["name"]: e["kind"] for e in init_log}
    for name, p in model.named_parameters():
        if p.ndim == 1 and name.endswith("norm.weight") or name.endswith(("norm1.weight", "norm2.weight")):
            if kinds.get(name) != "norm":
                raise RuntimeError(f"{case.name}: {name} was initialised as {kinds.get(name)}, not as a norm")
    emb_names = [n for n in kinds if n.endswith("embed_tokens.weight")]
    if len(emb_names) != 1 or kinds[emb_names[0]] != "embedding":
        raise RuntimeError(f"{case.name}: embed_tokens not initialised as an embedding: {emb_names}")
    print(f"  {len(init_log)} parameters re-initialised; kinds: "
          f"{sorted({k: sum(1 for v in kinds.values() if v == k) for k in set(kinds.values())}.items())}")

    model = model.to(torch.bfloat16)
    if case.tie_word_embeddings and not lm_head_tied(model):
        raise RuntimeError(f"{case.name}: casting to bf16 untied lm_head")
    mem_state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    model.save_pretrained(case_dir)
    if not os.path.exists(os.path.join(case_dir, "config.json")):
        model.config.save_pretrained(case_dir)

    files, index = common.checkpoint_files(case_dir)
    if files != [common.SINGLE_WEIGHTS_NAME] or index is not None:
        raise RuntimeError(f"{case.name}: expected a single model.safetensors, got {files}")
    on_disk = common.load_checkpoint(case_dir)
    print(f"  saved {len(on_disk)} tensors; e.g. {sorted(on_disk)[:3]} ... {sorted(on_disk)[-3:]}")
    only_disk = sorted(set(on_disk) - set(mem_state))
    only_mem = sorted(set(mem_state) - set(on_disk))
    if only_disk:
        print(f"  WARNING: names on disk that are not state_dict names: {only_disk}")
        print(f"           state_dict names not on disk: {only_mem}")
    for name, t in on_disk.items():
        if t.dtype != torch.bfloat16:
            raise RuntimeError(f"{case.name}: {name} saved as {t.dtype}, not bfloat16")
        if name in mem_state and not torch.equal(t, mem_state[name]):
            raise RuntimeError(f"{case.name}: saved {name} differs from the model's")
    allowed_missing = {n for n in only_mem if n == "lm_head.weight" and case.tie_word_embeddings}
    if set(only_mem) - allowed_missing and not only_disk:
        raise RuntimeError(f"{case.name}: tensors not saved: {sorted(set(only_mem) - allowed_missing)}")

    added = ensure_nested_config(case_dir, case)
    print(f"  config.json keys added: {added}")
    print("  config.json: " + open(os.path.join(case_dir, "config.json"), encoding="utf-8").read().replace("\n", " "))
    weight_bytes = common.dir_bytes(case_dir, files)
    if weight_bytes > 2 << 20:
        print(f"  warning: {case.name} weights are {weight_bytes} bytes (> 2 MiB)")
    return {
        "files": files,
        "weight_bytes": weight_bytes,
        "lm_head_in_checkpoint": "lm_head.weight" in on_disk,
        "config_keys_added": added,
        "tensors": {k: {"dtype": "bfloat16", "shape": list(v.shape)} for k, v in sorted(on_disk.items())},
        "init": [{"name": e["name"], "kind": e["kind"], "std": e["std"]} for e in init_log],
    }


# --------------------------------------------------------------------------
# float32 reference model
# --------------------------------------------------------------------------


def visual_of(model: Qwen3VLForConditionalGeneration) -> torch.nn.Module:
    inner = getattr(model, "model", None)
    v = getattr(inner, "visual", None) if inner is not None else None
    return v if v is not None else model.visual


def language_of(model: Qwen3VLForConditionalGeneration) -> torch.nn.Module:
    inner = getattr(model, "model", None)
    lm = getattr(inner, "language_model", None) if inner is not None else None
    return lm if lm is not None else model.language_model


def check_rotary(case: VLCase, model: Qwen3VLForConditionalGeneration) -> list[str]:
    """The rotary frequency buffers must come from the config; fix and report them if not."""
    notes: list[str] = []
    rot = getattr(language_of(model), "rotary_emb", None)
    vrot = getattr(visual_of(model), "rotary_pos_emb", None)
    if rot is None or vrot is None:
        notes.append(f"rotary modules not found (text {type(rot)}, vision {type(vrot)}); frequencies unchecked")
        print(f"  WARNING: {case.name}: {notes[-1]}")
        return notes
    d = case.head_dim
    want = 1.0 / (case.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    got = rot.inv_freq.detach().float().cpu()
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-5, atol=0.0):
        notes.append(f"text inv_freq {got.tolist()} != {want.tolist()}; replaced")
        rot.inv_freq.copy_(want.to(rot.inv_freq.device))
    section = list(getattr(rot, "mrope_section", []))
    if section != list(case.mrope_section):
        notes.append(f"text rotary mrope_section {section} != {list(case.mrope_section)}")
    if abs(float(getattr(rot, "attention_scaling", 1.0)) - 1.0) > 0:
        notes.append(f"text rope attention_scaling {rot.attention_scaling}")

    vd = (case.vision_hidden // case.vision_heads) // 2
    vwant = 1.0 / (VISION_THETA ** (torch.arange(0, vd, 2, dtype=torch.float) / vd))
    vgot = vrot.inv_freq.detach().float().cpu()
    if vgot.shape != vwant.shape or not torch.allclose(vgot, vwant, rtol=1e-5, atol=0.0):
        notes.append(f"vision inv_freq {vgot.tolist()} != {vwant.tolist()}; replaced")
        vrot.inv_freq.copy_(vwant.to(vrot.inv_freq.device))
    for n in notes:
        print(f"  WARNING: {case.name}: {n}")
    return notes


def load_reference_model(case: VLCase, case_dir: str, device: torch.device) -> tuple[Any, list[str]]:
    """Reload the saved bf16 checkpoint as float32 with eager attention, and check it."""
    kw: dict[str, Any] = {"attn_implementation": "eager"}
    if TF_VERSION >= (4, 56):
        kw["dtype"] = torch.float32
    else:
        kw["torch_dtype"] = torch.float32
    model = Qwen3VLForConditionalGeneration.from_pretrained(case_dir, **kw)
    model = model.float().to(device)
    model.eval()
    impls = {
        "top": getattr(model.config, "_attn_implementation", None),
        "text": getattr(model.config.text_config, "_attn_implementation", None),
        "vision": getattr(model.config.vision_config, "_attn_implementation", None),
    }
    print(f"  attention implementations: {impls}")
    notes = [f"attention implementation {k}={v}" for k, v in impls.items() if v not in (None, "eager")]
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise RuntimeError(f"{case.name}: {name} is {p.dtype} after .float()")
    on_disk = common.load_checkpoint(case_dir)
    state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    unmatched = sorted(set(on_disk) - set(state))
    if unmatched:
        notes.append(f"checkpoint tensors without a state_dict entry of the same name: {unmatched}")
        print(f"  WARNING: {case.name}: {notes[-1]}")
    for name, t in on_disk.items():
        if name in state and not torch.equal(state[name], t.float()):
            raise RuntimeError(f"{case.name}: reloaded {name} differs from the checkpoint")
    if case.tie_word_embeddings != lm_head_tied(model):
        raise RuntimeError(f"{case.name}: reloaded lm_head tied={lm_head_tied(model)}, config {case.tie_word_embeddings}")
    notes += check_rotary(case, model)
    gc = getattr(model, "generation_config", None)
    if gc is not None:
        gc.eos_token_id = None
        gc.pad_token_id = None
    return model, notes


# --------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------


def merged_tokens(grid: tuple[int, int, int]) -> int:
    t, h, w = grid
    return t * h * w // (MERGE * MERGE)


def make_inputs(case: VLCase, inp: InputCase, seed: int) -> dict[str, torch.Tensor]:
    if len(inp.text_lens) != len(inp.grids) + 1:
        raise ValueError(f"{case.name}/{inp.name}: {len(inp.text_lens)} text runs for {len(inp.grids)} images")
    g = common.generator(seed)
    text_vocab = case.vision_start_token_id  # ids below the special tokens

    def text(n: int) -> list[int]:
        return torch.randint(0, text_vocab, (n,), generator=g, dtype=torch.int64).tolist()

    ids: list[int] = text(inp.text_lens[0])
    for grid, after in zip(inp.grids, inp.text_lens[1:]):
        ids += [case.vision_start_token_id] + [case.image_token_id] * merged_tokens(grid) + [case.vision_end_token_id]
        ids += text(after)
    patches = sum(t * h * w for t, h, w in inp.grids)
    patch_dim = IN_CHANNELS * TEMPORAL_PATCH_SIZE * PATCH_SIZE * PATCH_SIZE
    # pixel values do not change when the text is re-drawn: their own generator
    pixel_seed = case.seed * 7 + sum(map(ord, inp.name))
    pixels = torch.randn((patches, patch_dim), generator=common.generator(pixel_seed), dtype=torch.float32)
    input_ids = torch.tensor([ids], dtype=torch.int64)
    return {
        "input_ids": input_ids,
        "pixel_values": pixels,
        "image_grid_thw": torch.tensor([list(x) for x in inp.grids], dtype=torch.int64),
        "mm_token_type_ids": (input_ids == case.image_token_id).to(torch.int64),
    }


def own_rope_index(types: list[int], grids: list[tuple[int, int, int]]) -> tuple[list[list[int]], int]:
    """The layout vlanode implements (see models/qwen3vl/positions.go), for a diagnostic comparison."""
    pos: list[list[int]] = [[], [], []]
    cur, k, i = 0, 0, 0
    while i < len(types):
        if types[i] == 0:
            for a in range(3):
                pos[a].append(cur)
            cur += 1
            i += 1
            continue
        t, h, w = grids[k]
        k += 1
        for ti in range(t):
            for hi in range(h // MERGE):
                for wi in range(w // MERGE):
                    pos[0].append(cur + ti)
                    pos[1].append(cur + hi)
                    pos[2].append(cur + wi)
        i += t * h * w // (MERGE * MERGE)
        cur += max(h, w) // MERGE
    return pos, max(max(p) for p in pos) + 1 - len(types)


def params_of(fn: Any) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


# --------------------------------------------------------------------------
# running the model
# --------------------------------------------------------------------------


class Capture:
    """Forward hooks recording the vision tower's and the decoder layers' outputs."""

    def __init__(self, model: Any) -> None:
        self.visual = visual_of(model)
        self.layers = language_of(model).layers
        self.enabled = False
        self.data: dict[str, Any] = {}
        self.handles: list[Any] = []
        self.handles.append(self.visual.blocks[0].register_forward_pre_hook(self._pre("vision_input"), with_kwargs=True))
        self.handles.append(self.layers[0].register_forward_pre_hook(self._pre("text_input"), with_kwargs=True))
        self.handles.append(self.visual.patch_embed.register_forward_hook(self._store(("patch_embeds", 0))))
        for i, blk in enumerate(self.visual.blocks):
            self.handles.append(blk.register_forward_hook(self._store(("vision_blocks", i))))
        self.handles.append(self.visual.merger.register_forward_hook(self._store(("image_embeds", 0))))
        for j, m in enumerate(self.visual.deepstack_merger_list):
            self.handles.append(m.register_forward_hook(self._store(("deepstack_embeds", j))))
        for i, layer in enumerate(self.layers):
            self.handles.append(layer.register_forward_hook(self._store(("text_layers", i))))

    @staticmethod
    def _first_tensor(out: Any) -> torch.Tensor:
        if isinstance(out, torch.Tensor):
            return out
        if isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, torch.Tensor):
                    return o
        for attr in ("last_hidden_state", "hidden_states"):
            t = getattr(out, attr, None)
            if isinstance(t, torch.Tensor):
                return t
        raise RuntimeError(f"cannot find a tensor in a hook output of type {type(out)}")

    def _pre(self, key: str):
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            if self.enabled:
                x = args[0] if args else kwargs["hidden_states"]
                x = x.detach().float().cpu().clone()
                self.data[key] = x[0] if x.dim() == 3 else x

        return hook

    def _store(self, key: tuple[str, int]):
        def hook(module: Any, args: Any, out: Any) -> None:
            if self.enabled:
                t = self._first_tensor(out).detach().float().cpu().clone()
                if t.dim() == 3:
                    t = t[0]
                self.data.setdefault(key[0], {})[key[1]] = t

        return hook

    def stacked(self, key: str, n: int) -> torch.Tensor:
        parts = self.data.get(key, {})
        if sorted(parts) != list(range(n)):
            raise RuntimeError(f"hook {key} captured {sorted(parts)}, expected 0..{n - 1}")
        return torch.stack([parts[i] for i in range(n)])

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def forward_kwargs(model: Any, inputs: dict[str, torch.Tensor], device: torch.device) -> dict[str, Any]:
    ids = inputs["input_ids"].to(device)
    kw: dict[str, Any] = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": inputs["pixel_values"].to(device),
        "image_grid_thw": inputs["image_grid_thw"].to(device),
        "use_cache": False,
    }
    if "mm_token_type_ids" in params_of(model.forward) | params_of(model.model.forward):
        kw["mm_token_type_ids"] = inputs["mm_token_type_ids"].to(device)
    return kw


@torch.inference_mode()
def full_logits(model: Any, inputs: dict[str, torch.Tensor], device: torch.device, **extra: Any) -> torch.Tensor:
    out = model(**forward_kwargs(model, inputs, device), **extra)
    logits = out.logits
    t = inputs["input_ids"].shape[1]
    if logits.dim() != 3 or logits.shape[1] != t:
        raise RuntimeError(f"logits have shape {tuple(logits.shape)} for {t} tokens")
    return logits[0].float().cpu()


@torch.inference_mode()
def rope_index(model: Any, inputs: dict[str, torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    fn = model.model.get_rope_index
    p = params_of(fn)
    ids = inputs["input_ids"].to(device)
    kw: dict[str, Any] = {}
    for name, value in (
        ("input_ids", ids),
        ("mm_token_type_ids", inputs["mm_token_type_ids"].to(device)),
        ("image_grid_thw", inputs["image_grid_thw"].to(device)),
        ("attention_mask", torch.ones_like(ids)),
    ):
        if name in p:
            kw[name] = value
    pos, deltas = fn(**kw)
    return pos[:, 0, :].cpu().to(torch.int64), deltas.reshape(-1).cpu().to(torch.int64)


def append_token(inputs: dict[str, torch.Tensor], tok: int) -> dict[str, torch.Tensor]:
    out = dict(inputs)
    out["input_ids"] = torch.cat([inputs["input_ids"], torch.tensor([[tok]], dtype=torch.int64)], dim=1)
    out["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros((1, 1), dtype=torch.int64)], dim=1)
    return out


def greedy_no_cache(model: Any, inputs: dict[str, torch.Tensor], device: torch.device, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq = inputs
    picked: list[int] = []
    rows: list[torch.Tensor] = []
    for _ in range(n):
        last = full_logits(model, seq, device)[-1]
        nxt = int(torch.argmax(last).item())
        picked.append(nxt)
        rows.append(last)
        seq = append_token(seq, nxt)
    return torch.tensor(picked, dtype=torch.int64), torch.stack(rows)


@torch.inference_mode()
def try_generate(model: Any, inputs: dict[str, torch.Tensor], device: torch.device, n: int) -> tuple[list[int] | None, torch.Tensor | None, str]:
    """generate() with the KV cache; returns ids, step logits and a note (it must not sink the case)."""
    try:
        kw = forward_kwargs(model, inputs, device)
        kw.pop("use_cache")
        out = model.generate(
            **kw,
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            num_beams=1,
            use_cache=True,
            eos_token_id=None,
            pad_token_id=None,
            return_dict_in_generate=True,
            output_logits=True,
        )
        t = inputs["input_ids"].shape[1]
        ids = out.sequences[0, t:].cpu().tolist()
        logits = None
        if getattr(out, "logits", None) is not None and len(out.logits) == n:
            logits = torch.stack([s[0].float() for s in out.logits]).cpu()
        return ids, logits, "ok"
    except Exception as exc:  # noqa: BLE001 - a diagnostic only
        return None, None, f"generate failed: {exc!r}"


def run_input(case: VLCase, inp: InputCase, model: Any, device: torch.device, case_dir: str, args: argparse.Namespace) -> dict[str, Any]:
    suffix = f"-{inp.name}" if inp.name else ""
    label = f"{case.name}{suffix or ''}"
    n = args.new_tokens
    chosen = None
    tried: list[dict[str, Any]] = []
    for attempt in range(args.max_rerolls + 1):
        input_seed = case.seed * 1000 + 100 * (len(inp.name) + 1) + attempt
        inputs = make_inputs(case, inp, input_seed)
        greedy_ids, step_logits = greedy_no_cache(model, inputs, device, n)
        gaps = [common.top2_gap(row) for row in step_logits]
        tried.append({"input_seed": input_seed, "min_gap": min(gaps)})
        if min(gaps) >= args.min_gap:
            chosen = (attempt, input_seed, inputs, greedy_ids, step_logits, gaps)
            break
        print(f"  {label}: input seed {input_seed} has a near tie (min gap {min(gaps):.4g}); re-rolling the text")
    if chosen is None:
        raise RuntimeError(f"{label}: every input had a near tie: {tried}")
    attempt, input_seed, inputs, greedy_ids, step_logits, gaps = chosen
    t = int(inputs["input_ids"].shape[1])

    cap = Capture(model)
    cap.enabled = True
    try:
        logits = full_logits(model, inputs, device)
    finally:
        cap.enabled = False
        cap.remove()
    vis = {
        "patch_embeds": cap.stacked("patch_embeds", 1)[0],
        "vision_input": cap.data["vision_input"],
        "text_input": cap.data["text_input"],
        "vision_blocks": cap.stacked("vision_blocks", case.depth),
        "image_embeds": cap.stacked("image_embeds", 1)[0],
        "deepstack_embeds": cap.stacked("deepstack_embeds", len(case.deepstack)),
        "text_layers": cap.stacked("text_layers", case.num_hidden_layers),
    }
    patches = int(inputs["pixel_values"].shape[0])
    tokens = sum(merged_tokens(g) for g in inp.grids)
    shapes = {
        "patch_embeds": (patches, case.vision_hidden),
        "vision_input": (patches, case.vision_hidden),
        "text_input": (t, case.hidden_size),
        "vision_blocks": (case.depth, patches, case.vision_hidden),
        "image_embeds": (tokens, case.hidden_size),
        "deepstack_embeds": (len(case.deepstack), tokens, case.hidden_size),
        "text_layers": (case.num_hidden_layers, t, case.hidden_size),
    }
    for k, want in shapes.items():
        if tuple(vis[k].shape) != want:
            raise RuntimeError(f"{label}: captured {k} has shape {tuple(vis[k].shape)}, expected {want}")

    if not torch.allclose(step_logits[0], logits[-1], rtol=0.0, atol=1e-5):
        raise RuntimeError(f"{label}: prompt forward and first greedy step disagree")

    pos, deltas = rope_index(model, inputs, device)
    types = inputs["mm_token_type_ids"][0].tolist()
    own_pos, own_delta = own_rope_index(types, list(inp.grids))
    pos_match = pos.tolist() == own_pos and int(deltas[0]) == own_delta
    print(f"  {label}: rope_deltas {deltas.tolist()}; vlanode's layout {'matches' if pos_match else 'DIFFERS'}")
    if not pos_match:
        print(f"    transformers t {pos[0].tolist()}\n    own          t {own_pos[0]}")
        print(f"    transformers h {pos[1].tolist()}\n    own          h {own_pos[1]}")
        print(f"    transformers w {pos[2].tolist()}\n    own          w {own_pos[2]}")
    explicit = full_logits(model, inputs, device, position_ids=pos.unsqueeze(1).to(device))
    explicit_diff = float((explicit - logits).abs().max())
    print(f"  {label}: logits with explicit position_ids differ by {explicit_diff:.3g}")

    gen_ids, gen_logits, gen_note = try_generate(model, inputs, device, n)
    cache_diff = None
    if gen_ids is not None and gen_ids != greedy_ids.tolist():
        gen_note = f"generate gave {gen_ids}, the no-cache loop {greedy_ids.tolist()}"
        print(f"  WARNING: {label}: {gen_note}")
    if gen_logits is not None:
        cache_diff = float((gen_logits - step_logits).abs().max())
    print(f"  {label}: generate: {gen_note}; cached vs uncached step logits {cache_diff}")

    meta: dict[str, Any] = {
        "format": common.FORMAT,
        "family": "qwen3_vl",
        "case": case.name,
        "input_case": inp.name or "main",
        "T": t,
        "N": n,
        "grids": [list(g) for g in inp.grids],
        "min_gap": min(gaps),
        "input_seed": input_seed,
        "weight_seed": case.seed,
        "weights_dtype": "bfloat16",
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "device": str(device),
        "precision": args.precision_state,
        "torch_version": common.versions()["torch"],
        "transformers_version": transformers.__version__,
        "logits_abs_max": float(logits.abs().max()),
        "explicit_position_ids_max_abs_diff": explicit_diff,
        "generate": gen_note,
        "cache_vs_nocache_max_abs_diff": "null" if cache_diff is None else cache_diff,
        "rope_index_matches_vlanode_layout": pos_match,
    }
    common.save_tensors(os.path.join(case_dir, f"inputs{suffix}.safetensors"), inputs, {k: meta[k] for k in ("format", "case", "input_case", "T", "grids", "input_seed")})
    expected = {
        "logits": logits.contiguous(),
        "position_ids": pos.contiguous(),
        "rope_deltas": deltas.contiguous(),
        **{k: v.contiguous() for k, v in vis.items()},
        "greedy_ids": greedy_ids,
        "step_logits": step_logits.contiguous(),
        "step_gaps": torch.tensor(gaps, dtype=torch.float32),
    }
    common.save_tensors(os.path.join(case_dir, f"expected{suffix}.safetensors"), expected, meta)
    print(
        f"case={label} T={t} images={len(inp.grids)} tokens={tokens} patches={patches} N={n} "
        f"min_gap={min(gaps):.4f} logits_absmax={float(logits.abs().max()):.3f} greedy={greedy_ids.tolist()}",
        flush=True,
    )
    return {
        "name": inp.name or "main",
        "inputs": f"inputs{suffix}.safetensors",
        "expected": f"expected{suffix}.safetensors",
        "note": inp.note,
        "grids": [list(g) for g in inp.grids],
        "T": t,
        "input_ids": inputs["input_ids"][0].tolist(),
        "position_ids": pos.tolist(),
        "rope_deltas": deltas.tolist(),
        "greedy_ids": greedy_ids.tolist(),
        "step_gaps": gaps,
        "attempts": attempt + 1,
        "logits_abs_max": float(logits.abs().max()),
        "explicit_position_ids_max_abs_diff": explicit_diff,
        "generate": gen_note,
        "cache_vs_nocache_max_abs_diff": cache_diff,
        "rope_index_matches_vlanode_layout": pos_match,
    }


def run_case(case: VLCase, out_dir: str, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """Write OUT/<case>/ whole or not at all: built in a hidden sibling dir, then renamed."""
    final_dir = os.path.join(out_dir, case.name)
    work_dir = os.path.join(out_dir, f".{case.name}.partial")
    if os.path.isdir(work_dir):
        shutil.rmtree(work_dir)
    os.makedirs(work_dir)
    try:
        ckpt = build_and_save(case, work_dir)
        model, notes = load_reference_model(case, work_dir, device)
        inputs, failed = [], []
        for inp in case.inputs:
            try:
                inputs.append(run_input(case, inp, model, device, work_dir, args))
            except Exception:  # noqa: BLE001 - the other input cases still count
                traceback.print_exc()
                print(f"case={case.name} input={inp.name or 'main'} FAILED", flush=True)
                failed.append(inp.name or "main")
        if "main" in failed or not inputs:
            raise RuntimeError(f"{case.name}: the main input case failed")
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    if os.path.isdir(final_dir):
        shutil.rmtree(final_dir)
    os.replace(work_dir, final_dir)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "name": case.name,
        "family": "qwen3_vl",
        "architecture": "Qwen3VLForConditionalGeneration",
        "dir": case.name,
        "note": case.note,
        "spec": dataclasses.asdict(case),
        "config": common.read_json(os.path.join(final_dir, "config.json")),
        "checkpoint": ckpt,
        "inputs": inputs,
        "failed_inputs": failed,
        "warnings": notes,
        "weights_dtype": "bfloat16",
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "device": str(device),
        "precision": args.precision_state,
        "versions": common.versions(),
    }


def default_out_dir() -> str:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(repo, "testdata", "reference")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=default_out_dir(), help="output directory (default: <repo>/testdata/reference)")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cuda, cuda:N or cpu")
    ap.add_argument("--new-tokens", type=int, default=4, help="greedy tokens to generate (N)")
    ap.add_argument("--min-gap", type=float, default=0.02, help="least top-1/top-2 logit gap of every greedy step")
    ap.add_argument("--max-rerolls", type=int, default=20, help="new text draws to try when a step is a near tie")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES:
            print(f"{c.name}: {c.note}")
            for i in c.inputs:
                print(f"  {i.name or 'main'}: grids {list(i.grids)}: {i.note}")
        return 0
    if args.new_tokens < 1:
        ap.error("--new-tokens must be at least 1")
    selected = CASES
    if args.cases:
        wanted = [s.strip() for s in args.cases.split(",") if s.strip()]
        unknown = sorted(set(wanted) - {c.name for c in CASES})
        if unknown:
            ap.error(f"unknown case(s) {unknown}; known: {[c.name for c in CASES]}")
        selected = [c for c in CASES if c.name in wanted]

    args.precision_state = common.set_strict_fp32()
    device = common.pick_device(args.device)
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    v = common.versions()
    print(f"{GENERATOR}: torch {v['torch']} transformers {v['transformers']} device {device} "
          f"precision {args.precision_state} -> {out_dir}", flush=True)
    print(f"  Qwen3VLForConditionalGeneration.forward params: {sorted(params_of(Qwen3VLForConditionalGeneration.forward))}")
    start = time.time()
    entries: list[dict[str, Any]] = []
    failed: list[str] = []
    for case in selected:
        try:
            entries.append(run_case(case, out_dir, device, args))
        except Exception:  # noqa: BLE001 - report, go on with the other cases, fail at the end
            traceback.print_exc()
            print(f"case={case.name} FAILED (its previous output, if any, is left as it was)", flush=True)
            failed.append(case.name)
    if entries:
        path = common.update_manifest(out_dir, entries, GENERATOR)
        print(f"wrote {len(entries)} case(s) and {path} in {time.time() - start:.1f}s")
    partial = [f"{e['name']}:{i}" for e in entries for i in e["failed_inputs"]]
    if failed or partial:
        print(f"FAILED: {', '.join(failed + partial)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
