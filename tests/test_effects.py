"""Knockout effects: the windows and knockouts a config makes, the per-prompt effects on a tiny
model (an empty knockout changes nothing, exactly), and the effects table against means and
differences computed by hand."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import torch

from attnscope import edgesets, effects, generation, knockout, plots, prompts, variants
from tests.helpers import synthetic

OPTIONS = {"edges": ["target-shotwords", "control-target-shotwords"], "window": 10, "stride": None,
           "windows": None, "control_seeds": 3}  # fmt: skip


@pytest.mark.parametrize(
    ("layers", "change", "expected"),
    [
        (30, {}, [(0, 9), (10, 19), (20, 29)]),
        (18, {}, [(0, 9), (8, 17)]),  # the last window ends at the last layer
        (30, {"stride": 5, "window": 12}, [(0, 11), (5, 16), (10, 21), (15, 26), (18, 29)]),
        (2, {}, [(0, 1)]),  # a window wider than the model: every layer
        (30, {"windows": [[0, 0], [3, 29]]}, [(0, 0), (3, 29)]),
    ],
)
def test_windows(layers, change, expected):
    assert variants.windows({**OPTIONS, **change}, layers) == expected


def test_knockout_names_parse_as_their_edge_set_and_window():
    names = variants.knockout_variants(OPTIONS, 20)
    assert names == [
        "knockout-target-shotwords-L0-9",
        "knockout-target-shotwords-L10-19",
        "knockout-control-target-shotwords-s0-2-L0-9",
        "knockout-control-target-shotwords-s0-2-L10-19",
    ]
    pattern = re.compile(variants.WILDCARD_REGEX)
    parsed = [variants.parse(n) for n in names]
    assert all(pattern.fullmatch(n) for n in names)
    assert [(v.edges, v.control, v.seeds, v.layers) for v in parsed][2] == (
        "target-shotwords",
        True,
        (0, 1, 2),
        (0, 9),
    )
    assert effects.control_of(names, names[1]) == names[3] and effects.control_of(names, names[3]) is None


def test_the_windows_of_an_edge_set_are_one_job():
    names = variants.knockout_variants(OPTIONS, 20)
    assert variants.knockout_sets(names) == {
        "knockout-target-shotwords": names[:2],
        "knockout-control-target-shotwords-s0-2": names[2:],
    }
    for group in variants.knockout_sets(names):
        assert re.fullmatch(variants.KNOCKOUT_SET_REGEX, group)
        assert not re.fullmatch(variants.WILDCARD_REGEX, group)  # no variant's name: no clash
    assert not re.fullmatch(variants.KNOCKOUT_SET_REGEX, names[0])
    with pytest.raises(ValueError, match="'knockout-target-shots' is not a knockout with a layer window"):
        variants.knockout_sets(["knockout-target-shots"])
    runs = {
        group: variants.knockout_runs(members) for group, members in variants.knockout_sets(names).items()
    }
    assert runs == {"knockout-target-shotwords": 2, "knockout-control-target-shotwords-s0-2": 2 * 3}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"windows": [[0, 1], [5, 30]]},
            r"knockout.windows\[1\]: \[5, 30\] is not a layer range .* layers 0-29",
        ),
        ({"windows": [[3, 2]]}, r"knockout.windows\[0\]"),
        ({"edges": ["target-words"]}, r"knockout.edges\[0\]: 'target-words' is none of"),
    ],
)
def test_bad_knockout_options_name_the_key(change, message):
    with pytest.raises(ValueError, match=message):
        variants.knockout_variants({**OPTIONS, **change}, 30)


def test_the_plan_runs_the_claims_experiments_unless_told():
    options = {**OPTIONS, "experiments": None}
    plan = variants.knockout_plan(options, {"a": 2, "b": 20}, ["k3", "k5"], ["k3"])
    assert plan == {
        "a": {"k3": variants.knockout_variants(OPTIONS, 2)},
        "b": {"k3": variants.knockout_variants(OPTIONS, 20)},
    }
    assert variants.knockout_plan({**OPTIONS, "experiments": []}, {"a": 2}, ["k3"], ["k3"]) == {"a": {}}
    with pytest.raises(ValueError, match=r"knockout.experiments: no experiment \['k8'\]"):
        variants.knockout_plan({**OPTIONS, "experiments": ["k8"]}, {"a": 2}, ["k3", "k5"], ["k3"])


# --- per-prompt effects on a tiny model ---


def one_prompt(tokenizer, sample_clues, k: int) -> pd.DataFrame:
    """The prompt table of target Ant with k shots."""
    spec = {"category": "Animals", "k": k, "seed": 0, "shot_draw": "attnscope"}
    return prompts.build_prompts(sample_clues, f"animals-k{k}", spec, ["Ant"], tokenizer)


def trained_clues(model, tokenizer, table: pd.DataFrame) -> pd.DataFrame:
    """The trained model's clue table (greedy, one prompt at a time)."""
    made = generation.generate(model, tokenizer, list(table["input_ids"]), 6, batch_size=1, progress=False)
    return generation.clue_table(table, made)


def test_a_knockout_that_blocks_nothing_changes_nothing_exactly(tiny_llama, sample_clues):
    """One shot: no shot has an earlier shot, so across-shots blocks no edge; Δ is exactly 0 and
    the greedy clue is the trained one; the same knockout at k = 2 does change the log-probability."""
    model, tokenizer = tiny_llama
    for k, empty in ((1, True), (2, False)):
        table = one_prompt(tokenizer, sample_clues, k)
        clues = trained_clues(model, tokenizer, table)
        row = knockout.prompt_effects(
            model, tokenizer, table, clues, "knockout-across-shots-L0-1", True, 6
        ).iloc[0]
        if empty:
            assert row["delta_total"] == 0.0 and row["delta_token"] == 0.0
            assert row["logprob_knockout"] == row["logprob_trained"] < 0
            assert row["clue"] == row["trained_clue"] and row["exact_match"] == 1.0 and row["chrf"] == 100.0
        else:
            assert row["delta_token"] != 0.0


def test_prompt_effects_are_the_teacher_forced_log_probabilities(tiny_llama, sample_clues):
    """Δ against log-softmax of one forward over prompt + clue with and without the knockout, and
    the greedy clue against generation inside the same knockout."""
    model, tokenizer = tiny_llama
    table = one_prompt(tokenizer, sample_clues, 3)
    clues = trained_clues(model, tokenizer, table)
    name = "knockout-target-shotwords-L0-1"
    row = knockout.prompt_effects(model, tokenizer, table, clues, name, True, 6).iloc[0]
    prompt_ids, clue_ids = list(table["input_ids"][0]), list(clues["generated_ids"][0])
    annotation = prompts.prompt_annotation(table.iloc[0])

    def logprobs(blocker=None) -> np.ndarray:
        ids = torch.tensor([prompt_ids + clue_ids])
        with torch.inference_mode(), blocker or torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].double()
        return torch.log_softmax(logits, -1)[range(len(clue_ids)), clue_ids].numpy()

    blocker = knockout.applied(model, name, annotation, len(prompt_ids))
    before, after = logprobs(), logprobs(blocker)
    assert row["n_clue_tokens"] == len(clue_ids)
    np.testing.assert_allclose(row["delta_total"], after.sum() - before.sum(), atol=1e-4)
    np.testing.assert_allclose(row["delta_token"], (after - before).mean(), atol=1e-4)
    assert abs(row["delta_token"]) > 1e-3
    with blocker:
        [made] = generation.generate(model, tokenizer, [prompt_ids], 6, batch_size=1, progress=False)
    assert row["clue"] == made.clue and row["exact_match"] == float(made.clue == clues["clue"][0])
    reference = knockout.reference_ids(tokenizer, prompts.table_format(table), table["reference_clue"][0])
    assert tokenizer.decode(reference).endswith("#") and len(reference) == row["reference_n_clue_tokens"]
    before, after = knockout.clue_logprobs(model, prompt_ids, reference, [None, blocker])
    np.testing.assert_allclose(row["reference_delta_token"], (after - before).mean(), atol=1e-5)


def test_a_control_job_draws_each_seed_and_blocks_as_many_edges(tiny_llama, sample_clues):
    """One job of a control with seeds 0-2: a row per seed, each blocking as many edges as the set
    and scoring both clues; the attention mass each blocks is that of its own edges."""
    model, tokenizer = tiny_llama
    table = one_prompt(tokenizer, sample_clues, 3)
    clues = trained_clues(model, tokenizer, table)
    named, control = (
        knockout.prompt_effects(model, tokenizer, table, clues, name, False, 6)
        for name in ("knockout-target-shots-L0-1", "knockout-control-target-shots-s0-2-L0-1")
    )
    assert control["seed"].tolist() == [0, 1, 2] and named["seed"].isna().all()
    assert (control["n_blocked"] == named["n_blocked"][0]).all() and named["n_blocked"][0] > 0
    assert control["delta_token"].nunique() == 3 and control["reference_delta_token"].notna().all()
    assert control["blocked_mass"].nunique() == 3
    prompt_ids, clue_ids = list(table["input_ids"][0]), list(clues["generated_ids"][0])
    variant = variants.parse("knockout-control-target-shots-s0-2-L0-1")
    blocked = edgesets.blocked_edges(prompts.prompt_annotation(table.iloc[0]), len(prompt_ids), variant, 2)
    maps = knockout.layer_maps(model, prompt_ids + clue_ids, range(2))
    dense = blocked.dense(len(prompt_ids) + len(clue_ids))
    assert control["blocked_mass"][2] == pytest.approx(knockout.blocked_mass(maps, dense))


# --- the effects table ---


def test_the_effects_table_against_means_and_paired_differences():
    effect = {
        "knockout-target-shotwords-L0-9": -0.5,  # hurts more than its control
        "knockout-target-shotwords-L10-19": -0.1,  # as much as its control
        "knockout-control-target-shotwords-s0-L0-9": -0.1,
        "knockout-control-target-shotwords-s0-L10-19": -0.1,
        "knockout-across-shots-L0-9": 0.0,  # no control ran
    }
    rows = synthetic(effect)
    table = effects.effects_table(rows).set_index("variant")
    for name in effect:
        mine = rows[rows["variant"] == name]
        assert table.loc[name, "delta_token"] == pytest.approx(mine["delta_token"].mean())
        assert (
            table.loc[name, "delta_token_low"]
            < table.loc[name, "delta_token"]
            < table.loc[name, "delta_token_high"]
        )
        assert table.loc[name, "chrf"] == pytest.approx(mine["chrf"].mean())
        assert (table.loc[name, "n_prompts"], table.loc[name, "n_targets"]) == (24, 12)
    named, control = (
        rows[rows["variant"] == v].set_index("prompt_index")["delta_token"]
        for v in ("knockout-target-shotwords-L0-9", "knockout-control-target-shotwords-s0-L0-9")
    )
    first = table.loc["knockout-target-shotwords-L0-9"]
    assert first["vs_control"] == pytest.approx((named - control).mean())
    assert first["versus"] == "knockout-control-target-shotwords-s0-L0-9"
    assert first["vs_control_high"] < 0 and first["p_adjusted"] < 0.01
    same = table.loc["knockout-target-shotwords-L10-19"]
    assert same["vs_control_low"] < 0 < same["vs_control_high"] and same["p_adjusted"] > 0.05
    assert (
        table.loc[["knockout-across-shots-L0-9", "knockout-control-target-shotwords-s0-L0-9"], "vs_control"]
        .isna()
        .all()
    )
    assert table.loc["knockout-across-shots-L0-9", "window"] == "L0-9"
    text = effects.effects_markdown(table.reset_index(), "effects")
    assert text.startswith("# effects") and "control of target-shotwords" in text
    fig = plots.plot_knockout_effects(table.reset_index(), "effects")
    left, right = fig.axes
    assert len(left.containers) == 3 and len(right.containers) == 1  # sets; the one set with a control


def test_a_control_of_several_seeds_is_averaged_per_prompt_and_its_mass_set_beside():
    """Five seeds of a control, each its own noise: the set is compared with the seeds' mean per
    prompt (not with one seed), the table counts prompts (not rows) and seeds, and the control's
    blocked mass is divided by the set's."""
    named, control = "knockout-target-shots-L0-9", "knockout-control-target-shots-s0-4-L0-9"
    rows = pd.concat(
        [synthetic({named: -0.5}).assign(seed=pd.NA, blocked_mass=0.2)]
        + [synthetic({control: -0.1 * s}, seed=s + 1).assign(seed=s, blocked_mass=0.1) for s in range(5)],
        ignore_index=True,
    )
    table = effects.effects_table(rows).set_index("variant")
    per_prompt = rows[rows["variant"] == control].groupby("prompt_index")["delta_token"].mean()
    own = rows[rows["variant"] == named].set_index("prompt_index")["delta_token"]
    assert table.loc[named, "vs_control"] == pytest.approx((own - per_prompt).mean())
    assert table.loc[named, "vs_control"] != pytest.approx(
        (own - rows[rows["seed"] == 0].set_index("prompt_index")["delta_token"]).mean()
    )
    assert (
        table.loc[control, ["n_prompts", "n_seeds"]].tolist() == [24, 5] and table.loc[named, "n_seeds"] == 1
    )
    assert table.loc[named, "mass_ratio"] == pytest.approx(0.5) and pd.isna(table.loc[control, "mass_ratio"])
    text = effects.effects_markdown(table.reset_index(), "effects")
    assert "| control of target-shots | L0-9 | 5 | 24 | 12 |" in text and "knockout.greedy: false" not in text


@pytest.mark.parametrize("name", ["knockout-target-shotwords-L0-1", "knockout-across-shots-L0-1"])
def test_prompts_that_begin_alike_share_their_first_tokens(tiny_llama, sample_clues, name):
    """Three targets with the same shots: their common tokens before the first blocked query run
    once for all; the rows equal each prompt run alone through whole forward passes."""
    model, tokenizer = tiny_llama
    spec = {"category": "Animals", "k": 3, "seed": 0, "shot_draw": "attnscope"}
    table = prompts.build_prompts(sample_clues, "animals-k3", spec, ["Ant", "Bee", "Fox"], tokenizer)
    assert generation.shared_prefix_length(list(table["input_ids"])) > 20
    clues = trained_clues(model, tokenizer, table)
    rows = knockout.prompt_effects(model, tokenizer, table, clues, name, False, 6)
    for (_, prompt), row, clue_ids in zip(table.iterrows(), rows.itertuples(), clues["generated_ids"]):
        prompt_ids = [int(i) for i in prompt["input_ids"]]
        blocker = knockout.applied(model, name, prompts.prompt_annotation(prompt), len(prompt_ids))
        before, after = knockout.clue_logprobs(model, prompt_ids, list(clue_ids), [None, blocker])
        np.testing.assert_allclose(
            [row.logprob_trained, row.logprob_knockout], [before.sum(), after.sum()], atol=1e-5
        )
    assert rows["delta_total"].abs().max() > 1e-3  # the knockout matters, beyond the tolerance
