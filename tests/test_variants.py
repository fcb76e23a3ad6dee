"""The variant grammar (:mod:`attnscope.variants`): the names a config and a results path hold
(trained, random-s<seed>, qkscale-a<alpha>, qktop-r<r>-a<alpha>, qkflat, knockouts and their
random controls), what each parses to, the knockout names a plan writes, and the refusal of a
malformed name with the reason or the forms it accepts."""

from __future__ import annotations

import re

import pytest

from attnscope import variants


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("qkscale-a0", "alpha must be > 0"),
        ("qkscale-a-1", "alpha must be > 0"),
        ("qkscale-2", "unknown variant"),
        ("random", "unknown variant"),
        ("Trained", "unknown variant"),
    ],
)
def test_bad_variant_names(name, message):
    with pytest.raises(ValueError, match=message):
        variants.parse(name)


def test_variant_regex_matches_exactly_the_parsable_names():
    pattern = re.compile(variants.WILDCARD_REGEX)
    for good in [
        "trained",
        "random-s0",
        "random-s12",
        "qkscale-a2",
        "qkscale-a0.5",
        "qkscale-a.5",
        "qktop-r4-a2",
        "qkflat",
        "qkflat-L0-3",
        "qkscale-a2-L10-29",
    ]:
        assert pattern.fullmatch(good) and variants.parse(good).name == good
    for bad in ["random-s", "qkscale-a", "qkscale-a2x", "trained2", "qkflat-L1", "qktop-a2"]:
        assert not pattern.fullmatch(bad)


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("trained", {"kind": "trained", "seed": None, "alpha": None, "layers": None}),
        ("random-s0", {"kind": "random", "seed": 0, "alpha": None, "layers": None}),
        ("random-s12", {"kind": "random", "seed": 12}),
        ("qkscale-a2", {"kind": "qkscale", "alpha": 2.0, "layers": None}),
        ("qkscale-a.5", {"kind": "qkscale", "alpha": 0.5}),
        ("qkflat", {"kind": "qkflat", "layers": None}),
        ("qktop-r8-a0.5", {"kind": "qktop", "rank": 8, "alpha": 0.5, "layers": None}),
        ("qkflat-L2-7", {"kind": "qkflat", "layers": (2, 7)}),
        ("qkscale-a2-L0-9", {"kind": "qkscale", "alpha": 2.0, "layers": (0, 9)}),
    ],
)
def test_variant_grammar(name, fields):
    variant = variants.parse(name)
    assert {k: getattr(variant, k) for k in fields} == fields
    assert variant.edits_layer(5) == (variant.layers is None or variant.layers[0] <= 5 <= variant.layers[1])


@pytest.mark.parametrize(
    ("name", "message"), [("qktop-r0-a2", "r must be >= 1"), ("qkflat-L5-2", "is empty")]
)
def test_bad_edit_parameters(name, message):
    with pytest.raises(ValueError, match=message):
        variants.parse(name)


def test_knockout_names_parse():
    named = variants.parse("knockout-target-shotwords-L0-5")
    assert (named.kind, named.edges, named.control, named.layers) == (
        "knockout",
        "target-shotwords",
        False,
        (0, 5),
    )
    control = variants.parse("knockout-control-across-shots-s3-L2-2")
    assert (control.edges, control.control, control.seed, control.layers) == ("across-shots", True, 3, (2, 2))
    assert named.knocks_out and not named.edits_weights
    assert not variants.parse("qkscale-a2").knocks_out
    pattern = re.compile(variants.WILDCARD_REGEX)  # the Snakefile's wildcard constraint
    assert pattern.fullmatch(named.name) and pattern.fullmatch(control.name)
    assert not pattern.fullmatch("knockout-control-across-shots-L2-2")


@pytest.mark.parametrize(
    "name",
    [
        "knockout-target-shotwords",  # no layer range
        "knockout-target-words-L0-1",  # no such edge set
        "knockout-control-target-shotwords-L0-1",  # a control needs its seed
        "knockout-target-shotwords-s0-L0-1",  # a named set has none
        "knockout-control-s0-L0-1",
    ],
)
def test_malformed_knockout_names_list_the_forms(name):
    with pytest.raises(ValueError, match="expected one of.*knockout-<edges>-L<first>-<last>.*clue-ownword"):
        variants.parse(name)


def test_an_empty_layer_range_is_refused_in_a_name():
    with pytest.raises(ValueError, match="'knockout-across-shots-L3-1'.*empty"):
        variants.parse("knockout-across-shots-L3-1")


@pytest.mark.parametrize("edges", variants.EDGE_CHOICES)
def test_a_knockout_name_is_written_as_it_parses(edges):
    """Every ``knockout.edges`` choice: the name the plan writes parses back to its edge set, its
    control seeds (controls only: 0 … n − 1, one seed as s0) and its window, and the Snakefile's
    wildcard accepts it."""
    control = edges.startswith("control-")
    for seeds, drawn in ((7, "s0-6"), (1, "s0")):
        name = variants.knockout_name(edges, seeds, (3, 5))
        assert name == (f"knockout-{edges}-{drawn}-L3-5" if control else f"knockout-{edges}-L3-5")
        parsed = variants.parse(name)
        assert (parsed.edges, parsed.control, parsed.seeds, parsed.layers) == (
            edges.removeprefix("control-"),
            control,
            tuple(range(seeds)) if control else (),
            (3, 5),
        )
        assert re.compile(variants.WILDCARD_REGEX).fullmatch(name)
    with pytest.raises(ValueError, match="seed range s4-2 is empty"):
        variants.parse("knockout-control-across-shots-s4-2-L0-1")


def test_a_name_of_no_form_lists_every_form():
    with pytest.raises(ValueError) as refused:
        variants.parse("qk-scale2")
    message = str(refused.value)
    assert message.startswith("unknown variant 'qk-scale2'; expected one of: trained, random-s<seed>")
    for form in ("qkscale-a<alpha>", "qktop-r<r>-a<alpha>", "qkflat", "knockout-control-<edges>-s<seed>"):
        assert form in message
    assert all(edges in message for edges in variants.EDGE_SETS)


def test_the_random_variants_are_the_random_inits():
    names = ["trained", "random-s0", "qkscale-a2", "random-s3", "knockout-control-across-shots-s1-L0-1"]
    assert variants.random_variants(names) == ["random-s0", "random-s3"]
