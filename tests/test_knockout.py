"""Attention knockout: the variant grammar, the edge sets, and the blocking in both capture routes,
under a KV cache, on the Llama and Gemma 3 families."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import DynamicCache

from attnscope import architecture, capture, edgesets, generation, knockout, prompts, variants
from attnscope.store import INSTRUCTION_SEGMENT, SHOT_CLUE, SHOT_WORD, TARGET

SPEC = {"category": "Animals", "k": 3, "seed": 0}
CLUE = "Tiny and busy."


@pytest.fixture(params=["tiny_llama", "tiny_gemma"])
def family(request):
    """(model, tokenizer, annotation, n_prompt): each family's model with a prompt and a clue appended."""
    model, tokenizer = request.getfixturevalue(request.param)
    sample_clues = request.getfixturevalue("sample_clues")
    row = prompts.build_prompts(sample_clues, "animals-k3", SPEC, ["Ant"], tokenizer).iloc[0]
    annotation = prompts.prompt_annotation(row)
    clue_ids = tokenizer.encode(CLUE, add_special_tokens=False)
    annotation = prompts.annotate_generated(tokenizer, annotation, clue_ids, CLUE)
    return model, tokenizer, annotation, int(row["n_tokens"])


def forward(model, ids, blocker=None) -> torch.Tensor:
    """The logits [position, vocab] of one sequence (inside ``blocker`` if given)."""
    with torch.inference_mode(), blocker or nullcontext():
        return model(input_ids=torch.tensor([list(ids)])).logits[0]


def captured(model, ids, kernel, blocker=None) -> list[torch.Tensor]:
    """Every layer's probabilities [head, query, key] through a capture route (inside ``blocker``)."""
    maps = {}
    with (
        torch.inference_mode(),
        capture.capture(model, lambda layer, w: maps.__setitem__(layer, w.clone()), kernel),
    ):
        forward(model, ids, blocker)
    return [maps[layer] for layer in sorted(maps)]


def test_a_knockout_edits_no_weights_and_is_not_loaded_as_a_model(prepared_tiny_mistral):
    from attnscope import models

    model = models.load_model(prepared_tiny_mistral, "trained").model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    variants.apply_edit(model, variants.parse("knockout-target-shotwords-L0-1"))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="knockout-target-shotwords-L0-1.*knockout.applied"):
        models.load_model(prepared_tiny_mistral, "knockout-target-shotwords-L0-1")


# --- the edge sets ---


def reference_edges(annotation: prompts.Annotation, n_prompt: int, edges: str) -> np.ndarray:
    """The named edge set by its definition, pair by pair, over the prompt and what follows it."""
    seg, shot = annotation.token_segment, annotation.token_shot
    first_target = seg.index(TARGET)
    key_segment = {
        "target-shots": (SHOT_WORD, SHOT_CLUE),
        "target-shotwords": (SHOT_WORD,),
        "target-shotclues": (SHOT_CLUE,),
        "target-instruction": (INSTRUCTION_SEGMENT,),
    }
    n = len(seg)
    out = np.zeros((n, n), dtype=bool)
    for q in range(n):
        for k in range(min(q, n_prompt)):
            if edges in key_segment:
                out[q, k] = q >= first_target and seg[k] in key_segment[edges]
            elif edges == "across-shots":
                out[q, k] = q < n_prompt and 0 < shot[k] < shot[q]
            else:
                out[q, k] = (
                    q < n_prompt and seg[q] == SHOT_CLUE and seg[k] == SHOT_WORD and shot[q] == shot[k] > 0
                )
    return out


@pytest.mark.parametrize("edges", variants.EDGE_SETS)
def test_named_edge_sets_are_their_definitions(tiny_llama, sample_clues, edges):
    _, tokenizer = tiny_llama
    row = prompts.build_prompts(sample_clues, "animals-k3", SPEC, ["Ant"], tokenizer).iloc[0]
    annotation = prompts.annotate_generated(
        tokenizer, prompts.prompt_annotation(row), tokenizer.encode(CLUE, add_special_tokens=False), CLUE
    )
    n_prompt, n = int(row["n_tokens"]), len(annotation.input_ids)
    blocked = edgesets.named_edges(annotation, n_prompt, edges).dense(n)
    expected = reference_edges(annotation, n_prompt, edges)
    assert expected.any()
    np.testing.assert_array_equal(blocked, expected)


def control_faults(annotation: prompts.Annotation, n_prompt: int, drawn: np.ndarray) -> dict[str, int]:
    """The edges of a control (dense [query, key]) that a matched control never blocks: the first
    token, the target word, a key of the query's own segment run."""
    segment = np.asarray(annotation.token_segment)
    runs = edgesets.segment_runs(annotation, n_prompt)
    queries, keys = np.nonzero(drawn[:n_prompt])
    return {
        "first token": int(drawn[:, 0].sum()),
        "target word": int(drawn[:, segment[: drawn.shape[1]] == TARGET].sum()),
        "own segment": int((runs[queries] == runs[keys]).sum()),
    }


def unmatched_control(named: np.ndarray, seed: int) -> np.ndarray:
    """The former control, built to be wrong: per row as many keys drawn from every earlier key
    outside the set but the first, whatever their segment or distance."""
    rng = np.random.default_rng(seed)
    drawn = np.zeros_like(named)
    for query in np.flatnonzero(named.any(axis=1)):
        pool = np.flatnonzero(~named[query, :query])
        pool = pool[pool > 0]
        drawn[query, rng.choice(pool, size=int(named[query].sum()), replace=False)] = True
    return drawn


def annotated(tokenizer, sample_clues) -> tuple[prompts.Annotation, prompts.Annotation, int]:
    """The Ant prompt's annotation, the same with a clue appended, and the prompt's length."""
    row = prompts.build_prompts(sample_clues, "animals-k3", SPEC, ["Ant"], tokenizer).iloc[0]
    plain = prompts.prompt_annotation(row)
    appended = prompts.annotate_generated(
        tokenizer, plain, tokenizer.encode(CLUE, add_special_tokens=False), CLUE
    )
    return plain, appended, int(row["n_tokens"])


@pytest.mark.parametrize("edges", variants.EDGE_SETS)
def test_the_random_control_is_matched_to_its_set_and_seeded(tiny_llama, sample_clues, edges):
    """Row by row as many keys as the set, none of the set's, never the first token, the target word
    or the query's own segment; the former control, drawn from every earlier key, is caught."""
    plain, appended, n_prompt = annotated(tiny_llama[1], sample_clues)
    n = len(appended.input_ids)
    named = edgesets.named_edges(plain, n_prompt, edges).dense(n)

    def control(seed: int, annotation=plain) -> np.ndarray:
        variant = variants.parse(f"knockout-control-{edges}-s0-4-L0-0")
        return edgesets.blocked_edges(annotation, n_prompt, variant, seed).dense(n)

    drawn = control(0)
    np.testing.assert_array_equal(drawn.sum(axis=1), named.sum(axis=1))  # row by row, so in all
    assert not (drawn & named).any()
    assert not np.triu(drawn).any()  # earlier keys only, never the query itself
    assert control_faults(appended, n_prompt, drawn) == dict.fromkeys(
        ["first token", "target word", "own segment"], 0
    )
    np.testing.assert_array_equal(control(0, appended), drawn)  # the appended clue changes no draw
    assert (control(1) != drawn).any()
    if edges in ("target-shots", "target-shotwords"):  # the set the former control was faulted for
        faults = [control_faults(appended, n_prompt, unmatched_control(named, seed)) for seed in range(50)]
        assert sum(f["target word"] + f["own segment"] for f in faults) > 0


def decaying_maps(n: int, scale: float) -> list[np.ndarray]:
    """One layer, one head of attention that decays with distance, e^(−d/scale), over earlier keys."""
    distance = np.arange(n)[:, None] - np.arange(n)[None, :]
    weights = np.where(distance >= 0, np.exp(-distance / scale), 0.0)
    return [(weights / weights.sum(axis=1, keepdims=True))[None]]


@pytest.mark.parametrize("edges", ["target-shots", "target-shotwords"])
def test_the_control_blocks_about_the_mass_of_its_set_where_attention_follows_distance(
    tiny_llama, sample_clues, edges
):
    """Attention that depends on distance alone: the control drawn stratum by stratum of distance
    blocks, over five seeds, the set's attention mass within 20 %; the former control, drawn from
    every earlier key (near ones included), does not (1.3× and 5× on this prompt)."""
    plain, appended, n_prompt = annotated(tiny_llama[1], sample_clues)
    n = len(appended.input_ids)
    maps = decaying_maps(n, 8.0)
    named = edgesets.named_edges(plain, n_prompt, edges)
    variant = variants.parse(f"knockout-control-{edges}-s0-4-L0-0")
    own = knockout.blocked_mass(maps, named.dense(n))
    drawn = [edgesets.blocked_edges(plain, n_prompt, variant, s).dense(n) for s in variant.seeds]
    matched = np.mean([knockout.blocked_mass(maps, d) for d in drawn])
    former = np.mean([knockout.blocked_mass(maps, unmatched_control(named.dense(n), s)) for s in range(5)])
    assert own > 0.001
    assert abs(matched / own - 1) < 0.2, (matched, own)
    assert abs(former / own - 1) > 0.2, (former, own)


def test_blocked_mass_is_the_mean_row_mass_on_the_blocked_keys():
    maps = [np.array([[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]]), np.full((1, 3, 3), 1 / 3)]
    blocked = np.zeros((3, 3), dtype=bool)
    blocked[2, 0] = blocked[2, 1] = True
    assert knockout.blocked_mass(maps, blocked) == pytest.approx((0.5 + 2 / 3) / 2)
    last_rows = [m[:, 1:] for m in maps]  # maps of the queries after a prefix of one token
    assert knockout.blocked_mass(last_rows, blocked) == knockout.blocked_mass(maps, blocked)
    blocked[1, 0] = True
    assert knockout.blocked_mass(last_rows, blocked) == pytest.approx((0.5 + 0.5 + 1 / 3 + 2 / 3) / 4)
    blocked[0, 0] = True  # a query before the maps' first loses a key: its mass is not in them
    with pytest.raises(ValueError, match="from query 1 on"):
        knockout.blocked_mass(last_rows, blocked)


def test_layer_maps_after_a_prefix_are_the_whole_passs_last_rows(tiny_llama):
    """The maps of a pass continued from a prompt's KV cache are the whole pass's rows of the queries
    after it (over every key) to float32 rounding; a prefix that is not the sequence's start is refused."""
    model, _ = tiny_llama
    ids = list(range(5, 45))
    whole = knockout.layer_maps(model, ids, [0, 1])
    prefix = knockout.context_prefix(model, ids, 25)
    continued = knockout.layer_maps(model, ids, [0, 1], prefix)
    for got, expected in zip(continued, whole, strict=True):
        assert got.shape == (expected.shape[0], 15, 40)
        np.testing.assert_allclose(got, expected[:, 25:], rtol=0, atol=1e-6)
    assert prefix.cache.get_seq_length() == 25  # the prefix is copied, not continued
    with pytest.raises(ValueError, match="not the first"):
        knockout.layer_maps(model, [9, *ids[1:]], [0], prefix)


# --- the blocking ---


def everything_but_self(n_prompt: int) -> edgesets.BlockedEdges:
    """Every earlier key of the prompt blocked, for the prompt's queries and those after it."""
    return edgesets.BlockedEdges(np.tri(n_prompt, k=-1, dtype=bool), np.ones(n_prompt, dtype=bool))


@pytest.mark.parametrize("kernel", capture.KERNELS)
def test_an_empty_layer_range_changes_nothing(family, kernel):
    model, _, annotation, n_prompt = family
    blocked = edgesets.named_edges(annotation, n_prompt, "target-shotwords")
    ids = annotation.input_ids
    trained = captured(model, ids, kernel)
    empty = captured(model, ids, kernel, knockout.Knockout(model, blocked, range(1, 1)))
    assert all(torch.equal(a, b) for a, b in zip(trained, empty))
    assert torch.equal(forward(model, ids), forward(model, ids, knockout.Knockout(model, blocked, [])))


@pytest.mark.routes
@pytest.mark.parametrize("kernel", capture.KERNELS)
def test_blocked_edges_are_zero_and_the_rest_renormalised(family, kernel):
    """Knocked out in the last layer only, whose input is the trained model's: its map is the trained
    map with the blocked edges set to zero and each row divided by what is left of it."""
    model, _, annotation, n_prompt = family
    ids, last = annotation.input_ids, model.config.num_hidden_layers - 1
    variant = variants.parse(f"knockout-target-shotwords-L{last}-{last}")
    blocked = torch.from_numpy(edgesets.blocked_edges(annotation, n_prompt, variant).dense(len(ids)))
    trained = captured(model, ids, kernel)
    knocked = captured(model, ids, kernel, knockout.applied(model, variant, annotation, n_prompt))
    for before, after in zip(trained[:last], knocked[:last]):
        assert torch.equal(before, after)
    assert float(knocked[last][:, blocked].abs().max()) == 0.0
    kept = trained[last].masked_fill(blocked, 0.0)
    expected = kept / kept.sum(dim=-1, keepdim=True)
    assert float((trained[last][:, blocked]).max()) > 1e-4, "the trained map uses the blocked edges"
    torch.testing.assert_close(knocked[last], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", capture.KERNELS)
def test_blocking_every_key_but_the_query_gives_one_hot_maps(family, kernel):
    model, _, annotation, n_prompt = family
    ids = annotation.input_ids
    layers = range(model.config.num_hidden_layers)
    maps = captured(model, ids, kernel, knockout.Knockout(model, everything_but_self(n_prompt), layers))
    one_hot = torch.eye(len(ids))[:n_prompt]
    for layer_map in maps:  # the prompt's queries keep only themselves, the clue's only the clue
        assert torch.equal(layer_map[:, :n_prompt], one_hot.expand(layer_map.shape[0], -1, -1))
        assert float(layer_map[:, n_prompt:, :n_prompt].abs().max()) == 0.0


@pytest.mark.parametrize("kernel", capture.KERNELS)
def test_blocking_edges_no_head_uses_leaves_the_output_unchanged(family, kernel):
    """Keys after the query carry zero weight in every head (causal mask): blocking them changes no logit."""
    model, _, annotation, n_prompt = family
    ids = annotation.input_ids[:n_prompt]
    future = edgesets.BlockedEdges(
        np.triu(np.ones((n_prompt, n_prompt), dtype=bool), k=1), np.zeros(n_prompt, bool)
    )
    layers = range(model.config.num_hidden_layers)
    trained = captured(model, ids, kernel)
    unchanged = captured(model, ids, kernel, knockout.Knockout(model, future, layers))
    for before, after in zip(trained, unchanged):
        torch.testing.assert_close(after, before, rtol=0, atol=1e-6 if kernel == "sdpa" else 0)
    with capture.capture(model, lambda *_: None, kernel):
        torch.testing.assert_close(
            forward(model, ids, knockout.Knockout(model, future, layers)),
            forward(model, ids),
            rtol=0,
            atol=1e-5,
        )


@pytest.mark.parametrize("kernel", capture.KERNELS)
def test_blocking_keys_outside_a_sliding_window_leaves_the_output_unchanged(tiny_gemma, sample_clues, kernel):
    """Gemma 3's layer 0 sees only its last W keys: blocking the keys before them there changes nothing,
    while blocking the same edges in the global layer 1, which uses them, does."""
    model, tokenizer = tiny_gemma
    ids = prompts.build_prompts(sample_clues, "animals-k3", SPEC, ["Ant"], tokenizer)["input_ids"][0]
    window, n = model.config.sliding_window, len(ids)
    assert architecture.sliding_windows(model.config) == {0: window} and n > window
    outside = edgesets.BlockedEdges(np.tri(n, k=-window, dtype=bool), np.zeros(n, dtype=bool))
    with capture.capture(model, lambda *_: None, kernel):
        trained = forward(model, ids)
        torch.testing.assert_close(
            forward(model, ids, knockout.Knockout(model, outside, [0])), trained, rtol=0, atol=0
        )
        assert not torch.allclose(
            forward(model, ids, knockout.Knockout(model, outside, [1])), trained, atol=1e-4
        )


@pytest.mark.parametrize("edges", ["named", "everything"])
def test_a_knockout_holds_token_by_token_under_a_kv_cache(family, edges):
    """Decoding the clue one token at a time behind a cache (a sliding-window layer's cache keeps only
    its last keys, whose positions the blocking must find) gives the logits of one forward pass over
    prompt and clue, under the same knockout."""
    model, _, annotation, n_prompt = family
    ids, layers = annotation.input_ids, range(model.config.num_hidden_layers)
    blocked = (
        edgesets.named_edges(annotation, n_prompt, "target-shotwords")
        if edges == "named"
        else everything_but_self(n_prompt)
    )
    blocker = knockout.Knockout(model, blocked, layers)
    whole = forward(model, ids, blocker)
    assert not torch.allclose(whole, forward(model, ids), atol=1e-3), "the knockout changes the logits"
    cache = DynamicCache(config=model.config)
    steps = []
    with torch.inference_mode(), blocker:
        out = model(input_ids=torch.tensor([ids[:n_prompt]]), cache=cache, use_cache=True)
        steps.append(out.logits[0, -1])
        for token in ids[n_prompt:-1]:
            steps.append(model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True).logits[0, -1])
    torch.testing.assert_close(torch.stack(steps), whole[n_prompt - 1 : -1], rtol=1e-4, atol=1e-4)


@pytest.mark.routes
def test_greedy_decoding_under_a_knockout_follows_its_teacher_forced_logits(family):
    """Generation (its prefix prefill, KV cache and position ids) inside a knockout writes the argmax
    of one forward pass over prompt and clue under the same knockout, not the trained model's clue."""
    model, tokenizer, annotation, n_prompt = family
    prompt_ids = annotation.input_ids[:n_prompt]
    blocker = knockout.Knockout(model, everything_but_self(n_prompt), range(model.config.num_hidden_layers))

    def greedy() -> list[int]:
        [generated] = generation.generate(
            model, tokenizer, [prompt_ids], max_new_tokens=6, batch_size=1, progress=False, end_marker=None
        )
        return generated.generated_ids

    trained = greedy()
    with blocker:
        knocked = greedy()
    assert knocked != trained
    logits = forward(model, prompt_ids + knocked, blocker)
    assert logits[n_prompt - 1 : -1].argmax(-1).tolist() == knocked


def test_a_batch_is_refused(tiny_llama):
    model, _ = tiny_llama
    blocked = edgesets.BlockedEdges(np.zeros((4, 4), bool), np.zeros(4, bool))
    with pytest.raises(ValueError, match=r"one sequence per row \(1\), not a batch of 2"):
        forward_batch = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]])
        with torch.inference_mode(), knockout.Knockout(model, blocked, [0]):
            model(input_ids=forward_batch)


def test_dense_edges_are_the_pairs_between_every_position():
    """The dense [query, key] matrix of a sequence shorter than, as long as and longer than the
    prompt equals the pairs the masks read position by position."""
    rng = np.random.default_rng(0)
    n = 7
    blocked = edgesets.BlockedEdges(np.tril(rng.random((n, n)) < 0.5, k=-1), rng.random(n) < 0.5)
    for length in (3, n, n + 4):
        positions = torch.arange(length)
        expected = blocked.between(positions, positions).numpy()
        assert np.array_equal(blocked.dense(length), expected)
    assert blocked.dense(n + 4)[n:, :n].any() and not blocked.dense(n + 4)[:, n:].any()


def test_a_query_cannot_block_itself():
    with pytest.raises(ValueError, match="a query must keep its own key"):
        edgesets.BlockedEdges(np.eye(3, dtype=bool), np.zeros(3, dtype=bool))


def test_layers_outside_the_model_are_refused(tiny_llama):
    model, _ = tiny_llama
    with pytest.raises(ValueError, match=r"knockout layers \[2\]: the model has layers 0-1"):
        knockout.Knockout(model, edgesets.BlockedEdges(np.zeros((1, 1), bool), np.zeros(1, bool)), [0, 2])


# --- teacher-forced log-probabilities ---


def test_clue_logprob_is_the_softmax_of_the_logits(family):
    model, tokenizer, annotation, n_prompt = family
    ids = annotation.input_ids
    prompt_ids, clue_ids = ids[:n_prompt], ids[n_prompt:]
    blocker = knockout.applied(model, "knockout-target-shotwords-L0-1", annotation, n_prompt)
    expected = []
    for chosen in (None, blocker):
        rows = forward(model, ids, chosen).double()[n_prompt - 1 : -1]
        expected.append(
            [
                float(row[token] - torch.log(torch.exp(row - row.max()).sum()) - row.max())
                for row, token in zip(rows, clue_ids)
            ]
        )
    got = knockout.clue_logprobs(model, prompt_ids, clue_ids, [None, blocker])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(*got)


@pytest.mark.routes
@pytest.mark.parametrize("edges", ["target-shotwords", "across-shots", "clue-ownword"])
def test_positions_before_the_first_blocked_query_are_shared(family, edges):
    """The prompt's positions before the first blocked query run once, into a cache both contexts
    continue from: the same log-probabilities as whole forward passes, the unchanged context's
    bytes whatever the knockout, and a prefix that reaches past the first blocked query differs."""
    model, tokenizer, annotation, n_prompt = family
    ids = annotation.input_ids
    prompt_ids, clue_ids = ids[:n_prompt], ids[n_prompt:]
    blocker = knockout.Knockout(
        model, edgesets.named_edges(annotation, n_prompt, edges), range(model.config.num_hidden_layers)
    )
    first = knockout.first_blocked_query(blocker.blocked)
    assert 0 < first < n_prompt
    whole = knockout.clue_logprobs(model, prompt_ids, clue_ids, [None, blocker])
    shared = knockout.clue_logprobs(model, prompt_ids, clue_ids, [None, blocker], shared=first)
    np.testing.assert_allclose(shared, whole, rtol=1e-5, atol=1e-5)
    idle = knockout.Knockout(model, blocker.blocked, [])
    unchanged, idle_run = knockout.clue_logprobs(model, prompt_ids, clue_ids, [None, idle], shared=first)
    assert unchanged.tobytes() == idle_run.tobytes() == shared[0].tobytes()
    if edges == "across-shots" and model.config.model_type == "llama":  # tiny Gemma: windows hide shots
        too_far = knockout.clue_logprobs(model, prompt_ids, clue_ids, [blocker], shared=n_prompt - 1)[0]
        assert np.abs(too_far - whole[1]).max() > 1e-3 > np.abs(shared[1] - whole[1]).max()


def test_a_prefix_must_be_the_prompts_first_tokens_before_the_first_blocked_query(family):
    model, tokenizer, annotation, n_prompt = family
    ids = annotation.input_ids
    prompt_ids, clue_ids = ids[:n_prompt], ids[n_prompt:]
    blocker = knockout.applied(model, "knockout-target-shotwords-L0-1", annotation, n_prompt)
    first = knockout.first_blocked_query(blocker.blocked)
    alone = knockout.clue_logprobs(model, prompt_ids, clue_ids, [None, blocker], first)
    prefix = generation.prefill_prefix(model, prompt_ids[:20])
    continued = knockout.clue_logprobs(model, prompt_ids, clue_ids, [None, blocker], first, prefix)
    np.testing.assert_allclose(continued, alone, rtol=1e-5, atol=1e-5)
    assert prefix.cache.get_seq_length() == 20  # the caller's cache is copied, not extended
    with pytest.raises(ValueError, match="not the prompt's first tokens"):
        knockout.clue_logprobs(
            model, prompt_ids, clue_ids, [blocker], first, generation.prefill_prefix(model, ids[1:21])
        )
    with pytest.raises(ValueError, match="not the prompt's first tokens"):
        knockout.clue_logprobs(model, prompt_ids, clue_ids, [blocker], 10, prefix)


def test_first_blocked_query_of_a_continuation_only_set_is_the_prompt_end():
    n = 6
    continuation = np.zeros(n, dtype=bool)
    continuation[2] = True
    assert knockout.first_blocked_query(edgesets.BlockedEdges(np.zeros((n, n), bool), continuation)) == n
    nothing = edgesets.BlockedEdges(np.zeros((n, n), bool), np.zeros(n, bool))
    assert knockout.first_blocked_query(nothing) >= n


@pytest.mark.routes
def test_clue_logprob_has_the_same_bytes_on_any_thread_count(prepared_tiny_mistral, sample_clues):
    """A cluster job and a laptop job run with different thread counts; the rows must not differ
    (the vocabulary matmul of a few rows rounds differently when threads split it)."""
    from attnscope import models

    loaded = models.load_model(prepared_tiny_mistral, "trained")
    row = prompts.build_prompts(sample_clues, "animals-k3", SPEC, ["Ant"], loaded.tokenizer).iloc[0]
    annotation, prompt_ids = prompts.prompt_annotation(row), [int(i) for i in row["input_ids"]]
    variant = "knockout-target-shotwords-L0-1"
    clue_ids = loaded.tokenizer.encode("Tiny and busy, it carries crumbs home.", add_special_tokens=False)
    assert len(clue_ids) >= 5  # from 5 rows on, two threads split the matmul differently
    previous = torch.get_num_threads()
    got = []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            blocker = knockout.applied(loaded.model, variant, annotation, len(prompt_ids))
            rows = knockout.clue_logprobs(loaded.model, prompt_ids, clue_ids, [None, blocker], shared=10)
            got.append(b"".join(row.tobytes() for row in rows))
    finally:
        torch.set_num_threads(previous)
    assert got[0] == got[1] == got[2]


STAGE = ["knockout-target-shots-L0-0", "knockout-target-shots-L1-1", "knockout-target-shots-L0-1",
         "knockout-control-target-shots-s0-1-L0-0", "knockout-across-shots-L0-0"]  # fmt: skip
"""Windows of one edge set, its control and another set: what one knockout job runs together."""


def test_knockouts_run_together_have_the_bytes_of_each_alone_and_whole_passes_values(
    tiny_llama, sample_clues
):
    """Several knockouts in one call share the unchanged model's passes (its maps, each prompt's
    positions before the first blocked query, the unchanged context's scores): every row has the
    bytes of the knockout run alone, and its log-probabilities are those of whole forward passes
    over prompt and clue (to 1e-5), its blocked mass that of its own window's maps in a whole pass
    (to float32 rounding: the job continues the prompt's KV cache)."""
    model, tokenizer = tiny_llama
    table = prompts.build_prompts(sample_clues, "animals-k3", SPEC, ["Ant", "Bee"], tokenizer)
    made = generation.generate(model, tokenizer, list(table["input_ids"]), 6, batch_size=1, progress=False)
    clues = generation.clue_table(table, made)
    together = knockout.prompt_effects(model, tokenizer, table, clues, STAGE, greedy=False)
    alone = [knockout.prompt_effects(model, tokenizer, table, clues, name, greedy=False) for name in STAGE]
    assert together["variant"].tolist() == [
        name for name, rows in zip(STAGE, alone) for _ in range(len(rows))
    ]
    for name, rows in zip(STAGE, alone, strict=True):
        got = together[together["variant"] == name].reset_index(drop=True)
        assert got.equals(rows)
    fmt = prompts.table_format(table)
    for row in together.itertuples():
        prompt = table[table["prompt_index"] == row.prompt_index].iloc[0]
        prompt_ids = [int(i) for i in prompt["input_ids"]]
        annotation = prompts.prompt_annotation(prompt)
        parsed = variants.parse(row.variant)
        seed = None if pd.isna(row.seed) else int(row.seed)
        blocked = edgesets.blocked_edges(annotation, len(prompt_ids), parsed, seed)
        blocker = knockout.Knockout(model, blocked, knockout.layer_range(parsed))
        clue_ids = [int(i) for i in clues.set_index("prompt_index").loc[row.prompt_index, "generated_ids"]]
        scored = {
            "": clue_ids,
            "reference_": knockout.reference_ids(tokenizer, fmt, prompt["reference_clue"]),
        }
        for p, ids in scored.items():
            before, after = knockout.clue_logprobs(model, prompt_ids, ids, [None, blocker])  # whole passes
            np.testing.assert_allclose(
                [getattr(row, f"{p}logprob_trained"), getattr(row, f"{p}logprob_knockout")],
                [before.sum(), after.sum()],
                rtol=0,
                atol=1e-5,
            )
        sequence = prompt_ids + clue_ids
        maps = knockout.layer_maps(model, sequence, knockout.layer_range(parsed))  # a whole pass
        assert row.blocked_mass == pytest.approx(
            knockout.blocked_mass(maps, blocked.dense(len(sequence))), rel=1e-6
        )
    assert together["delta_total"].abs().min() > 1e-4  # every knockout matters, beyond the tolerance
