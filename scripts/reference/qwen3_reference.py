#!/usr/bin/env python3
"""Reference outputs of tiny random-weight Qwen3 models, from Hugging Face transformers.

Usage (on a machine with torch + transformers; no network needed):

    python3 scripts/reference/qwen3_reference.py --out testdata/reference

For every case it writes OUT/<case>/:
    config.json, generation_config.json (if transformers writes one)
    model.safetensors                        bf16 weights, or for sharded cases
    model-0000i-of-0000n.safetensors + model.safetensors.index.json
    inputs.safetensors    input_ids   int64 [1, T]
    expected.safetensors  logits      float32 [T, vocab]  full forward, no cache
                          greedy_ids  int64 [N]           generate(), greedy, no eos
                          step_logits float32 [N, vocab]  logits greedy_ids[i] was the argmax of
                          step_gaps   float32 [N]         top-1 minus top-2 of each step_logits row
and OUT/manifest.json describing all cases. See README.md beside this file.

The float32 reference is computed from the same bf16 weights that were saved
(reloaded from the checkpoint and upcast), with TF32 off and eager attention.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

GENERATOR = "qwen3_reference.py"
TF_VERSION = common.parse_version(transformers.__version__)
MAX_POSITION_EMBEDDINGS = 512
PROMPT_MIN_LEN = 11
PROMPT_MAX_LEN = 24


@dataclasses.dataclass(frozen=True)
class Qwen3Case:
    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    rope_theta: float
    rms_norm_eps: float = 1e-6
    # None: one model.safetensors. Otherwise save sharded with this max shard size.
    max_shard_bytes: int | None = None
    seed: int = 0
    # std of every weight matrix is matrix_gain / sqrt(fan_in) (see common.reinit_parameters)
    matrix_gain: float = 1.0
    note: str = ""


CASES: list[Qwen3Case] = [
    Qwen3Case(
        name="qwen3-gqa4-tied",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=160,
        vocab_size=384,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        seed=1001,
        # With N(0,1) embeddings that double as the lm_head and gain 1, the embedding dominates the
        # residual stream and greedy decoding repeats one token forever; gain 2 keeps it varied.
        matrix_gain=2.0,
        note="GQA 4 query heads per kv head; lm_head tied to embed_tokens (absent from the checkpoint); "
        "heads*head_dim=128 != hidden 64; weight matrices at 2/sqrt(fan_in)",
    ),
    Qwen3Case(
        name="qwen3-mha-untied",
        hidden_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        intermediate_size=200,
        vocab_size=512,
        tie_word_embeddings=False,
        rope_theta=1e6,
        seed=2002,
        note="plain multi-head attention (kv heads = heads); untied lm_head; heads*head_dim=128 != hidden 96",
    ),
    Qwen3Case(
        name="qwen3-gqa2-hd64",
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=256,
        vocab_size=300,
        tie_word_embeddings=False,
        rope_theta=5e6,
        rms_norm_eps=1e-5,
        max_shard_bytes=300_000,
        seed=3003,
        note="GQA 2; head_dim 64 with heads*head_dim=256 != hidden 128; rms_norm_eps 1e-5; "
        "sharded checkpoint with model.safetensors.index.json",
    ),
]


# --------------------------------------------------------------------------
# building and saving
# --------------------------------------------------------------------------


def rope_theta_of(config: Any) -> float:
    """The rope theta a config will use: transformers 5 keeps it in rope_parameters."""
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict) and rp.get("rope_theta") is not None:
        return float(rp["rope_theta"])
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        raise RuntimeError("config has neither rope_parameters['rope_theta'] nor rope_theta")
    return float(theta)


def build_config(case: Qwen3Case) -> Qwen3Config:
    kw: dict[str, Any] = dict(
        vocab_size=case.vocab_size,
        hidden_size=case.hidden_size,
        intermediate_size=case.intermediate_size,
        num_hidden_layers=case.num_hidden_layers,
        num_attention_heads=case.num_attention_heads,
        num_key_value_heads=case.num_key_value_heads,
        head_dim=case.head_dim,
        hidden_act="silu",
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        rms_norm_eps=float(case.rms_norm_eps),
        tie_word_embeddings=case.tie_word_embeddings,
        attention_bias=False,
        attention_dropout=0.0,
        use_sliding_window=False,
        use_cache=True,
    )
    if TF_VERSION >= (5, 0):
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": float(case.rope_theta)}
    else:
        kw["rope_theta"] = float(case.rope_theta)
    config = Qwen3Config(**kw)
    checks = {
        "vocab_size": case.vocab_size,
        "hidden_size": case.hidden_size,
        "num_hidden_layers": case.num_hidden_layers,
        "num_attention_heads": case.num_attention_heads,
        "num_key_value_heads": case.num_key_value_heads,
        "head_dim": case.head_dim,
        "intermediate_size": case.intermediate_size,
        "tie_word_embeddings": case.tie_word_embeddings,
    }
    for key, want in checks.items():
        got = getattr(config, key, None)
        if got != want:
            raise RuntimeError(f"{case.name}: Qwen3Config.{key} is {got!r}, asked for {want!r}")
    theta = rope_theta_of(config)
    if abs(theta - case.rope_theta) > 1e-9 * case.rope_theta:
        raise RuntimeError(f"{case.name}: config rope theta is {theta}, asked for {case.rope_theta}")
    return config


def embeddings_tied(model: Qwen3ForCausalLM) -> bool:
    return model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def required_config_keys(case: Qwen3Case) -> dict[str, Any]:
    return {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
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
        "tie_word_embeddings": case.tie_word_embeddings,
        "attention_bias": False,
        "use_sliding_window": False,
    }


def check_config_rope(model_dir: str, case: Qwen3Case) -> list[str]:
    """config.json must carry the rope theta (either spelling); add rope_theta if neither."""
    path = os.path.join(model_dir, "config.json")
    cfg = common.read_json(path)
    found = []
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict):
        rope_type = rp.get("rope_type", rp.get("type", "default"))
        if rope_type != "default":
            raise RuntimeError(f"{path}: rope_parameters.rope_type is {rope_type!r}, expected 'default'")
        if "rope_theta" in rp:
            found.append(float(rp["rope_theta"]))
    if cfg.get("rope_theta") is not None:
        found.append(float(cfg["rope_theta"]))
    for theta in found:
        if abs(theta - case.rope_theta) > 1e-9 * case.rope_theta:
            raise RuntimeError(f"{path}: rope theta {theta}, expected {case.rope_theta}")
    if not found:
        cfg["rope_theta"] = float(case.rope_theta)
        common.write_json(path, cfg)
        return ["rope_theta"]
    return []


def build_and_save(case: Qwen3Case, case_dir: str) -> dict[str, Any]:
    """Build the random model, save it as bf16 into case_dir; describe the checkpoint."""
    torch.manual_seed(case.seed)
    config = build_config(case)
    model = Qwen3ForCausalLM(config)
    model.eval()

    tied = embeddings_tied(model)
    if case.tie_word_embeddings and not tied:
        model.tie_weights()
        tied = embeddings_tied(model)
    if tied != case.tie_word_embeddings:
        raise RuntimeError(f"{case.name}: lm_head tied={tied}, config says {case.tie_word_embeddings}")

    init_log = common.reinit_parameters(
        model, seed=case.seed, matrix_gain=case.matrix_gain, embed_std=1.0, norm_jitter=0.1
    )
    kinds = {e["name"]: e["kind"] for e in init_log}
    # every Qwen3 RMSNorm weight must have been jittered, embed_tokens drawn N(0,1)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") and kinds.get(name) != "norm":
            raise RuntimeError(f"{case.name}: {name} was initialised as {kinds.get(name)}, not as a norm")
    if kinds.get("model.embed_tokens.weight") != "embedding":
        raise RuntimeError(f"{case.name}: embed_tokens was not initialised as an embedding: {kinds}")

    model = model.to(torch.bfloat16)
    if case.tie_word_embeddings and not embeddings_tied(model):
        raise RuntimeError(f"{case.name}: casting to bf16 untied lm_head")
    mem_state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}

    save_kwargs: dict[str, Any] = {}
    if TF_VERSION < (5, 0):
        save_kwargs["safe_serialization"] = True  # the only format in transformers 5 (and the kwarg is gone)
    if case.max_shard_bytes is not None:
        save_kwargs["max_shard_size"] = int(case.max_shard_bytes)
    model.save_pretrained(case_dir, **save_kwargs)

    if not os.path.exists(os.path.join(case_dir, "config.json")):
        model.config.save_pretrained(case_dir)
    if not os.path.exists(os.path.join(case_dir, "generation_config.json")):
        gen_cfg = getattr(model, "generation_config", None)
        if gen_cfg is not None:
            try:
                gen_cfg.save_pretrained(case_dir)
            except Exception as exc:  # noqa: BLE001 - harmless file, note and go on
                print(f"  note: generation_config.json not written: {exc}")

    files, index = common.checkpoint_files(case_dir)
    sharding = "none"
    if case.max_shard_bytes is not None:
        if index is not None and len(files) >= 2 and not os.path.exists(os.path.join(case_dir, "model.safetensors")):
            sharding = "save_pretrained"
        else:
            # save_pretrained did not shard: write the shards and the index ourselves
            state = common.load_checkpoint(case_dir)
            common.write_sharded_checkpoint(state, case_dir, int(case.max_shard_bytes))
            sharding = "manual"
        files, index = common.checkpoint_files(case_dir)
        if index is None or len(files) < 2:
            raise RuntimeError(f"{case.name}: expected a sharded checkpoint, got {files}")
        if not os.path.exists(os.path.join(case_dir, common.INDEX_NAME)):
            raise RuntimeError(f"{case.name}: {common.INDEX_NAME} missing after saving")
    else:
        if files != [common.SINGLE_WEIGHTS_NAME] or index is not None:
            raise RuntimeError(f"{case.name}: expected a single model.safetensors, got {files}")

    # The file must hold exactly the bf16 tensors of the model in memory.
    on_disk = common.load_checkpoint(case_dir)
    for name, t in on_disk.items():
        if t.dtype != torch.bfloat16:
            raise RuntimeError(f"{case.name}: {name} saved as {t.dtype}, not bfloat16")
        if name not in mem_state or not torch.equal(t, mem_state[name]):
            raise RuntimeError(f"{case.name}: saved {name} differs from the model's")
    missing = sorted(set(mem_state) - set(on_disk))
    allowed_missing = ["lm_head.weight"] if case.tie_word_embeddings else []
    if any(m not in allowed_missing for m in missing):
        raise RuntimeError(f"{case.name}: tensors not saved: {missing}")

    added = common.ensure_config_keys(case_dir, required_config_keys(case))
    added += check_config_rope(case_dir, case)

    weight_bytes = common.dir_bytes(case_dir, files)
    if weight_bytes > 1 << 20:
        print(f"  warning: {case.name} weights are {weight_bytes} bytes (> 1 MiB)")
    return {
        "files": files,
        "sharded": index is not None,
        "sharding": sharding,
        "weight_bytes": weight_bytes,
        "lm_head_in_checkpoint": "lm_head.weight" in on_disk,
        "config_keys_added": added,
        "tensors": {k: {"dtype": "bfloat16", "shape": list(v.shape)} for k, v in sorted(on_disk.items())},
        "init": [{"name": e["name"], "kind": e["kind"], "std": e["std"]} for e in init_log],
    }


# --------------------------------------------------------------------------
# float32 reference
# --------------------------------------------------------------------------


def load_reference_model(case: Qwen3Case, case_dir: str, device: torch.device) -> Qwen3ForCausalLM:
    """Reload the saved bf16 checkpoint as float32 with eager attention, and check it."""
    kw: dict[str, Any] = {"attn_implementation": "eager"}
    if TF_VERSION >= (4, 56):
        kw["dtype"] = torch.float32  # 'torch_dtype' was renamed 'dtype'
    else:
        kw["torch_dtype"] = torch.float32
    model = Qwen3ForCausalLM.from_pretrained(case_dir, **kw)
    model = model.float().to(device)
    model.eval()

    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        raise RuntimeError(f"{case.name}: attention implementation is {impl!r}, not 'eager'")
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise RuntimeError(f"{case.name}: {name} is {p.dtype} after .float()")

    # every weight must be the saved bf16 value, exactly (upcasting is exact)
    on_disk = common.load_checkpoint(case_dir)
    state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    for name, t in on_disk.items():
        if name not in state:
            raise RuntimeError(f"{case.name}: checkpoint tensor {name} not in the reloaded model")
        if not torch.equal(state[name], t.float()):
            raise RuntimeError(f"{case.name}: reloaded {name} differs from the checkpoint")
    for name in sorted(set(state) - set(on_disk)):
        if case.tie_word_embeddings and name == "lm_head.weight":
            if not torch.equal(state[name], state["model.embed_tokens.weight"]):
                raise RuntimeError(f"{case.name}: reloaded lm_head is not tied to embed_tokens")
            continue
        raise RuntimeError(f"{case.name}: reloaded model has {name}, which the checkpoint lacks")
    if not case.tie_word_embeddings and embeddings_tied(model):
        raise RuntimeError(f"{case.name}: reloaded lm_head is tied but the config says untied")

    # rope frequencies must come from the asked-for theta
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    inv_freq = getattr(rotary, "inv_freq", None)
    if inv_freq is None:
        raise RuntimeError(f"{case.name}: cannot find model.model.rotary_emb.inv_freq")
    d = case.head_dim
    want = 1.0 / (case.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    torch.testing.assert_close(inv_freq.detach().float().cpu(), want, rtol=1e-5, atol=0.0)
    if abs(float(getattr(rotary, "attention_scaling", 1.0)) - 1.0) > 0:
        raise RuntimeError(f"{case.name}: rope attention_scaling is {rotary.attention_scaling}, expected 1")

    # generation must not stop early: no eos, no pad
    gc = getattr(model, "generation_config", None)
    if gc is not None:
        gc.eos_token_id = None
        gc.pad_token_id = None
    return model


@torch.inference_mode()
def full_logits(model: Qwen3ForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    """float32 [L, vocab]: one forward over ids [1, L], no cache."""
    out = model(input_ids=ids, use_cache=False)
    logits = out.logits
    if logits.dim() != 3 or logits.shape[1] != ids.shape[1]:
        raise RuntimeError(f"logits have shape {tuple(logits.shape)} for ids {tuple(ids.shape)}")
    return logits[0].float()


@torch.inference_mode()
def greedy_no_cache(model: Qwen3ForCausalLM, ids: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy ids [n] and the logits each was the argmax of [n, vocab]; a full forward per step."""
    seq = ids
    picked: list[int] = []
    rows: list[torch.Tensor] = []
    for _ in range(n):
        last = full_logits(model, seq)[-1]
        nxt = int(torch.argmax(last).item())
        picked.append(nxt)
        rows.append(last)
        seq = torch.cat([seq, torch.tensor([[nxt]], dtype=seq.dtype, device=seq.device)], dim=1)
    return torch.tensor(picked, dtype=torch.int64), torch.stack(rows).cpu()


@torch.inference_mode()
def greedy_generate(model: Qwen3ForCausalLM, ids: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """model.generate: greedy, KV cache, exactly n new tokens. Returns ids [n] and its logits [n, vocab] or None."""
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
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
    sequences = out.sequences if hasattr(out, "sequences") else out
    t = ids.shape[1]
    if sequences.shape != (1, t + n):
        raise RuntimeError(f"generate returned shape {tuple(sequences.shape)}, expected (1, {t + n})")
    if not torch.equal(sequences[:, :t], ids):
        raise RuntimeError("generate changed the prompt")
    step_logits = getattr(out, "logits", None)
    logits = None
    if step_logits is not None and len(step_logits) == n:
        logits = torch.stack([s[0].float() for s in step_logits]).cpu()
    return sequences[0, t:].cpu(), logits


def run_case(case: Qwen3Case, out_dir: str, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """Write OUT/<case>/ whole or not at all: built in a hidden sibling dir, then renamed."""
    final_dir = os.path.join(out_dir, case.name)
    work_dir = os.path.join(out_dir, f".{case.name}.partial")
    if os.path.isdir(work_dir):
        shutil.rmtree(work_dir)
    os.makedirs(work_dir)
    try:
        entry = build_case(case, work_dir, device, args)
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    if os.path.isdir(final_dir):
        shutil.rmtree(final_dir)
    os.replace(work_dir, final_dir)
    return entry


def build_case(case: Qwen3Case, case_dir: str, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    ckpt = build_and_save(case, case_dir)
    model = load_reference_model(case, case_dir, device)

    n = args.new_tokens
    chosen = None
    tried: list[dict[str, Any]] = []
    for attempt in range(args.max_rerolls + 1):
        input_seed = case.seed * 1000 + attempt
        ids_cpu = common.random_ids(input_seed, case.vocab_size, PROMPT_MIN_LEN, PROMPT_MAX_LEN)
        ids = ids_cpu.to(device)
        logits = full_logits(model, ids).cpu()
        greedy_ids, step_logits = greedy_no_cache(model, ids, n)
        gaps = [common.top2_gap(row) for row in step_logits]
        min_gap = min(gaps)
        tried.append({"input_seed": input_seed, "T": int(ids.shape[1]), "min_gap": min_gap})
        if min_gap >= args.min_gap:
            chosen = (attempt, input_seed, ids_cpu, ids, logits, greedy_ids, step_logits, gaps)
            break
        print(f"  {case.name}: input seed {input_seed} has a near tie (min gap {min_gap:.4g} < {args.min_gap}); re-rolling")
    if chosen is None:
        raise RuntimeError(f"{case.name}: every input had a near tie after {args.max_rerolls} re-rolls: {tried}")
    attempt, input_seed, ids_cpu, ids, logits, greedy_ids, step_logits, gaps = chosen
    t = int(ids_cpu.shape[1])

    # first greedy step is the prompt's last position of the full forward
    if not torch.allclose(step_logits[0], logits[-1], rtol=0.0, atol=1e-5):
        raise RuntimeError(f"{case.name}: prompt forward and first greedy step disagree")

    gen_ids, gen_logits = greedy_generate(model, ids, n)
    if not torch.equal(gen_ids, greedy_ids):
        raise RuntimeError(
            f"{case.name}: generate() gave {gen_ids.tolist()}, the no-cache loop {greedy_ids.tolist()}"
        )
    cache_diff = float("nan")
    if gen_logits is not None:
        cache_diff = float((gen_logits - step_logits).abs().max())
        if cache_diff > 1e-3:
            print(f"  warning: {case.name}: cached vs uncached step logits differ by {cache_diff:.3g}")

    prompt_gaps = [common.top2_gap(row) for row in logits]
    versions = common.versions()
    meta: dict[str, Any] = {
        "format": common.FORMAT,
        "family": "qwen3",
        "case": case.name,
        "T": t,
        "N": n,
        "min_gap": min(gaps),
        "min_gap_threshold": args.min_gap,
        "prompt_positions_min_gap": min(prompt_gaps),
        "input_seed": input_seed,
        "weight_seed": case.seed,
        "attempts": attempt + 1,
        "weights_dtype": "bfloat16",
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "device": str(device),
        "precision": args.precision_state,
        "torch_version": versions["torch"],
        "transformers_version": versions["transformers"],
        "logits_abs_max": float(logits.abs().max()),
        "cache_vs_nocache_max_abs_diff": cache_diff,
        "greedy": "generate(do_sample=False, num_beams=1, use_cache=True, no eos) == argmax loop without cache",
    }
    common.save_tensors(
        os.path.join(case_dir, "inputs.safetensors"),
        {"input_ids": ids_cpu.to(torch.int64)},
        {"format": common.FORMAT, "case": case.name, "T": t, "input_seed": input_seed, "vocab_size": case.vocab_size},
    )
    common.save_tensors(
        os.path.join(case_dir, "expected.safetensors"),
        {
            "logits": logits.to(torch.float32).contiguous(),
            "greedy_ids": greedy_ids.to(torch.int64),
            "step_logits": step_logits.to(torch.float32).contiguous(),
            "step_gaps": torch.tensor(gaps, dtype=torch.float32),
        },
        meta,
    )

    # reading back what was written is cheap and catches any writer surprise
    back_in = common.load_file(os.path.join(case_dir, "inputs.safetensors"))
    back_ex = common.load_file(os.path.join(case_dir, "expected.safetensors"))
    assert back_in["input_ids"].dtype == torch.int64 and tuple(back_in["input_ids"].shape) == (1, t)
    assert back_ex["logits"].dtype == torch.float32 and tuple(back_ex["logits"].shape) == (t, case.vocab_size)
    assert back_ex["greedy_ids"].dtype == torch.int64 and tuple(back_ex["greedy_ids"].shape) == (n,)

    print(
        f"case={case.name} T={t} N={n} min_gap={min(gaps):.4f} attempts={attempt + 1} "
        f"logits_absmax={float(logits.abs().max()):.3f} cache_vs_nocache={cache_diff:.2e} "
        f"weights={ckpt['weight_bytes']}B files={len(ckpt['files'])} sharding={ckpt['sharding']} "
        f"greedy={greedy_ids.tolist()}",
        flush=True,
    )
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()

    return {
        "name": case.name,
        "family": "qwen3",
        "architecture": "Qwen3ForCausalLM",
        "dir": case.name,
        "inputs": f"{case.name}/inputs.safetensors",
        "expected": f"{case.name}/expected.safetensors",
        "note": case.note,
        "spec": dataclasses.asdict(case),
        "config": common.read_json(os.path.join(case_dir, "config.json")),
        "checkpoint": ckpt,
        "T": t,
        "N": n,
        "min_gap": min(gaps),
        "min_gap_threshold": args.min_gap,
        "step_gaps": gaps,
        "prompt_positions_min_gap": min(prompt_gaps),
        "input_seed": input_seed,
        "weight_seed": case.seed,
        "attempts": attempt + 1,
        "rerolls": tried[:-1],
        "input_ids": ids_cpu[0].tolist(),
        "greedy_ids": greedy_ids.tolist(),
        "logits_abs_max": float(logits.abs().max()),
        # null when generate() returned no per-step logits (JSON has no NaN)
        "cache_vs_nocache_max_abs_diff": None if math.isnan(cache_diff) else cache_diff,
        "weights_dtype": "bfloat16",
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "device": str(device),
        "precision": args.precision_state,
        "versions": versions,
    }


def default_out_dir() -> str:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(repo, "testdata", "reference")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=default_out_dir(), help="output directory (default: <repo>/testdata/reference)")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cuda, cuda:N or cpu")
    ap.add_argument("--new-tokens", type=int, default=12, help="greedy tokens to generate (N)")
    ap.add_argument("--min-gap", type=float, default=0.02, help="least top-1/top-2 logit gap of every greedy step")
    ap.add_argument("--max-rerolls", type=int, default=20, help="new input seeds to try when a step is a near tie")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)

    if args.list:
        for c in CASES:
            print(f"{c.name}: {c.note}")
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
    print(
        f"{GENERATOR}: torch {v['torch']} transformers {v['transformers']} device {device} "
        f"precision {args.precision_state} -> {out_dir}",
        flush=True,
    )

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
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
