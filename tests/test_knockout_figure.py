"""The knockout effects figure's data (not its pixels): a row of panels per clue scored, the
blocked attention masses of set and control, the mass ratio written beside each named set."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnscope import effects, plots
from tests.helpers import synthetic

NAMED, CONTROL = "knockout-target-shots", "knockout-control-target-shots-s0"
WINDOWS = ("L0-9", "L10-19")


def drawn(ax) -> dict[str, np.ndarray]:
    """Each error-bar series of a panel: its label → its y values (the means)."""
    return {c.get_label(): np.asarray(c.lines[0].get_ydata(), float) for c in ax.containers}


def test_the_figure_draws_both_clues_and_the_blocked_masses_of_set_and_control():
    means = {f"{NAMED}-{w}": -0.4 - 0.1 * i for i, w in enumerate(WINDOWS)}
    means |= {f"{CONTROL}-{w}": -0.1 for w in WINDOWS}
    rows = synthetic(means)
    rng = np.random.default_rng(1)
    rows["reference_delta_token"] = rows["delta_token"] * 0.5 + rng.normal(0, 0.01, len(rows))
    rows["blocked_mass"] = np.where(rows["variant"].str.contains("control"), 0.1, 0.3) + rng.uniform(
        0, 0.02, len(rows)
    )
    table = effects.effects_table(rows)
    fig = plots.plot_knockout_effects(table, "effects")
    trained_delta, trained_vs, mass, reference_delta, reference_vs = fig.axes
    by = table.set_index("variant")
    for ax, column in [(trained_delta, "delta_token"), (reference_delta, "reference_delta_token")]:
        got = drawn(ax)
        assert set(got) == {"target-shots", "control of target-shots"}
        np.testing.assert_array_equal(got["target-shots"], [by.loc[f"{NAMED}-{w}", column] for w in WINDOWS])
        np.testing.assert_array_equal(
            got["control of target-shots"], [by.loc[f"{CONTROL}-{w}", column] for w in WINDOWS]
        )
    assert not np.allclose(drawn(trained_delta)["target-shots"], drawn(reference_delta)["target-shots"])
    for ax, column in [(trained_vs, "vs_control"), (reference_vs, "reference_vs_control")]:
        np.testing.assert_array_equal(
            drawn(ax)["target-shots"], [by.loc[f"{NAMED}-{w}", column] for w in WINDOWS]
        )
    masses = drawn(mass)
    for label, name in [("target-shots", NAMED), ("control of target-shots", CONTROL)]:
        expected = [rows[rows["variant"] == f"{name}-{w}"]["blocked_mass"].mean() for w in WINDOWS]
        np.testing.assert_allclose(masses[label], expected, rtol=1e-12)
    ratios = [float(t.get_text().lstrip("×")) for t in mass.texts]
    expected = [masses["control of target-shots"][i] / masses["target-shots"][i] for i in range(len(WINDOWS))]
    np.testing.assert_allclose(ratios, expected, atol=0.005)  # written to two decimals
    assert 0.2 < min(ratios) and max(ratios) < 0.5


def test_a_table_without_reference_clue_or_mass_draws_one_row():
    table = effects.effects_table(synthetic({f"{NAMED}-L0-9": -0.4, f"{CONTROL}-L0-9": -0.1}))
    assert "reference_delta_token" not in table and "blocked_mass" not in table
    fig = plots.plot_knockout_effects(table, "effects")
    assert len(fig.axes) == 2 and not any(ax.texts for ax in fig.axes)
    assert pd.notna(table["vs_control"]).sum() == 1
