"""Shared helpers for the reference-output generators in scripts/reference/.

Each generator (qwen3_reference.py today; Qwen3-VL, Alpamayo later) builds tiny
random-weight Hugging Face models, saves them as bf16 safetensors checkpoints,
and records what transformers computes for them in float32, so that vlanode's
Go tests can compare against it. This module holds what they share: offline
environment, strict float32 settings, seeding and re-initialisation of
weights, the near-tie gap, safetensors writing with metadata, checkpoint
inspection (single file or sharded with an index), config.json checks and the
manifest.

Import this module BEFORE transformers: it sets the offline environment
variables that huggingface_hub and transformers read at import time.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

# The GPU machine has no network: make every Hugging Face library fail fast
# instead of trying (and timing out on) the Hub. Must precede their import.
for _key, _value in (
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
    ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    os.environ.setdefault(_key, _value)

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

FORMAT = "vlanode-reference-v1"

SINGLE_WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
SHARD_RE = re.compile(r"^model-(\d{5})-of-(\d{5})\.safetensors$")


# --------------------------------------------------------------------------
# versions and devices
# --------------------------------------------------------------------------


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as '5.17.0' or '2.11.0+cu128'."""
    m = re.match(r"^\s*(\d+)\.(\d+)", text)
    if not m:
        raise ValueError(f"cannot parse version {text!r}")
    return int(m.group(1)), int(m.group(2))


def versions() -> dict[str, str]:
    """Versions of everything that can change the numbers, as strings."""
    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": str(torch.version.cuda),
    }
    for mod in ("transformers", "safetensors", "numpy", "huggingface_hub"):
        try:
            out[mod] = str(__import__(mod).__version__)
        except Exception:  # noqa: BLE001 - informational only
            out[mod] = "unavailable"
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def pick_device(name: str) -> torch.device:
    """'auto' -> cuda when available, else cpu; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked for but torch.cuda.is_available() is False")
    return dev


def set_strict_fp32() -> dict[str, str]:
    """Make float32 matmuls (and cuDNN convs) true IEEE float32: no TF32.

    torch >= 2.9 has the fp32_precision API and raises a RuntimeError when the
    legacy flags (allow_tf32, set_float32_matmul_precision) and the new ones
    are mixed, so there only the new API is used. Older torch gets the legacy
    calls. Returns the resulting settings, for the metadata.
    """
    state: dict[str, str] = {}
    if hasattr(torch.backends, "fp32_precision"):
        targets = [
            ("backends", torch.backends),
            ("cuda.matmul", torch.backends.cuda.matmul),
            ("cudnn", torch.backends.cudnn),
            ("cudnn.conv", getattr(torch.backends.cudnn, "conv", None)),
            ("cudnn.rnn", getattr(torch.backends.cudnn, "rnn", None)),
        ]
        for label, obj in targets:
            if obj is None:
                continue
            try:
                setattr(obj, "fp32_precision", "ieee")
                state[f"{label}.fp32_precision"] = str(getattr(obj, "fp32_precision"))
            except Exception as exc:  # noqa: BLE001 - record and go on
                state[f"{label}.fp32_precision"] = f"error: {exc}"
        if state.get("cuda.matmul.fp32_precision") != "ieee":
            raise RuntimeError(f"could not disable TF32 for cuBLAS matmul: {state}")
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        state["cuda.matmul.allow_tf32"] = str(torch.backends.cuda.matmul.allow_tf32)
        state["cudnn.allow_tf32"] = str(torch.backends.cudnn.allow_tf32)
        state["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    return state


# --------------------------------------------------------------------------
# seeding and weights
# --------------------------------------------------------------------------


def generator(seed: int) -> torch.Generator:
    """A CPU generator: CPU streams are the same on every machine."""
    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    return g


def random_ids(seed: int, vocab_size: int, min_len: int, max_len: int) -> torch.Tensor:
    """int64 [1, T] token ids, T uniform in [min_len, max_len], from one seed."""
    g = generator(seed)
    t = int(torch.randint(min_len, max_len + 1, (1,), generator=g).item())
    return torch.randint(0, vocab_size, (1, t), generator=g, dtype=torch.int64)


def default_param_kind(name: str, param: torch.Tensor) -> str:
    """Classify a parameter for reinit_parameters: norm, embedding, matrix or bias."""
    leaf = name.rsplit(".", 1)[-1]
    lname = name.lower()
    if param.ndim == 1 and leaf == "weight" and ("norm" in lname or "ln_" in lname):
        return "norm"
    if param.ndim == 2 and ("embed_tokens" in lname or "wte" in lname or lname.endswith("embedding.weight")):
        return "embedding"
    if param.ndim >= 2:
        return "matrix"
    return "bias"


def reinit_parameters(
    model: torch.nn.Module,
    seed: int,
    *,
    matrix_gain: float = 1.0,
    embed_std: float = 1.0,
    norm_jitter: float = 0.1,
    bias_std: float = 0.02,
    kind_fn: Callable[[str, torch.Tensor], str] = default_param_kind,
    std_overrides: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Re-initialise every parameter from one seeded CPU generator.

    Parameters are visited in sorted name order, so the values do not depend
    on module registration order; a tied parameter is drawn once, under the
    name named_parameters() gives it (for a tied lm_head: the embedding's).
    Kinds (see default_param_kind):
      norm      -> 1 + norm_jitter * N(0,1)   (a skipped or misapplied norm shows)
      embedding -> embed_std * N(0,1)
      matrix    -> matrix_gain / sqrt(fan_in) * N(0,1), fan_in = prod(shape[1:])
      bias      -> bias_std * N(0,1)
    std_overrides maps a substring of a parameter name to a fixed std (N(0,std)),
    checked first. Returns a log of what was done.
    """
    g = generator(seed)
    log: list[dict[str, Any]] = []
    params = sorted(model.named_parameters(), key=lambda kv: kv[0])
    with torch.no_grad():
        for name, p in params:
            shape = tuple(p.shape)
            noise = torch.randn(shape, generator=g, dtype=torch.float32)
            std: float
            kind = None
            if std_overrides:
                for key, value in std_overrides.items():
                    if key in name:
                        kind, std = "override", float(value)
                        value_t = noise * std
                        break
            if kind is None:
                kind = kind_fn(name, p)
                if kind == "norm":
                    std = norm_jitter
                    value_t = 1.0 + norm_jitter * noise
                elif kind == "embedding":
                    std = embed_std
                    value_t = embed_std * noise
                elif kind == "matrix":
                    fan_in = int(math.prod(shape[1:]))
                    std = matrix_gain / math.sqrt(fan_in)
                    value_t = noise * std
                elif kind == "bias":
                    std = bias_std
                    value_t = bias_std * noise
                else:
                    raise ValueError(f"unknown parameter kind {kind!r} for {name}")
            p.copy_(value_t.to(device=p.device, dtype=p.dtype))
            log.append({"name": name, "kind": kind, "shape": list(shape), "std": std})
    return log


# --------------------------------------------------------------------------
# greedy decoding helpers
# --------------------------------------------------------------------------


def top2_gap(logits: torch.Tensor) -> float:
    """logit(top-1) - logit(top-2) of a 1-D logits vector."""
    top = torch.topk(logits.detach().float().reshape(-1), 2).values
    return float(top[0] - top[1])


# --------------------------------------------------------------------------
# safetensors and files
# --------------------------------------------------------------------------


def _meta_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value)


def save_tensors(path: str, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> None:
    """Write tensors (moved to CPU, contiguous) with string metadata."""
    clean = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    meta = {str(k): _meta_str(v) for k, v in metadata.items()}
    save_file(clean, path, metadata=meta)


def write_json(path: str, obj: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def checkpoint_files(model_dir: str) -> tuple[list[str], dict[str, Any] | None]:
    """The weight files of a checkpoint dir (base names) and its index, if any."""
    index_path = os.path.join(model_dir, INDEX_NAME)
    if os.path.exists(index_path):
        index = read_json(index_path)
        files = sorted(set(index["weight_map"].values()))
        return files, index
    if os.path.exists(os.path.join(model_dir, SINGLE_WEIGHTS_NAME)):
        return [SINGLE_WEIGHTS_NAME], None
    return [], None


def load_checkpoint(model_dir: str) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint dir (single file or sharded), on CPU."""
    files, index = checkpoint_files(model_dir)
    if not files:
        raise FileNotFoundError(f"no {SINGLE_WEIGHTS_NAME} or {INDEX_NAME} in {model_dir}")
    out: dict[str, torch.Tensor] = {}
    where: dict[str, str] = {}
    for fname in files:
        part = load_file(os.path.join(model_dir, fname), device="cpu")
        for k, v in part.items():
            if k in out:
                raise ValueError(f"tensor {k} is in more than one shard ({where[k]}, {fname})")
            out[k] = v
            where[k] = fname
    if index is not None:
        wm = index["weight_map"]
        if set(wm) != set(out):
            raise ValueError(
                f"index weight_map and shard contents differ: only in index {sorted(set(wm) - set(out))}, "
                f"only in shards {sorted(set(out) - set(wm))}"
            )
        wrong = sorted(k for k, fname in wm.items() if where[k] != fname)
        if wrong:
            raise ValueError(f"index names the wrong shard for {wrong}")
    return out


def remove_weight_files(model_dir: str) -> None:
    """Delete model.safetensors, model-xxxxx-of-yyyyy.safetensors and the index."""
    for fname in os.listdir(model_dir):
        if fname in (SINGLE_WEIGHTS_NAME, INDEX_NAME) or SHARD_RE.match(fname):
            os.remove(os.path.join(model_dir, fname))


def write_sharded_checkpoint(
    state: dict[str, torch.Tensor], model_dir: str, max_shard_bytes: int, metadata: dict[str, str] | None = None
) -> list[str]:
    """Write state as model-0000i-of-0000n.safetensors shards plus the index.

    The same layout transformers' save_pretrained writes: tensors packed in
    order into shards of at most max_shard_bytes (a larger tensor gets a shard
    of its own), and model.safetensors.index.json with metadata.total_size and
    weight_map. Replaces any weight files already in model_dir.
    """
    groups: list[list[str]] = []
    current: list[str] = []
    current_bytes = 0
    total = 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        total += nbytes
        if current and current_bytes + nbytes > max_shard_bytes:
            groups.append(current)
            current, current_bytes = [], 0
        current.append(name)
        current_bytes += nbytes
    if current:
        groups.append(current)
    if len(groups) < 2:
        raise ValueError(f"max_shard_bytes={max_shard_bytes} gives {len(groups)} shard(s); lower it")
    remove_weight_files(model_dir)
    n = len(groups)
    weight_map: dict[str, str] = {}
    names: list[str] = []
    for i, group in enumerate(groups, start=1):
        fname = f"model-{i:05d}-of-{n:05d}.safetensors"
        names.append(fname)
        save_file(
            {k: state[k].detach().to("cpu").contiguous() for k in group},
            os.path.join(model_dir, fname),
            metadata=metadata or {"format": "pt"},
        )
        for k in group:
            weight_map[k] = fname
    write_json(
        os.path.join(model_dir, INDEX_NAME),
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
    )
    return names


def dir_bytes(model_dir: str, names: Iterable[str]) -> int:
    return sum(os.path.getsize(os.path.join(model_dir, n)) for n in names)


# --------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def ensure_config_keys(model_dir: str, required: dict[str, Any]) -> list[str]:
    """Check config.json against required values and add the keys it lacks.

    transformers writes only the keys that differ from some default, and which
    defaults it compares against has changed between versions; real Hub
    checkpoints spell their architecture out. A key that is present with
    another value is an error (the saved model is not the one asked for).
    Returns the keys that were added.
    """
    path = os.path.join(model_dir, "config.json")
    cfg = read_json(path)
    added: list[str] = []
    for key, want in required.items():
        if key not in cfg:
            cfg[key] = want
            added.append(key)
        elif not _same(cfg[key], want):
            raise ValueError(f"{path}: {key} is {cfg[key]!r}, expected {want!r}")
    if added:
        write_json(path, cfg)
    return added


# --------------------------------------------------------------------------
# manifest
# --------------------------------------------------------------------------


def update_manifest(out_dir: str, entries: list[dict[str, Any]], generator_name: str) -> str:
    """Merge case entries into OUT/manifest.json, keyed by case name.

    Entries of other cases (e.g. written by a sibling generator for another
    model family) are kept; entries of the same name are replaced.
    """
    path = os.path.join(out_dir, "manifest.json")
    manifest: dict[str, Any] = {"format": FORMAT, "cases": []}
    if os.path.exists(path):
        try:
            old = read_json(path)
            if isinstance(old, dict) and isinstance(old.get("cases"), list):
                manifest = old
        except (OSError, ValueError):
            pass
    by_name = {c["name"]: c for c in manifest["cases"] if isinstance(c, dict) and "name" in c}
    order = [c["name"] for c in manifest["cases"] if isinstance(c, dict) and "name" in c]
    for e in entries:
        if e["name"] not in by_name:
            order.append(e["name"])
        by_name[e["name"]] = e
    manifest["format"] = FORMAT
    manifest["cases"] = [by_name[n] for n in order]
    gens = manifest.get("generators", {})
    if not isinstance(gens, dict):
        gens = {}
    gens[generator_name] = {"versions": versions(), "argv": sys.argv[1:]}
    manifest["generators"] = gens
    write_json(path, manifest)
    return path
