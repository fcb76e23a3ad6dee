"""The claims across models: one row per claim × model, and whether the models agree, on claims
tables built to agree and to disagree."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attnscope import claims
from attnscope.claims import across
from tests.helpers import snakemake, tiny_config


def claims_table(verdicts: dict[str, dict[str, str]]) -> pd.DataFrame:
    """A claims table (claims.COLUMNS): model → claim → verdict, the estimate a function of both."""
    rows = []
    for m, (model, by_claim) in enumerate(verdicts.items()):
        for c, (claim, verdict) in enumerate(by_claim.items()):
            estimate = float("nan") if verdict == claims.NOT_MEASURED else 0.1 * c + 0.01 * m
            rows.append(
                {
                    **dict.fromkeys(claims.COLUMNS),
                    "model": model,
                    "claim": claim,
                    "section": "8.2",
                    "statement": f"statement of {claim}",
                    "metric": "a share",
                    "setting": "words, thirds",
                    "estimate": estimate,
                    "low": estimate - 0.05,
                    "high": estimate + 0.05,
                    "n_prompts": 10,
                    "n_seeds": 1,
                    "verdict": verdict,
                }
            )
    return pd.DataFrame(rows, columns=claims.COLUMNS)


TWO_MODELS = {
    "smollm2": {
        "both-supported": "supported",
        "opposite": "supported",
        "both-contradicted": "not replicated on smollm2",
        "one-inconclusive": "supported",
        "one-measured": "supported",
    },
    "gemma3": {
        "both-supported": "supported",
        "opposite": "not replicated on gemma3",
        "both-contradicted": "not replicated on gemma3",
        "one-inconclusive": "inconclusive",
        "one-measured": "not measured",
    },
}


def test_one_row_per_claim_and_model_in_the_tables_order():
    rows = across.across_models(claims_table(TWO_MODELS))
    assert list(rows.columns) == across.ACROSS_COLUMNS
    assert list(zip(rows["claim"], rows["model"])) == [
        (claim, model) for claim in TWO_MODELS["smollm2"] for model in ("smollm2", "gemma3")
    ]
    gemma = rows[(rows["model"] == "gemma3") & (rows["claim"] == "opposite")].iloc[0]
    assert (gemma["estimate"], gemma["low"], gemma["high"]) == pytest.approx((0.11, 0.06, 0.16))
    assert gemma["verdict"] == "not replicated on gemma3" and gemma["verdict_kind"] == claims.CONTRADICTED


def test_models_agree_on_claims_built_to_agree_and_not_on_those_built_to_disagree():
    rows = across.across_models(claims_table(TWO_MODELS))
    agree = rows.drop_duplicates("claim").set_index("claim")["models_agree"].to_dict()
    assert agree == {
        "both-supported": "yes",
        "opposite": "no",
        "both-contradicted": "yes",  # not replicated on each model: the same verdict kind
        "one-inconclusive": "unclear",
        "one-measured": "–",
    }
    # every row of a claim carries its claim's agreement
    assert rows.groupby("claim")["models_agree"].nunique().eq(1).all()


def test_a_third_model_that_contradicts_breaks_the_agreement():
    three = {**TWO_MODELS, "mistral7b": {claim: "contradicted" for claim in TWO_MODELS["smollm2"]}}
    agree = across.across_models(claims_table(three)).drop_duplicates("claim").set_index("claim")
    assert agree.loc["both-contradicted", "models_agree"] == "yes"
    assert agree.loc["both-supported", "models_agree"] == "no"
    assert agree.loc["one-measured", "models_agree"] == "no"


def test_markdown_has_a_row_per_claim_and_a_column_per_model():
    text = across.across_markdown(across.across_models(claims_table(TWO_MODELS)))
    header = next(line for line in text.splitlines() if line.startswith("| section"))
    assert [cell.strip() for cell in header.strip("|").split("|")] == [
        "section",
        "statement",
        "smollm2",
        "gemma3",
        "models_agree",
    ]
    assert (
        "| 8.2 | statement of opposite | supported: 0.10 [0.05, 0.15] | "
        "not replicated on gemma3: 0.11 [0.06, 0.16] | no |"
    ) in text
    assert "| statement of one-measured | supported: 0.40 [0.35, 0.45] | not measured: – | – |" in text
    assert "Models agree: 2 yes, 1 no, 1 unclear, 1 –." in text


def test_a_table_without_the_claims_columns_is_refused():
    with pytest.raises(ValueError, match=r"claims table: missing columns \['verdict'\]"):
        across.across_models(claims_table(TWO_MODELS).drop(columns=["verdict"]))


def test_a_claims_statements_are_compared_apart():
    """A claim measured per matrix has a row per statement: each gets its own agreement."""
    table = claims_table({"smollm2": {"spectra": "supported"}, "gemma3": {"spectra": "supported"}})
    w_k = table.assign(statement="W_k", verdict=["supported", "not replicated on gemma3"])
    rows = across.across_models(pd.concat([table, w_k], ignore_index=True))
    assert list(zip(rows["statement"], rows["model"], rows["models_agree"])) == [
        ("statement of spectra", "smollm2", "yes"),
        ("statement of spectra", "gemma3", "yes"),
        ("W_k", "smollm2", "no"),
        ("W_k", "gemma3", "no"),
    ]
    with pytest.raises(ValueError, match=r"model smollm2 has two rows of spectra: W_k"):
        across.across_models(pd.concat([table, w_k, w_k.iloc[:1]], ignore_index=True))


TWO_MODEL_EXPERIMENT = {"category": "Animals", "k": 2, "n_targets": 2}
CURVES = "results/figures/across_models/animals-k2_metric_curves.png"


@pytest.mark.integration
def test_two_tiny_models_in_one_run_write_the_claims_across_models(tmp_path):
    """tiny-llama and tiny-gemma (its own init std) in one run: each model's jobs, spectra with its
    own init std, and the claims side by side, one row per claim statement × model."""
    config = tiny_config(["tiny-llama", "tiny-gemma"], **{"animals-k2": TWO_MODEL_EXPERIMENT})
    config["models"]["tiny-gemma"]["initializer_range"] = 0.03
    config["knockout"]["experiments"] = []  # the knockout claims read "not measured" on both models
    snakemake(tmp_path, "results/claims_across_models.md", CURVES, config=config)
    results = tmp_path / "results"
    for model, std in (("tiny-llama", 0.02), ("tiny-gemma", 0.03)):
        manifest = json.loads((results / "models" / model / "manifest.json").read_text())
        assert manifest["init_std_source"] == f"models.{model}.initializer_range"
        for variant in ("trained", "random-s0"):
            assert (
                pd.read_parquet(results / "spectra" / model / f"{variant}.parquet")["init_std"].eq(std).all()
            )
    table = pd.read_parquet(results / "claims.parquet")
    rows = pd.read_parquet(results / "claims_across_models.parquet")
    assert sorted(zip(rows["statement"], rows["model"])) == sorted(zip(table["statement"], table["model"]))
    assert all(
        sorted(models) == ["tiny-gemma", "tiny-llama"] for _, models in rows.groupby("statement")["model"]
    )
    kinds = table.assign(
        kind=table["verdict"].str.replace(r"^not replicated on .*", "contradicted", regex=True)
    )
    expected = kinds.groupby("statement")["kind"].agg(
        lambda k: "–" if (k != "not measured").sum() < 2 else ("yes" if k.nunique() == 1 else None)
    )
    got = rows.drop_duplicates("statement").set_index("statement")["models_agree"]
    decided = expected.dropna()
    assert got[decided.index].to_dict() == decided.to_dict()
    assert set(got[expected.index[expected.isna()]]) <= {"no", "unclear"}
    markdown = (results / "claims_across_models.md").read_text()
    assert markdown.count("\n| ") == 1 + table["statement"].nunique()  # header + one row per statement
    assert (tmp_path / CURVES).is_file() and (tmp_path / CURVES.replace(".png", ".svg")).is_file()
