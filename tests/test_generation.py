"""Greedy generation: batched equals one at a time, stop reasons, post-processing, scores."""

import numpy as np
import pandas as pd
import pytest
import torch

from attnscope import generation, models, prompts
from attnscope.models import build_tiny_random
from tests.conftest import tiny_spec

SHOTS = [("Parrot", "Mimics you, but doesn't understand."), ("Salmon", "Jumps upstream, but never down.")]


def prompt_ids(tokenizer, targets, shots=SHOTS):
    out = []
    for i, target in enumerate(targets):
        text, spans = prompts.render(tokenizer, prompts.conversation("Animals", shots[: 1 + i % 2], target))
        out.append(prompts.tokenize(tokenizer, text, spans).input_ids)
    return out


@pytest.fixture(scope="module")
def spread_llama(tmp_path_factory):
    """A tiny random Llama with a wide init, so greedy choices are not near-ties."""
    return build_tiny_random(
        tiny_spec("llama", "smollm2", hidden_size=96, num_heads=6, initializer_range=0.5),
        tmp_path_factory.mktemp("tok"),
    )


SPREAD_TARGETS = ["Ant", "Hippopotamus", "Bee", "Grizzlybear", "Fox", "Koi", "Axolotl"]


@pytest.fixture(scope="module")
def sequential(spread_llama):
    """end marker -> the clues of :data:`SPREAD_TARGETS` generated one prompt at a time, each checked
    against a reference computed another way: HF's own greedy generate, one prompt at a time
    (computed once per end marker; the cases below compare their routes with it)."""
    model, tokenizer = spread_llama
    ids = prompt_ids(tokenizer, SPREAD_TARGETS)
    found = {}

    def clues(end_marker: str) -> list[generation.Generation]:
        if end_marker not in found:
            found[end_marker] = generation.generate(
                model,
                tokenizer,
                ids,
                max_new_tokens=12,
                batch_size=1,
                progress=False,
                share_prefix=False,
                end_marker=end_marker,
            )
            # An explicit mask: SmolLM2's pad token <|im_end|> also ends every turn inside the prompt.
            for prompt, result in zip(ids, found[end_marker]):
                out = model.generate(
                    torch.tensor([prompt]),
                    attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                    max_new_tokens=len(result.generated_ids),
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=None,
                )
                assert out[0, len(prompt) :].tolist() == result.generated_ids
        return found[end_marker]

    return clues


@pytest.mark.routes
@pytest.mark.parametrize(("batch_size", "share_prefix"), [(3, True), (8, True), (8, False), (1, True)])
def test_batched_equals_sequential(spread_llama, sequential, batch_size, share_prefix):
    """Batched, behind a shared prefix or not, gives one-prompt-at-a-time's tokens."""
    model, tokenizer = spread_llama
    ids = prompt_ids(tokenizer, SPREAD_TARGETS)
    assert len({len(p) for p in ids}) > 2, "prompts of different lengths need padding"
    assert generation.shared_prefix_length(ids) > 20, "the chat template and instruction are shared"
    ids = [np.asarray(p) for p in ids] if share_prefix else ids  # as read from the prompt table
    # With "g" as the end marker the random model's clues end at different steps (2 to 12), so
    # rows leave early and, at batch size 3, the next prompts join the running ones.
    end_marker = "g" if batch_size == 3 else generation.END_MARK
    calls = []  # (rows, new tokens) of each model call
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        batched = generation.generate(
            model,
            tokenizer,
            ids,
            max_new_tokens=12,
            batch_size=batch_size,
            progress=False,
            share_prefix=share_prefix,
            end_marker=end_marker,
        )
    finally:
        handle.remove()
    if batch_size == 3:  # prompts joined running ones: a prefill, then a step with more rows than it
        joined = [(a, b) for a, b in zip(calls, calls[1:]) if a[1] > 1 and b[1] == 1 and b[0] > a[0]]
        assert joined, calls
    alone = sequential(end_marker)
    assert [g.generated_ids for g in batched] == [g.generated_ids for g in alone]
    assert [g.stop_reason for g in batched] == [g.stop_reason for g in alone]


def force_token_at_step(model, token_id: int, step: int):
    """A forward hook on the LM head that makes ``token_id`` the greedy choice at ``step``."""
    calls = {"n": 0}

    def hook(module, inputs, output):
        calls["n"] += 1
        if calls["n"] == step:
            output[..., token_id] += 1e4
        return output

    return model.lm_head.register_forward_hook(hook)


@pytest.mark.parametrize(("token", "reason"), [("#", generation.STOP_MARK), ("<|im_end|>", generation.EOS)])
def test_stop_reasons(spread_llama, token, reason):
    model, tokenizer = spread_llama
    token_id = tokenizer.convert_tokens_to_ids(token)
    ids = prompt_ids(tokenizer, ["Ant"])
    free = generation.generate(model, tokenizer, ids, max_new_tokens=3, progress=False)[0]
    assert token_id not in free.generated_ids[:3]
    handle = force_token_at_step(model, token_id, step=3)
    try:
        # One prompt: no shared prefix, so the hook counts decoding steps only.
        result = generation.generate(
            model, tokenizer, ids, max_new_tokens=10, progress=False, share_prefix=False
        )[0]
    finally:
        handle.remove()
    assert result.stop_reason == reason
    assert result.generated_ids == free.generated_ids[:2] + [token_id]
    assert result.raw_text == tokenizer.decode(result.generated_ids, skip_special_tokens=True)
    assert result.clue == generation.postprocess(result.raw_text)
    assert "#" not in result.clue and "<|im_end|>" not in result.raw_text
    if free.stop_reason == generation.MAX_NEW_TOKENS:
        assert len(free.generated_ids) == 3


@pytest.mark.parametrize(
    ("raw", "clue"),
    [
        (" Small, yet mighty.# extra", "Small, yet mighty."),
        ("Line one\nline two#", "Line one"),
        ("#", ""),
        ("  no mark at all  ", "no mark at all"),
        ("\nAfter a newline.#", "After a newline."),
    ],
)
def test_postprocess_like_the_thesis(raw, clue):
    assert generation.postprocess(raw) == clue


@pytest.mark.parametrize(
    ("raw", "end_marker", "clue"),
    [
        ("hot ||| cold", "|||", "hot"),
        ("hot # cold|||", "|||", "hot # cold"),
        (" hot #\nnext", None, "hot #"),
    ],
)
def test_postprocess_with_another_end_marker(raw, end_marker, clue):
    assert generation.postprocess(raw, end_marker) == clue


@pytest.mark.parametrize(
    ("raw", "thesis", "ours"),
    [
        ("1. Tiny toiler#", "Tiny toiler", "1. Tiny toiler"),
        ("Builds hills (ant) (#", "Builds hills (ant", "Builds hills (ant) ("),
        ("Small, yet mighty.):(\nmore", "Small, yet mighty.", "Small, yet mighty.):("),
        ("Lifts ten times its weight#", "Lifts ten times its weight", "Lifts ten times its weight"),
        ("(", "(", "("),
    ],
)
def test_postprocess_thesis_clean_up(raw, thesis, ours):
    """generation.clean_up: thesis drops the notebook's "1. " and ")?(" remnants; the default keeps them."""
    assert generation.postprocess(raw, clean_up="thesis") == thesis
    assert generation.postprocess(raw) == ours


def test_generation_stops_at_the_formats_end_marker(spread_llama):
    """A format's own end marker stops generation; the thesis's "#" then does not."""
    model, tokenizer = spread_llama
    ids = prompt_ids(tokenizer, ["Ant"])
    hash_id = tokenizer.convert_tokens_to_ids("#")
    runs = []
    for end_marker in ("#", "@@"):
        handle = force_token_at_step(model, hash_id, step=2)
        try:
            run = generation.generate(
                model,
                tokenizer,
                ids,
                max_new_tokens=6,
                progress=False,
                end_marker=end_marker,
                share_prefix=False,
            )
            runs.append(run[0])
        finally:
            handle.remove()
    thesis, other = runs
    assert thesis.stop_reason == generation.STOP_MARK and len(thesis.generated_ids) == 2
    assert other.stop_reason != generation.STOP_MARK and len(other.generated_ids) > 2
    assert other.generated_ids[1] == hash_id and "#" in other.clue


def test_shared_prefix_leaves_every_prompt_a_token():
    assert generation.shared_prefix_length([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert generation.shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2
    assert generation.shared_prefix_length([[1, 2, 3]]) == 2
    assert generation.shared_prefix_length([[7, 2], [1, 2]]) == 0


def test_length_batches_group_similar_lengths():
    batches = generation.length_batches([5, 1, 9, 2, 7, 3], 2)
    assert batches == [[1, 3], [5, 0], [4, 2]]


@pytest.mark.parametrize(
    ("fmt", "format_ok"),
    [
        (prompts.THESIS_FORMAT, [True, False, False]),
        (prompts.PromptFormat(shot_assistant="{clue}", end_marker=None), [False, False, True]),
    ],
)
def test_clue_table_and_summary_scores(fmt, format_ok):
    table = pd.DataFrame(
        {
            "prompt_index": [0, 1, 2],
            "prompt_id": ["e/0", "e/1", "e/2"],
            "experiment": "e",
            "category": "Animals",
            "k": 3,
            "target": ["Ant", "Bee", "Fox"],
            "reference_clue": ["Tiny worker.", None, "Sly and red."],
            "prompt_format": fmt.to_json(),
        }
    )
    results = [
        generation.Generation([1, 2], "Tiny worker.#", "Tiny worker.", generation.STOP_MARK, 0.1),
        generation.Generation([3], "A bee buzzes", "A bee buzzes", generation.MAX_NEW_TOKENS, 0.2),
        generation.Generation([4], "", "", generation.EOS, 0.3),
    ]
    clues = generation.clue_table(table, results)
    assert clues["format_ok"].tolist() == format_ok
    assert clues["answer_leak"].tolist() == [False, True, False]
    assert clues["chrf"][0] == pytest.approx(100.0) and pd.isna(clues["chrf"][1])
    summary = generation.summarize(clues)
    assert summary["format_compliance"] == pytest.approx(sum(format_ok) / 3)
    assert summary["answer_leak_rate"] == pytest.approx(1 / 3)
    assert summary["empty_clue_rate"] == pytest.approx(1 / 3)
    assert summary["with_reference"] == 2
    assert summary["mean_clue_words"] == pytest.approx(5 / 3)


def test_context_overflow_is_a_clear_error():
    table = pd.DataFrame({"experiment": ["animals-k8"], "target": ["Ant"], "n_tokens": [4000]})
    with pytest.raises(ValueError, match="animals-k8.*'Ant'.*4000 tokens.*max_new_tokens=200"):
        generation.check_context(table, 200, {"name": "tiny", "max_position_embeddings": 4096})
    generation.check_context(table, 96, {"name": "tiny", "max_position_embeddings": 4096})


@pytest.mark.routes
@pytest.mark.integration
@pytest.mark.parametrize("k", [3, 8])
def test_shared_prefix_gives_the_same_clues_on_the_embedded_model(embedded_model_dir, sample_clues, k):
    """The rule's route (batched behind the shared prefix) equals one prompt at a time, token for token."""
    loaded = models.load_model(embedded_model_dir)
    targets = ["Ant", "Bee", "Hippopotamus", "Fox", "Raven", "Tarantula"]
    table = prompts.build_prompts(
        sample_clues, f"animals-k{k}", {"category": "Animals", "k": k, "seed": 0}, targets, loaded.tokenizer
    )
    ids = list(table["input_ids"])
    assert generation.shared_prefix_length(ids) >= 50
    shared = generation.generate(loaded.model, loaded.tokenizer, ids, 24, batch_size=4, progress=False)
    alone = generation.generate(
        loaded.model, loaded.tokenizer, ids, 24, batch_size=1, progress=False, share_prefix=False
    )
    assert [g.generated_ids for g in shared] == [g.generated_ids for g in alone]
    assert [g.clue for g in shared] == [g.clue for g in alone]
