#!/usr/bin/env python3
"""Reference outputs of tiny random-weight Alpamayo-R1 action experts.

Usage (on a machine with torch + transformers; no network needed):

    python3 scripts/reference/alpamayo_expert_reference.py --out testdata/reference

What it checks. Alpamayo-R1 (NVlabs/alpamayo, models/alpamayo_r1.py) runs an
"expert": transformers' Qwen3VLTextModel built from the VLM's text config with
the keys of expert_cfg set over it, embed_tokens deleted. At every Euler step
of flow matching it embeds the noisy actions and the time with action_in_proj,
runs the expert over them with the VLM's KV cache as past_key_values, a 4D
float mask that hides cache rows [offset, L), and position_ids [3, b, 64]
whose three rows are rope_deltas + offset + i; then the final hidden states go
through action_out_proj. This script does exactly that with transformers'
Qwen3VLTextModel and a random VLM cache, with action_in_proj and
action_out_proj written here in torch after the NVlabs source, and records
everything in float32 (eager attention, IEEE fp32 matmuls). A second,
independent plain-torch implementation of the expert (plain 1-D RoPE) must
agree with transformers, which also confirms that M-RoPE with equal rows is
plain RoPE. The action space (v0 fit, unicycle integration, history tokens)
is computed here in torch on the CPU, after the source's formulas.

For every case it writes OUT/<case>/:
    config.json           an Alpamayo-R1-like config (expert_cfg, action_*_cfg, diffusion_cfg, ...)
    vlm_config.json       the tiny VLM config the expert's text config comes from ({"text_config": ...})
    model.safetensors     bf16: expert.*, action_in_proj.*, action_out_proj.*, action_space.*
    inputs.safetensors    kv_k, kv_v f32 [layers, L, kv_heads*head_dim]; noise f32 [64, 2];
                          prefix i64 [3] (L, offset, rope_delta); history_xyz f32 [16, 3];
                          history_rot f32 [16, 9]
    expected.safetensors  time_steps f32 [steps+1]; x_steps, v_steps f32 [steps, 64, 2] (Euler
                          states and velocities); hidden_steps, inproj_steps f32 [steps, 64, hidden];
                          new_k, new_v f32 [layers, 64, kv] (expert K/V of step 0, cache rows
                          [L, L+64)); actions f32 [64, 2]; history_speeds f32 [16]; traj_xyz
                          f32 [64, 3]; traj_rot f32 [64, 9]; history_tokens i64 [48]
    reference.json        case spec, versions, measured agreement of the two expert implementations

--manual-only skips transformers (the plain-torch expert becomes the expected
output): a smoke test of the script on a machine without transformers. Its
output must not be committed.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
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
from torch import nn  # noqa: E402

GENERATOR = "alpamayo_expert_reference.py"
WAYPOINTS = 64
ACTION_DIMS = 2
HISTORY = 16
DT = 0.1

# The release's action-space normalisation (ALPAMAYO.md §1, X4 copies).
ACCEL_MEAN = 0.02902694707164455
ACCEL_STD = 0.6810426736454882
CURV_MEAN = 0.0002692167976330542
CURV_STD = 0.026148280660833106
HIST_MIN = (-4.0, -4.0, -10.0)
HIST_MAX = (4.0, 4.0, 10.0)
HIST_BINS = 1000


@dataclasses.dataclass(frozen=True)
class ExpertCase:
    name: str
    # the VLM's text config (the expert inherits what expert_cfg leaves out)
    vlm_hidden: int
    vlm_intermediate: int
    layers: int
    vlm_heads: int
    kv_heads: int
    head_dim: int
    rope_theta: float
    mrope_section: tuple[int, int, int]
    rms_norm_eps: float
    # expert_cfg: set over the text config
    expert_cfg: tuple[tuple[str, int], ...]
    # action_in_proj_cfg
    enc_layers: int
    enc_hidden: int
    fourier_feats: int
    max_freq: float
    # the VLM prefix
    L: int
    offset: int
    rope_delta: int
    steps: int = 10
    seed: int = 0
    note: str = ""

    def expert_overrides(self) -> dict[str, int]:
        return dict(self.expert_cfg)


CASES: list[ExpertCase] = [
    ExpertCase(
        name="alpamayo-expert",
        vlm_hidden=96,
        vlm_intermediate=160,
        layers=3,
        vlm_heads=6,
        kv_heads=2,
        head_dim=16,
        rope_theta=5e6,
        mrope_section=(4, 2, 2),
        rms_norm_eps=1e-6,
        expert_cfg=(("hidden_size", 64), ("intermediate_size", 96), ("num_attention_heads", 4), ("head_dim", 16)),
        enc_layers=2,
        enc_hidden=48,
        fourier_feats=20,
        max_freq=100.0,
        L=40,
        offset=29,
        rope_delta=-13,
        seed=4242,
        note="release-like: GQA 2 (4 query heads, 2 kv heads), expert hidden 64 != VLM hidden 96, "
        "2 encoder layers, 10 Fourier frequencies up to 100; cache rows [29, 40) hidden; rope_deltas -13",
    ),
    ExpertCase(
        name="alpamayo-expert-mha",
        vlm_hidden=80,
        vlm_intermediate=120,
        layers=2,
        vlm_heads=4,
        kv_heads=4,
        head_dim=8,
        rope_theta=1e6,
        mrope_section=(2, 1, 1),
        rms_norm_eps=1e-5,
        expert_cfg=(("hidden_size", 48), ("intermediate_size", 72)),
        enc_layers=3,
        enc_hidden=40,
        fourier_feats=16,
        max_freq=50.0,
        L=23,
        offset=24,
        rope_delta=5,
        seed=5353,
        note="multi-head attention with heads and head_dim inherited from the VLM, rms_norm_eps 1e-5, "
        "3 encoder layers, 8 Fourier frequencies up to 50; offset = L+1 (no <|traj_future_start|>: nothing hidden)",
    ),
]


# --------------------------------------------------------------------------
# action_in_proj / action_out_proj, after NVlabs/alpamayo models/action_in_proj.py
# --------------------------------------------------------------------------


class TrunkRMSNorm(nn.Module):
    """RMSNorm of action_in_proj's MLP: normalise in fp32, cast back, then scale."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


class Fourier(nn.Module):
    """[sin, cos](x·f·2·π)·√2 over logspace frequencies (a persistent buffer)."""

    def __init__(self, dim: int, max_freq: float):
        super().__init__()
        half = dim // 2
        self.out_dim = dim
        self.register_buffer("freqs", torch.logspace(0, math.log10(max_freq), steps=half)[None, :])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        arg = x[..., None] * self.freqs * 2 * torch.pi
        return torch.cat([torch.sin(arg), torch.cos(arg)], -1) * math.sqrt(2)


def make_trunk(in_feats: int, layers: int, hidden: int, out: int) -> nn.Sequential:
    mods: list[nn.Module] = [nn.Linear(in_feats, hidden), nn.SiLU()]
    for i in range(layers):
        if i < layers - 1:
            mods += [TrunkRMSNorm(hidden, 1e-5), nn.Linear(hidden, hidden), nn.SiLU()]
        else:
            mods += [TrunkRMSNorm(hidden, 1e-5), nn.Linear(hidden, out)]
    return nn.Sequential(*mods)


class Encoder(nn.Module):
    def __init__(self, in_feats: int, layers: int, hidden: int, out: int):
        super().__init__()
        self.trunk = make_trunk(in_feats, layers, hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk(x)


class ActionInProj(nn.Module):
    """PerWaypointActionInProjV2: per-channel and time Fourier features -> MLP -> LayerNorm."""

    def __init__(self, channels: int, out_dim: int, layers: int, hidden: int, max_freq: float, feats: int):
        super().__init__()
        self.sinus = nn.ModuleList([Fourier(feats, max_freq) for _ in range(channels)])
        self.timestep_fourier_encoder = Fourier(feats, max_freq)
        n_in = sum(s.out_dim for s in self.sinus) + self.timestep_fourier_encoder.out_dim
        self.encoder = Encoder(n_in, layers, hidden, out_dim)
        self.norm = nn.LayerNorm(out_dim)

    def features(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        x, t = x.float(), t.float()
        act = torch.cat([s(x[:, :, i]) for i, s in enumerate(self.sinus)], dim=-1)
        tf = self.timestep_fourier_encoder(t[..., -1]).repeat(1, n, 1)
        return torch.cat((act, tf), dim=-1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        f = self.features(x, t)
        return self.norm(self.encoder(f.flatten(0, 1)).reshape(b, n, -1))


class ActionSpaceBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for name, v in (
            ("accel_mean", ACCEL_MEAN),
            ("accel_std", ACCEL_STD),
            ("curvature_mean", CURV_MEAN),
            ("curvature_std", CURV_STD),
        ):
            self.register_buffer(name, torch.tensor(v, dtype=torch.float32))


class ActionSide(nn.Module):
    """The checkpoint layout of Alpamayo-R1 minus the VLM."""

    def __init__(self, expert: nn.Module, in_proj: ActionInProj, hidden: int):
        super().__init__()
        self.expert = expert
        self.action_in_proj = in_proj
        self.action_out_proj = nn.Linear(hidden, ACTION_DIMS)
        self.action_space = ActionSpaceBuffers()


# --------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------


def text_config_dict(case: ExpertCase) -> dict[str, Any]:
    return {
        "model_type": "qwen3_vl_text",
        "vocab_size": 256,
        "hidden_size": case.vlm_hidden,
        "intermediate_size": case.vlm_intermediate,
        "num_hidden_layers": case.layers,
        "num_attention_heads": case.vlm_heads,
        "num_key_value_heads": case.kv_heads,
        "head_dim": case.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": case.rms_norm_eps,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": case.rope_theta,
            "mrope_section": list(case.mrope_section),
            "mrope_interleaved": True,
        },
    }


def alpamayo_config(case: ExpertCase) -> dict[str, Any]:
    """An Alpamayo-R1 config.json as the release would spell the action side."""
    return {
        "model_type": "alpamayo_r1",
        "architectures": ["AlpamayoR1"],
        "vlm_name_or_path": "vlm_config.json (tiny, written by " + GENERATOR + ")",
        "expert_cfg": case.expert_overrides(),
        "action_in_proj_cfg": {
            "_target_": "alpamayo_r1.models.action_in_proj.PerWaypointActionInProjV2",
            "num_enc_layers": case.enc_layers,
            "hidden_size": case.enc_hidden,
            "num_fourier_feats": case.fourier_feats,
            "max_freq": case.max_freq,
        },
        "action_out_proj_cfg": {"_target_": "torch.nn.Linear"},
        "action_space_cfg": {
            "_target_": "alpamayo_r1.action_space.UnicycleAccelCurvatureActionSpace",
            "accel_mean": ACCEL_MEAN,
            "accel_std": ACCEL_STD,
            "curvature_mean": CURV_MEAN,
            "curvature_std": CURV_STD,
            "curvature_bounds": [-0.33, 0.33],
        },
        "diffusion_cfg": {
            "_target_": "alpamayo_r1.diffusion.flow_matching.FlowMatching",
            "int_method": "euler",
            "num_inference_steps": case.steps,
        },
        "hist_traj_tokenizer_cfg": {
            "_target_": "alpamayo_r1.models.delta_tokenizer.DeltaTrajectoryTokenizer",
            "ego_xyz_min": list(HIST_MIN),
            "ego_xyz_max": list(HIST_MAX),
            "num_bins": HIST_BINS,
        },
        "expert_non_causal_attention": True,
        "keep_same_dtype": True,
        "tokens_per_history_traj": 3 * HISTORY,
        "tokens_per_future_traj": 128,
    }


def expert_dims(case: ExpertCase) -> dict[str, Any]:
    """The expert's resolved architecture: text config with expert_cfg set over it."""
    d = text_config_dict(case)
    d.update(case.expert_overrides())
    return d


# --------------------------------------------------------------------------
# building the model
# --------------------------------------------------------------------------


def kind_fn(name: str, p: torch.Tensor) -> str:
    # action_in_proj's RMSNorms are encoder.trunk.{2,5,...}.weight: no "norm" in their name
    if p.ndim == 1 and name.startswith("action_in_proj.encoder.trunk.") and name.endswith(".weight"):
        return "norm"
    return common.default_param_kind(name, p)


def build_expert_transformers(case: ExpertCase) -> nn.Module:
    """The source's construction: deepcopy(text_config), setattr(expert_cfg), AutoModel, del embed_tokens."""
    from transformers import AutoModel, Qwen3VLTextConfig  # noqa: PLC0415

    text = text_config_dict(case)
    text.pop("model_type")
    text_cfg = Qwen3VLTextConfig(**text)
    expert_cfg = copy.deepcopy(text_cfg)
    for key, value in case.expert_overrides().items():
        setattr(expert_cfg, key, value)
    try:
        model = AutoModel.from_config(expert_cfg, attn_implementation="eager")
    except Exception as exc:  # noqa: BLE001 - fall back to the class itself, and say so
        print(f"  note: AutoModel.from_config failed ({exc!r}); using Qwen3VLTextModel directly")
        from transformers import Qwen3VLTextModel  # noqa: PLC0415

        model = Qwen3VLTextModel(expert_cfg)
    if type(model).__name__ != "Qwen3VLTextModel":
        raise RuntimeError(f"AutoModel built {type(model).__name__}, expected Qwen3VLTextModel")
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")
        else:
            model.config._attn_implementation = "eager"
        impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        raise RuntimeError(f"attention implementation is {impl!r}, not 'eager'")
    del model.embed_tokens
    return model


class ManualExpertShell(nn.Module):
    """Parameters named like Qwen3VLTextModel's, for --manual-only (no transformers)."""

    def __init__(self, d: dict[str, Any]):
        super().__init__()
        h, nh, kvh, hd, ff = (d["hidden_size"], d["num_attention_heads"], d["num_key_value_heads"], d["head_dim"], d["intermediate_size"])
        self.layers = nn.ModuleList()
        for _ in range(d["num_hidden_layers"]):
            layer = nn.Module()
            layer.input_layernorm = TrunkRMSNorm(h, d["rms_norm_eps"])
            layer.post_attention_layernorm = TrunkRMSNorm(h, d["rms_norm_eps"])
            attn = nn.Module()
            attn.q_proj = nn.Linear(h, nh * hd, bias=False)
            attn.k_proj = nn.Linear(h, kvh * hd, bias=False)
            attn.v_proj = nn.Linear(h, kvh * hd, bias=False)
            attn.o_proj = nn.Linear(nh * hd, h, bias=False)
            attn.q_norm = TrunkRMSNorm(hd, d["rms_norm_eps"])
            attn.k_norm = TrunkRMSNorm(hd, d["rms_norm_eps"])
            layer.self_attn = attn
            mlp = nn.Module()
            mlp.gate_proj = nn.Linear(h, ff, bias=False)
            mlp.up_proj = nn.Linear(h, ff, bias=False)
            mlp.down_proj = nn.Linear(ff, h, bias=False)
            layer.mlp = mlp
            self.layers.append(layer)
        self.norm = TrunkRMSNorm(h, d["rms_norm_eps"])


def expected_names(case: ExpertCase) -> set[str]:
    d = expert_dims(case)
    names = {"expert.norm.weight"}
    for i in range(d["num_hidden_layers"]):
        for leaf in (
            "input_layernorm.weight",
            "post_attention_layernorm.weight",
            "self_attn.q_proj.weight",
            "self_attn.k_proj.weight",
            "self_attn.v_proj.weight",
            "self_attn.o_proj.weight",
            "self_attn.q_norm.weight",
            "self_attn.k_norm.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
        ):
            names.add(f"expert.layers.{i}.{leaf}")
    names |= {f"action_in_proj.sinus.{c}.freqs" for c in range(ACTION_DIMS)}
    names.add("action_in_proj.timestep_fourier_encoder.freqs")
    for i in range(case.enc_layers + 1):
        names |= {f"action_in_proj.encoder.trunk.{3 * i}.weight", f"action_in_proj.encoder.trunk.{3 * i}.bias"}
        if i < case.enc_layers:
            names.add(f"action_in_proj.encoder.trunk.{3 * i + 2}.weight")
    names |= {"action_in_proj.norm.weight", "action_in_proj.norm.bias"}
    names |= {"action_out_proj.weight", "action_out_proj.bias"}
    names |= {f"action_space.{n}" for n in ("accel_mean", "accel_std", "curvature_mean", "curvature_std")}
    return names


def build_model(case: ExpertCase, manual_only: bool) -> tuple[ActionSide, dict[str, torch.Tensor], list[dict[str, Any]]]:
    """Build, re-initialise, round every tensor to bf16; return the model (fp32) and the bf16 state."""
    torch.manual_seed(case.seed)
    d = expert_dims(case)
    expert = ManualExpertShell(d) if manual_only else build_expert_transformers(case)
    in_proj = ActionInProj(ACTION_DIMS, d["hidden_size"], case.enc_layers, case.enc_hidden, case.max_freq, case.fourier_feats)
    model = ActionSide(expert, in_proj, d["hidden_size"]).float()
    log = common.reinit_parameters(model, seed=case.seed, norm_jitter=0.1, bias_std=0.1, kind_fn=kind_fn)
    kinds = {e["name"]: e["kind"] for e in log}
    for name, p in model.named_parameters():
        # every 1-D weight here is a norm's (RMSNorm, LayerNorm, the trunk's RMSNorms)
        if p.ndim == 1 and name.endswith(".weight") and kinds[name] != "norm":
            raise RuntimeError(f"{name} was initialised as {kinds[name]}, not as a norm")
    # round what the checkpoint holds to bf16 (parameters and persistent buffers; not the
    # rotary inv_freq, which transformers recomputes and keeps in float32)
    persistent = set(model.state_dict().keys())
    with torch.no_grad():
        tensors = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if n in persistent]
        for _, t in tensors:
            t.copy_(t.to(torch.bfloat16).to(torch.float32))
    state = {k: v.detach().to("cpu").to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    want = expected_names(case)
    extra = sorted(set(state) - want)
    missing = sorted(want - set(state))
    if missing:
        raise RuntimeError(f"state dict lacks {missing}")
    if extra:
        print(f"  note: not saved (not part of the release layout): {extra}")
        for k in extra:
            del state[k]
    return model, state, log


# --------------------------------------------------------------------------
# the expert call, as NVlabs' step_fn does it
# --------------------------------------------------------------------------


def make_cache(kv_k: list[torch.Tensor], kv_v: list[torch.Tensor]):
    """A DynamicCache holding the random VLM cache: per layer [1, kv_heads, L, head_dim]."""
    from transformers import DynamicCache  # noqa: PLC0415

    cache = DynamicCache()
    for i, (k, v) in enumerate(zip(kv_k, kv_v)):
        cache.update(k, v, i)
    return cache


def cache_rows(cache, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values [1, kv_heads, n, head_dim] of one cache layer, across transformers versions."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        lay = layers[layer]
        return lay.keys, lay.values
    return cache.key_cache[layer], cache.value_cache[layer]


def expert_mask_and_positions(case: ExpertCase, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.zeros((1, 1, WAYPOINTS, case.L + WAYPOINTS), dtype=torch.float32, device=device)
    mask[0, :, :, case.offset : -WAYPOINTS] = torch.finfo(mask.dtype).min
    pos = torch.arange(WAYPOINTS, device=device)
    pos = pos.view(1, 1, -1).expand(3, 1, -1).clone()
    pos += case.rope_delta + case.offset
    return mask, pos


@torch.inference_mode()
def transformers_step(model: ActionSide, case: ExpertCase, cache, mask, pos, x, t):
    """One step_fn: returns (velocity, final hidden, in_proj output, new K rows, new V rows)."""
    emb = model.action_in_proj(x, t)
    kwargs = dict(inputs_embeds=emb, position_ids=pos, past_key_values=cache, attention_mask=mask, use_cache=True)
    try:
        out = model.expert(**kwargs, is_causal=False)  # as the source passes it
    except TypeError as exc:
        print(f"  note: the expert rejected is_causal=False ({exc}); calling without it (the mask decides anyway)")
        cache.crop(case.L)
        out = model.expert(**kwargs)
    got = cache.get_seq_length()
    if got != case.L + WAYPOINTS:
        raise RuntimeError(f"cache holds {got} tokens after the expert, expected {case.L + WAYPOINTS}")
    new_k, new_v = [], []
    for i in range(len(model.expert.layers)):
        k, v = cache_rows(cache, i)
        new_k.append(k[:, :, case.L :].clone())
        new_v.append(v[:, :, case.L :].clone())
    cache.crop(case.L)
    if cache.get_seq_length() != case.L:
        raise RuntimeError(f"crop left {cache.get_seq_length()} tokens, expected {case.L}")
    hidden = out.last_hidden_state[:, -WAYPOINTS:]
    vel = model.action_out_proj(hidden).view(-1, WAYPOINTS, ACTION_DIMS)
    return vel, hidden, emb, new_k, new_v


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


@torch.inference_mode()
def manual_step(model: ActionSide, case: ExpertCase, kv_k, kv_v, x, t):
    """An independent plain-torch expert: plain 1-D RoPE, explicit mask, GQA by repeat."""
    d = expert_dims(case)
    nh, kvh, hd, eps = d["num_attention_heads"], d["num_key_value_heads"], d["head_dim"], d["rms_norm_eps"]
    dev = x.device
    emb = model.action_in_proj(x, t)
    h = emb[0]
    pos = torch.arange(WAYPOINTS, device=dev, dtype=torch.float32) + float(case.rope_delta + case.offset)
    inv = 1.0 / (case.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64, device=dev).float() / hd))
    ang = pos[:, None] * inv[None, :]
    cos = torch.cat((ang.cos(), ang.cos()), -1)[:, None, :]
    sin = torch.cat((ang.sin(), ang.sin()), -1)[:, None, :]
    n_keys = case.L + WAYPOINTS
    bias = torch.zeros(n_keys, device=dev)
    bias[case.offset : case.L] = float("-inf")
    new_k, new_v = [], []
    for i, layer in enumerate(model.expert.layers):
        a = layer.self_attn
        y = rms(h, layer.input_layernorm.weight, eps)
        q = rms((y @ a.q_proj.weight.T).view(WAYPOINTS, nh, hd), a.q_norm.weight, eps)
        k = rms((y @ a.k_proj.weight.T).view(WAYPOINTS, kvh, hd), a.k_norm.weight, eps)
        v = (y @ a.v_proj.weight.T).view(WAYPOINTS, kvh, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        new_k.append(k.permute(1, 0, 2)[None].clone())
        new_v.append(v.permute(1, 0, 2)[None].clone())
        keys = torch.cat((kv_k[i][0].permute(1, 0, 2), k), 0)  # [n_keys, kvh, hd]
        vals = torch.cat((kv_v[i][0].permute(1, 0, 2), v), 0)
        rep = nh // kvh
        keys = keys.repeat_interleave(rep, dim=1)
        vals = vals.repeat_interleave(rep, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, keys) / math.sqrt(hd) + bias
        p = torch.softmax(scores, dim=-1)
        o = torch.einsum("hqk,khd->qhd", p, vals).reshape(WAYPOINTS, nh * hd)
        h = h + o @ a.o_proj.weight.T
        y = rms(h, layer.post_attention_layernorm.weight, eps)
        m = layer.mlp
        h = h + (torch.nn.functional.silu(y @ m.gate_proj.weight.T) * (y @ m.up_proj.weight.T)) @ m.down_proj.weight.T
    hidden = rms(h, model.expert.norm.weight, eps)[None]
    vel = model.action_out_proj(hidden).view(-1, WAYPOINTS, ACTION_DIMS)
    return vel, hidden, emb, new_k, new_v


# --------------------------------------------------------------------------
# the action space, after NVlabs/alpamayo action_space/*.py (float32, CPU)
# --------------------------------------------------------------------------


def yaw_of(rot: torch.Tensor) -> torch.Tensor:
    return torch.atan2(rot[..., 1, 0], rot[..., 0, 0])


def unwrap(phi: torch.Tensor) -> torch.Tensor:
    d = torch.diff(phi, dim=-1)
    d = torch.atan2(torch.sin(d), torch.cos(d))
    return torch.cat([phi[..., :1], phi[..., :1] + torch.cumsum(d, dim=-1)], dim=-1)


def history_speeds(xyz: torch.Tensor, rot: torch.Tensor, lam: float = 1e-6, ridge: float = 1e-4) -> torch.Tensor:
    """The regularised least-squares speeds v_0..v_N of the history (estimate_t0_states)."""
    theta = unwrap(yaw_of(rot))
    dxy = xyz[1:, :2] - xyz[:-1, :2]
    n = dxy.shape[0]
    g = 2 / DT * dxy
    a = torch.zeros(2 * n, n + 1, dtype=torch.float32)
    c, s = torch.cos(theta), torch.sin(theta)
    rows = torch.arange(n)
    a[2 * rows, rows] = c[:-1]
    a[2 * rows, rows + 1] = c[1:]
    a[2 * rows + 1, rows] = s[:-1]
    a[2 * rows + 1, rows + 1] = s[1:]
    ata = a.T @ a
    rhs = a.T @ g.flatten()
    d3 = torch.zeros(n + 1 - 3, n + 1, dtype=torch.float32)
    r3 = torch.arange(n + 1 - 3)
    d3[r3, r3], d3[r3, r3 + 1], d3[r3, r3 + 2], d3[r3, r3 + 3] = -1.0, 3.0, -3.0, 1.0
    dtd = (lam / DT**6) * (d3.T @ d3)
    lhs = ata + dtd + ridge * torch.eye(n + 1, dtype=torch.float32)
    chol = torch.linalg.cholesky(lhs)
    return torch.cholesky_solve(rhs[:, None], chol)[:, 0]


def action_to_traj(action: torch.Tensor, v0: torch.Tensor, z: torch.Tensor, buffers: dict[str, torch.Tensor]):
    """action_to_traj: denormalise (bf16 buffers, fp32 result), integrate, yaw-only rotations."""
    accel = action[..., 0] * buffers["accel_std"] + buffers["accel_mean"]
    kappa = action[..., 1] * buffers["curvature_std"] + buffers["curvature_mean"]
    dt = DT
    dt2 = 0.5 * (dt**2)
    vel = torch.cat([v0[None], v0[None] + torch.cumsum(accel * dt, dim=-1)], dim=-1)
    zero = torch.zeros_like(v0)
    theta = torch.cat(
        [zero[None], zero[None] + torch.cumsum(kappa * vel[:-1] * dt, dim=-1) + torch.cumsum(kappa * accel * dt2, dim=-1)],
        dim=-1,
    )
    half = 0.5 * dt
    x = zero[None] + torch.cumsum(vel[:-1] * torch.cos(theta[:-1]) * half, -1) + torch.cumsum(vel[1:] * torch.cos(theta[1:]) * half, -1)
    y = zero[None] + torch.cumsum(vel[:-1] * torch.sin(theta[:-1]) * half, -1) + torch.cumsum(vel[1:] * torch.sin(theta[1:]) * half, -1)
    xyz = torch.stack([x, y, z.expand_as(x)], -1)
    th = theta[1:]
    c, s = torch.cos(th), torch.sin(th)
    o, i1 = torch.zeros_like(c), torch.ones_like(c)
    rot = torch.stack([c, -s, o, s, c, o, o, o, i1], -1)
    return xyz, rot


def history_tokens(xyz: torch.Tensor) -> torch.Tensor:
    p = torch.nn.functional.pad(xyz[None], [0, 0, 1, 0, 0, 0])
    d = p[:, 1:] - p[:, :-1]
    mn = torch.tensor(HIST_MIN, dtype=d.dtype)
    mx = torch.tensor(HIST_MAX, dtype=d.dtype)
    q = (d - mn) / (mx - mn)
    q = (q * (HIST_BINS - 1)).round().long().clamp(0, HIST_BINS - 1)
    return q.reshape(-1)


def synthetic_history(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """16 poses at 10 Hz in the t0 frame: turning, accelerating, slightly pitched, with noise."""
    g = common.generator(seed)
    n_fine = 1500  # 1 ms steps over 1.5 s
    t = torch.linspace(-1.5, 0.0, n_fine + 1, dtype=torch.float64)
    speed = 7.0 + 1.2 * (t + 1.5)
    yaw = 0.2 * t + 0.05 * t * t
    ds = (speed[1:] + speed[:-1]) / 2 * (t[1:] - t[:-1])
    ym = (yaw[1:] + yaw[:-1]) / 2
    px = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(ds * torch.cos(ym), 0)])
    py = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(ds * torch.sin(ym), 0)])
    idx = torch.arange(0, n_fine + 1, 100)
    px, py, yw = px[idx] - px[-1], py[idx] - py[-1], yaw[idx]
    noise = torch.randn((HISTORY, 3), generator=g, dtype=torch.float64) * 0.01
    pz = 0.03 * t[idx] + noise[:, 2]
    xyz = torch.stack([px + noise[:, 0], py + noise[:, 1], pz], -1)
    xyz[-1] = torch.tensor([0.0, 0.0, float(pz[-1])], dtype=torch.float64)
    pitch = 0.02 * torch.randn(HISTORY, generator=g, dtype=torch.float64)
    rot = []
    for k in range(HISTORY):
        cy, sy, cp, sp = math.cos(yw[k]), math.sin(yw[k]), math.cos(pitch[k]), math.sin(pitch[k])
        rz = torch.tensor([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]], dtype=torch.float64)
        ry = torch.tensor([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]], dtype=torch.float64)
        rot.append(rz @ ry)
    return xyz.float(), torch.stack(rot).float()


# --------------------------------------------------------------------------
# running a case
# --------------------------------------------------------------------------


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float().cpu() - b.detach().float().cpu()).abs().max())


def build_case(case: ExpertCase, case_dir: str, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    d = expert_dims(case)
    model, state, init_log = build_model(case, args.manual_only)
    model = model.to(device).eval()
    common.save_tensors(os.path.join(case_dir, "model.safetensors"), state, {"format": "pt"})
    common.write_json(os.path.join(case_dir, "config.json"), alpamayo_config(case))
    common.write_json(os.path.join(case_dir, "vlm_config.json"), {"model_type": "qwen3_vl", "text_config": text_config_dict(case)})

    if not args.manual_only:
        rot = model.expert.rotary_emb
        want = 1.0 / (case.rope_theta ** (torch.arange(0, d["head_dim"], 2, dtype=torch.int64).float() / d["head_dim"]))
        torch.testing.assert_close(rot.inv_freq.detach().float().cpu(), want, rtol=1e-6, atol=0.0)
        if float(getattr(rot, "attention_scaling", 1.0)) != 1.0:
            raise RuntimeError(f"rope attention_scaling is {rot.attention_scaling}")
        got_sections = list(getattr(rot, "mrope_section", []))
        print(f"  expert: {type(model.expert).__name__}, rope sections {got_sections}, "
              f"layers {len(model.expert.layers)}, eager={model.expert.config._attn_implementation}")

    g = common.generator(case.seed + 1)
    kvw = d["num_key_value_heads"] * d["head_dim"]
    kv_k = [torch.randn((1, d["num_key_value_heads"], case.L, d["head_dim"]), generator=g) for _ in range(case.layers)]
    kv_v = [torch.randn((1, d["num_key_value_heads"], case.L, d["head_dim"]), generator=g) for _ in range(case.layers)]
    noise = torch.randn((1, WAYPOINTS, ACTION_DIMS), generator=g)
    kv_k_dev = [k.to(device) for k in kv_k]
    kv_v_dev = [v.to(device) for v in kv_v]
    mask, pos = expert_mask_and_positions(case, device)

    time_steps = torch.linspace(0.0, 1.0, case.steps + 1, device=device)
    time_cpu = torch.linspace(0.0, 1.0, case.steps + 1)
    if not torch.equal(time_steps.cpu(), time_cpu):
        print(f"  note: linspace differs between {device} and cpu: {time_steps.cpu().tolist()} vs {time_cpu.tolist()}")

    x = noise.to(device)
    xs, vs, hs, es, mvs, mhs = [], [], [], [], [], []
    first_kv = None
    agree = {"velocity": 0.0, "hidden": 0.0, "inproj": 0.0, "new_k": 0.0, "new_v": 0.0}
    cache = None if args.manual_only else make_cache(kv_k_dev, kv_v_dev)
    for i in range(case.steps):
        dt = time_steps[i + 1] - time_steps[i]
        t = time_steps[i].view(1, 1, 1).expand(1, 1, 1)
        ref = manual_step(model, case, kv_k_dev, kv_v_dev, x, t)
        out = ref if args.manual_only else transformers_step(model, case, cache, mask, pos, x, t)
        for key, a, b in (("velocity", out[0], ref[0]), ("hidden", out[1], ref[1]), ("inproj", out[2], ref[2])):
            agree[key] = max(agree[key], max_diff(a, b))
        for key, la, lb in (("new_k", out[3], ref[3]), ("new_v", out[4], ref[4])):
            agree[key] = max(agree[key], max(max_diff(a, b) for a, b in zip(la, lb)))
        if i == 0:
            first_kv = out[3], out[4]
        xs.append(x[0].clone())
        vs.append(out[0][0].clone())
        hs.append(out[1][0].clone())
        es.append(out[2][0].clone())
        mvs.append(ref[0][0].clone())
        mhs.append(ref[1][0].clone())
        x = x + dt * out[0]
    print(f"  transformers vs plain torch (max |diff| over {case.steps} steps): "
          + ", ".join(f"{k} {v:.2e}" for k, v in agree.items()))
    disagree = max(agree.values()) > args.max_disagreement
    if disagree:
        # keep going: the files are written (transformers' values as expected, the plain-torch ones
        # beside them) so that the disagreement can be diagnosed; the run still fails at the end
        print(f"  ERROR: transformers' expert and the plain-torch expert disagree by {agree} (> {args.max_disagreement})")

    def rows(t: torch.Tensor) -> torch.Tensor:  # [1, kvh, n, hd] -> [n, kvh*hd]
        return t[0].permute(1, 0, 2).reshape(t.shape[2], -1).float().cpu()

    actions = x[0].float().cpu()
    hist_xyz, hist_rot = synthetic_history(case.seed + 2)
    speeds = history_speeds(hist_xyz, hist_rot)
    buffers = {k: v.detach().cpu().to(torch.bfloat16) for k, v in model.action_space.named_buffers()}
    traj_xyz, traj_rot = action_to_traj(actions, speeds[-1], hist_xyz[-1, 2], buffers)
    tokens = history_tokens(hist_xyz)

    prefix = torch.tensor([case.L, case.offset, case.rope_delta], dtype=torch.int64)
    common.save_tensors(
        os.path.join(case_dir, "inputs.safetensors"),
        {
            "kv_k": torch.stack([rows(k) for k in kv_k]),
            "kv_v": torch.stack([rows(v) for v in kv_v]),
            "noise": noise[0].float(),
            "prefix": prefix,
            "history_xyz": hist_xyz.float(),
            "history_rot": hist_rot.reshape(HISTORY, 9).float(),
        },
        {"format": common.FORMAT, "case": case.name, "prefix": "L, offset, rope_delta"},
    )
    meta = {
        "format": common.FORMAT,
        "family": "alpamayo-expert",
        "case": case.name,
        "compute_dtype": "float32",
        "weights_dtype": "bfloat16",
        "attn_implementation": "eager",
        "reference": "plain torch (--manual-only)" if args.manual_only else "transformers Qwen3VLTextModel",
        "device": str(device),
        "precision": args.precision_state,
        "agreement": agree,
    }
    common.save_tensors(
        os.path.join(case_dir, "expected.safetensors"),
        {
            "time_steps": time_steps.float().cpu(),
            "x_steps": torch.stack(xs).float().cpu(),
            "v_steps": torch.stack(vs).float().cpu(),
            "hidden_steps": torch.stack(hs).float().cpu(),
            "inproj_steps": torch.stack(es).float().cpu(),
            "new_k": torch.stack([rows(k) for k in first_kv[0]]),
            "new_v": torch.stack([rows(v) for v in first_kv[1]]),
            "actions": actions,
            "history_speeds": speeds.float(),
            "traj_xyz": traj_xyz.float(),
            "traj_rot": traj_rot.float(),
            "history_tokens": tokens.to(torch.int64),
            "plain_torch_v_steps": torch.stack(mvs).float().cpu(),
            "plain_torch_hidden_steps": torch.stack(mhs).float().cpu(),
        },
        meta,
    )
    v_abs = float(torch.stack(vs).abs().max())
    print(f"case={case.name} layers={case.layers} L={case.L} offset={case.offset} rope_delta={case.rope_delta} "
          f"|v|max={v_abs:.3f} |actions|max={float(actions.abs().max()):.3f} v0={float(speeds[-1]):.4f} "
          f"traj_end={traj_xyz[-1].tolist()}", flush=True)
    entry = {
        "name": case.name,
        "family": "alpamayo-expert",
        "spec": dataclasses.asdict(case),
        "expert": d,
        "meta": meta,
        "velocity_abs_max": v_abs,
        "time_steps": time_steps.float().cpu().tolist(),
        "time_steps_cpu": time_cpu.tolist(),
        "history_tokens": tokens.tolist(),
        "init": [{"name": e["name"], "kind": e["kind"], "std": e["std"]} for e in init_log],
        "versions": common.versions(),
    }
    common.write_json(os.path.join(case_dir, "reference.json"), entry)
    if disagree:
        raise RuntimeError(f"{case.name}: transformers vs plain torch {agree}")
    return entry


def run_case(case: ExpertCase, out_dir: str, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """Write OUT/<case>/ whole or not at all: built in a hidden sibling dir, then renamed."""
    final_dir = os.path.join(out_dir, case.name)
    work_dir = os.path.join(out_dir, f".{case.name}.partial")
    if os.path.isdir(work_dir):
        shutil.rmtree(work_dir)
    os.makedirs(work_dir)
    try:
        entry = build_case(case, work_dir, device, args)
    except BaseException:
        if os.path.exists(os.path.join(work_dir, "reference.json")):
            # complete but flagged (transformers vs plain torch): keep it for diagnosis
            failed_dir = os.path.join(out_dir, f"{case.name}.failed")
            shutil.rmtree(failed_dir, ignore_errors=True)
            os.replace(work_dir, failed_dir)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
        raise
    if os.path.isdir(final_dir):
        shutil.rmtree(final_dir)
    os.replace(work_dir, final_dir)
    return entry


def default_out_dir() -> str:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(repo, "testdata", "reference")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=default_out_dir(), help="output directory (default: <repo>/testdata/reference)")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cuda, cuda:N or cpu")
    ap.add_argument("--manual-only", action="store_true", help="no transformers: smoke-test the script (do not commit)")
    ap.add_argument("--max-disagreement", type=float, default=1e-3, help="largest allowed transformers vs plain-torch difference")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES:
            print(f"{c.name}: {c.note}")
        return 0
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
    if not args.manual_only:
        import inspect  # noqa: PLC0415

        import transformers  # noqa: PLC0415

        print(f"transformers from {transformers.__file__}")
        try:
            from transformers import Qwen3VLTextModel  # noqa: PLC0415

            print(f"Qwen3VLTextModel.forward{inspect.signature(Qwen3VLTextModel.forward)}")
        except Exception as exc:  # noqa: BLE001 - diagnostics only
            print(f"cannot import Qwen3VLTextModel: {exc!r}")
    print(f"{GENERATOR}: torch {v['torch']} transformers {v['transformers']} device {device} "
          f"precision {args.precision_state} manual_only={args.manual_only} -> {out_dir}", flush=True)
    start = time.time()
    failed: list[str] = []
    done = 0
    for case in selected:
        try:
            run_case(case, out_dir, device, args)
            done += 1
        except Exception:  # noqa: BLE001 - report, go on with the other cases, fail at the end
            traceback.print_exc()
            print(f"case={case.name} FAILED (its previous output, if any, is left as it was)", flush=True)
            failed.append(case.name)
    print(f"wrote {done} case(s) in {time.time() - start:.1f}s")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
