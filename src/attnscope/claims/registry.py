"""The claims of the thesis, in the table's order: each with its section, statement, metric,
bars (templates of :class:`attnscope.claims.records.Thresholds`), how it is measured, and the
analysis settings it is measured under."""

from __future__ import annotations

from attnscope.choices import WORD_SUMS
from attnscope.claims.attention import (
    COSINE_STATEMENT,
    ablation,
    alpha_up_self,
    cosine_weak,
    early_diagonal,
    entropy_step,
    late_resembles_early,
    random_uniform,
    value_domain,
    within_shot,
)
from attnscope.claims.clues import clue_claim, more_shots
from attnscope.claims.knockout import built_from_shots, within_shots
from attnscope.claims.records import Claim, Contrast
from attnscope.claims.views import THESIS_CHOICE
from attnscope.claims.weights import alignment_small, spectrum_rows


def ablation_bar(sign: int) -> str:
    """The bars of an α-edit claim whose metric, edited − trained, moves in direction ``sign`` (a
    template of the thresholds)."""
    way, bar, against = ("higher", "≥ ", "≤ 0") if sign > 0 else ("lower", "≤ −", "≥ 0")
    return (
        f"supported if the mean's interval {bar}" + "{t.ablation_step:g} and " + way + " in ≥ "
        "{t.layer_share:.0%} of layers (adjusted p < 0.05); contradicted if it is " + against
    )


QUOTES = {
    "early": (
        "Initially, the first attention maps are nearly diagonal-dominant, followed by increasing "
        "attention between terms at a fair distance, manifesting in the subdivided triangles."
    ),
    "late": (
        "However, in the last layers, the attention patterns become sparser and resemble the "
        "diagonal-dominant matrices from the lower layers, aligning with findings from BERT "
        "interpretability research [8, 27, 20]."
    ),
    "shots": (
        "Generally, words do not attend across the boundaries of different shots, indicating that "
        "different training shots do not interfere with each other."
    ),
    "value": (
        "Examining the value domain of the attention scores in the attention map on token level 8.4, we "
        "see they range from $[0, 0.1]$."
    ),
    "cosine": (
        "Comparing … the normalized cosine similarity scores between tokens with the attention scores of "
        "chosen layers, I observed that the relationship between them is minimal; the model seems to "
        "dominate similarity matching in a more complex manner than anticipated."
    ),
    "random": (
        "As we can see, the experiential investigation supports that … supposition, even when RELU and "
        "Layer Normalization are in effect, as the attention scores approach a uniform distribution."
    ),
    "up": (
        "Upscaling causes the attention scores to become less balanced, converging to Dirac delta "
        "measures, resulting in tokens predominantly attending to themselves."
    ),
    "down": (
        "Conversely, downscaling leads to flattening the probability distribution; this effect is not as "
        "strong as expected but still visible."
    ),
}
"""The sentences of ch. 8 the attention claims test, verbatim: 8.2 "Evolving Attention Patterns" and
"Linguistic Dependencies" (below Fig. 8.5, the word maps, "compare full pass A.2"), "Value Domain"
(Fig. 8.4, token level), 8.3 (Fig. 8.6, token level), 8.4 (Fig. 8.7, drawn like 8.8–8.9), 8.5 (Fig.
8.8–8.9, word level)."""
TOKEN_MAPS, WORD_MAPS = THESIS_CHOICE, WORD_SUMS
"""What a sentence's figure shows: Fig. 8.4's token maps (on the words) or Fig. 8.5's summed word maps."""
VARY_MAPS = ("choice",)
VARY_BANDS = ("choice", "band")
VARY_FORMS = ("form", "scale_free")
VARY_NULLS = ("null",)
"""What a claim is measured under (:attr:`attnscope.claims.records.Claim.varies`): the maps' choice,
with their layer bands, the weights' form and scale, or the null."""
CLAIMS = (
    Claim(
        "early-diagonal",
        "8.2, 9.1",
        "Early layers are nearly diagonal-dominant",
        "share of the early band's rows that are diagonally dominant (a_ii ≥ Σ_{{j≠i}} a_ij over the "
        "visible keys)",
        "supported ≥ {t.dominant_share:.0%}; contradicted < {t.dominant_share:.0%}",
        early_diagonal,
        VARY_BANDS,
        quote=QUOTES["early"],
        reads=WORD_MAPS,
    ),
    Claim(
        "middle-dispersed",
        "8.2, 9.1",
        "Middle layers disperse attention over distant tokens",
        "{contrast}",
        "supported ≥ +{t.entropy_step:g}; contradicted ≤ 0",
        entropy_step("middle", "early", +1),
        VARY_BANDS,
        Contrast("row_entropy", "middle", "early"),
        quote=QUOTES["early"],
        reads=WORD_MAPS,
    ),
    Claim(
        "late-contracting",
        "8.2, 9.1",
        "Late layers contract again (sparser attention)",
        "{contrast}; given that the middle layers disperse (the claim above)",
        "supported ≤ −{t.entropy_step:g} and the middle layers' dispersion supported; contradicted ≥ 0, "
        "or if the middle layers' dispersion is contradicted (inconclusive at best if it is inconclusive)",
        entropy_step("late", "middle", -1),
        VARY_BANDS,
        Contrast("row_entropy", "late", "middle"),
        premise="middle-dispersed",
        quote=QUOTES["late"],
        reads=WORD_MAPS,
    ),
    Claim(
        "late-diagonal",
        "8.2",
        "Late layers resemble the diagonal-dominant early layers",
        "{contrast}; given that the early layers are diagonal-dominant (the first claim)",
        "supported within ±{t.resemblance:g} (equivalence) and the early layers' dominance supported; "
        "contradicted wholly outside, or if the early layers' dominance is contradicted (inconclusive at "
        "best if it is inconclusive)",
        late_resembles_early,
        VARY_BANDS,
        Contrast("diagonal_share", "late", "early"),
        premise="early-diagonal",
        quote=QUOTES["late"],
        reads=WORD_MAPS,
    ),
    Claim(
        "within-shot",
        "8.2",
        "Words attend within their own shot, not across shot boundaries",
        "within-row drop at the shot boundary: per word row of shots 2..k, the step of log attention from "
        "the previous shot's keys to the own shot's in a fit of the row on query–key distance and key "
        "segment (0 for attention that depends only on them, however sharp each row), mean over rows",
        "supported ≥ {t.boundary_drop:g} and above the jumps at placebo cutoffs inside the previous and the "
        "own shot; contradicted ≤ 0 and below them",
        within_shot,
        VARY_MAPS,
        quote=QUOTES["shots"],
        reads=WORD_MAPS,
    ),
    Claim(
        "built-from-shots",
        "8.2 (causal test)",
        "The target's clue is built from the shots: blocking target → shots (their words and clues) "
        "hurts more than blocking as many matched random edges",
        "{contrast}: the excess drop over the matched control (as many keys per row, outside the set, "
        "never the first token, the target word or the query's own segment, stratified by distance; its "
        "seeds averaged), teacher forcing, paired per prompt, per layer window (the strongest shown); the "
        "reference clue and the shot words alone beside it",
        "supported if in some window the interval > 0 and the sign-flip test (BH over windows) has "
        "p < {t.alpha:g}; contradicted if in every window it is ≤ 0",
        built_from_shots,
        contrast=Contrast("delta_token", "control-target-shots", "target-shots"),
    ),
    Claim(
        "shots-within",
        "8.2 (causal test)",
        "Shots are processed within themselves: blocking every edge to earlier shots hurts little "
        "(less than blocking target → shots)",
        "{contrast}: each shot's tokens cannot see the earlier shots, against the reference effect of the "
        "target and clue queries not seeing the shots, teacher forcing, paired per prompt, per layer "
        "window (the smallest shown)",
        "supported if in every window where the reference hurts (its interval < 0) the interval > 0, in "
        "the others across-shots' own Δ interval reaches 0, and the reference hurts in some window; "
        "contradicted if some window's interval < 0",
        within_shots,
        contrast=Contrast("delta_token", "across-shots", "target-shots"),
    ),
    Claim(
        "value-domain",
        "8.2",
        "Token-level attention values lie mostly in [0, 0.1]",
        "share of the head-mean attention mass carried by values ≤ 0.1 (0 for one-hot rows, 1 for "
        "uniform rows over ≥ 10 keys)",
        "supported ≥ {t.small_mass:.0%}; contradicted < {t.small_mass:.0%}",
        value_domain,
        VARY_MAPS,
        quote=QUOTES["value"],
        reads=TOKEN_MAPS,
    ),
    Claim(
        "cosine-weak",
        "8.3, 9.1",
        COSINE_STATEMENT,
        "largest per-layer (per-head) mean |Pearson r| or |Spearman ρ| of attention with the "
        "input-embedding cosine over the query–key pairs of the choice, head-mean maps and every head",
        "supported < {t.weak_correlation:g}; contradicted ≥ {t.strong_correlation:g}",
        cosine_weak,
        VARY_MAPS,
        quote=QUOTES["cosine"],
        reads=TOKEN_MAPS,
    ),
    Claim(
        "random-uniform",
        "8.4, 9.1",
        "The randomly initialised model's attention is near uniform",
        "normalised row entropy of the random-s<seed> models, lowest layer mean",
        "supported ≥ {t.uniform_entropy:g}; contradicted < {t.uniform_entropy_contradicted:g}",
        random_uniform,
        VARY_MAPS,
        quote=QUOTES["random"],
        reads=WORD_MAPS,
    ),
    Claim(
        "alpha-up-entropy",
        "8.5 (5.2.3)",
        "Scaling W_q, W_k by α = 2 sharpens attention (lower entropy)",
        "{contrast}, paired per prompt and layer",
        ablation_bar(-1),
        ablation("row_entropy", "up", -1),
        VARY_MAPS,
        Contrast("row_entropy", "qkscale-a2", "trained"),
        quote=QUOTES["up"],
        reads=WORD_MAPS,
    ),
    Claim(
        "alpha-up-self",
        "8.5 (5.2.3)",
        "With α = 2 tokens predominantly attend to themselves (Dirac-like)",
        "{contrast}, paired per prompt and layer; and α=2's self mass",
        ablation_bar(1) + "; and α=2's self mass ≥ {t.predominant:g} (contradicted if wholly below)",
        alpha_up_self,
        VARY_MAPS,
        Contrast("self_mass", "qkscale-a2", "trained"),
        quote=QUOTES["up"],
        reads=WORD_MAPS,
    ),
    Claim(
        "alpha-down-entropy",
        "8.5 (5.2.3)",
        "Scaling W_q, W_k by α = ½ flattens attention (higher entropy)",
        "{contrast}, paired per prompt and layer",
        ablation_bar(1),
        ablation("row_entropy", "down", 1),
        VARY_MAPS,
        Contrast("row_entropy", "qkscale-a0.5", "trained"),
        quote=QUOTES["down"],
        reads=WORD_MAPS,
    ),
    Claim(
        "alpha-up-copies",
        "8.5, 9.1",
        "With α = 2 the model writes English that repeats the prompt",
        "mean share of a clue's word bigrams that occur in its prompt",
        "supported ≥ {t.copy_share:g} and above trained (paired); contradicted if not above trained or "
        "wholly below {t.copy_share:g}",
        clue_claim(
            "up",
            2.0,
            "copy_share",
            lambda th: th.copy_share,
            "mean share of clue bigrams found in the prompt",
        ),
    ),
    Claim(
        "alpha-down-broken",
        "8.5, 9.1",
        "With α = ½ the model writes empty or broken text",
        "share of clues that are empty or lack the closing end marker",
        "supported ≥ {t.broken_share:.0%} and above trained (paired); contradicted if not above trained "
        "or wholly below {t.broken_share:.0%}",
        clue_claim("down", 0.5, "broken", lambda th: th.broken_share, "share of clues empty or unterminated"),
    ),
    Claim(
        "more-shots",
        "8.1",
        "Clue quality increases with the number of shots k",
        "{contrast}, trained, paired per target: the contrast the verdict rests on (the weakest rise "
        "if supported, the clearest fall if contradicted, else the weakest step)",
        "supported if every step in k raises it (paired interval > 0); contradicted if a step or the "
        "whole range lowers it (interval < 0)",
        more_shots,
        contrast=Contrast("chrf", "largest k", "smallest k"),
    ),
    Claim(
        "spectra",
        "7.2.2, 9.1, A.19–A.21",
        "",
        "share of layers whose learned/random ratio meets the observation's criterion (the ratio's "
        "min / median / max in the measured text), range over the init seeds (the lowest and highest "
        "share one seed alone gives; not a confidence interval)",
        "supported ≥ {t.layer_share:.0%} of layers; contradicted ≤ {t.layer_share_contradicted:.0%}",
        spectrum_rows,
        VARY_FORMS,
    ),
    Claim(
        "alignment-layer-small",
        "7.2.2, A.22",
        "Tr(W_qᵀW_k) behaves like that of random matrices (z-scores mostly small)",
        "share of layers with |z| ≤ {t.alignment_z:g} against random init (trained)",
        "supported ≥ {t.layer_share:.0%}; contradicted ≤ {t.layer_share_contradicted:.0%}",
        alignment_small("layer"),
        VARY_NULLS,
    ),
    Claim(
        "alignment-head-small",
        "7.2.2, A.22",
        "Per head, Tr(W_q,hᵀW_k,h) behaves like that of random matrices",
        "share of query heads with |z| ≤ {t.alignment_z:g} against random init (trained)",
        "supported ≥ {t.layer_share:.0%}; contradicted ≤ {t.layer_share_contradicted:.0%}",
        alignment_small("head"),
        VARY_NULLS,
    ),
    Claim(
        "alignment-head-cosine",
        "7.2.2, A.22",
        "Per head, W_q and W_k are aligned like independent random matrices (scale-free)",
        "share of query heads with |cosine|·√n ≤ {t.alignment_z:g}, cosine = Tr(W_qᵀW_k) / (‖W_q‖_F‖W_k‖_F)",
        "supported ≥ {t.layer_share:.0%}; contradicted ≤ {t.layer_share_contradicted:.0%}",
        alignment_small("head", scale_free=True),
        VARY_NULLS,
    ),
)
