"""Ensemble of teachers: clusters, union and vote per label, extents, failed members."""

from __future__ import annotations

import pytest

from synthdeid.errors import ConfigError
from synthdeid.teacher.ensemble import (
    MEMBER_FAILED,
    EnsemblePolicy,
    combine,
    combine_notes,
)
from synthdeid.teacher.silver import NoteLabels, ScoredSpan

UNION = EnsemblePolicy()
VOTE = EnsemblePolicy(default="vote")


def test_union_of_partial_overlap_covers_both_extents() -> None:
    spans, counts = combine(
        {
            "llm": [ScoredSpan(10, 20, "PATIENT", 0.9)],
            "ner": [ScoredSpan(15, 28, "PATIENT", 0.4), ScoredSpan(40, 45, "DATE")],
        },
        UNION,
    )
    assert spans == [ScoredSpan(10, 28, "PATIENT", 1.0), ScoredSpan(40, 45, "DATE", 0.5)]
    assert counts == {"vote_dropped": 0, "overlap_dropped": 0}


def test_chained_overlaps_form_one_cluster() -> None:
    # a [0,5) and c [9,15) do not overlap each other, but both overlap b [4,10)
    spans, _ = combine(
        {
            "a": [ScoredSpan(0, 5, "ID"), ScoredSpan(9, 15, "ID")],
            "b": [ScoredSpan(4, 10, "ID")],
            "c": [ScoredSpan(15, 18, "ID")],  # touches, does not overlap
        },
        UNION,
    )
    assert spans == [ScoredSpan(0, 15, "ID", 2 / 3), ScoredSpan(15, 18, "ID", 1 / 3)]


def test_span_inside_a_longer_one_does_not_end_the_cluster() -> None:
    # b sits inside a; c overlaps a (not b) and so belongs to the same cluster
    spans, _ = combine(
        {
            "a": [ScoredSpan(0, 20, "PATIENT")],
            "b": [ScoredSpan(2, 4, "PATIENT")],
            "c": [ScoredSpan(10, 25, "PATIENT")],
        },
        VOTE,
    )
    assert spans == [ScoredSpan(0, 25, "PATIENT", 1.0)]


def test_vote_keeps_agreed_span_and_drops_lone_one() -> None:
    spans, counts = combine(
        {
            "a": [ScoredSpan(0, 8, "DOCTOR"), ScoredSpan(30, 35, "PHONE")],
            "b": [ScoredSpan(2, 8, "DOCTOR")],
            "c": [],
        },
        VOTE,
    )
    assert spans == [ScoredSpan(0, 8, "DOCTOR", pytest.approx(2 / 3))]
    assert counts == {"vote_dropped": 1, "overlap_dropped": 0}


def test_min_votes_overrides_majority() -> None:
    members = {
        "a": [ScoredSpan(0, 4, "DATE")],
        "b": [ScoredSpan(0, 4, "DATE")],
        "c": [],
    }
    assert combine(members, EnsemblePolicy(default="vote", min_votes=3))[0] == []
    assert combine(members, EnsemblePolicy(default="vote", min_votes=1))[0] == [
        ScoredSpan(0, 4, "DATE", pytest.approx(2 / 3))
    ]


def test_per_label_policy_votes_on_date_only() -> None:
    policy = EnsemblePolicy.from_mapping({"default": "union", "DATE": "vote"})
    assert policy.policy("DATE") == "vote"
    assert policy.policy("PATIENT") == "union"
    spans, counts = combine(
        {
            "a": [ScoredSpan(0, 5, "DATE"), ScoredSpan(10, 15, "PATIENT")],
            "b": [ScoredSpan(20, 25, "DATE")],
            "c": [ScoredSpan(20, 24, "DATE")],
        },
        policy,
    )
    assert spans == [
        ScoredSpan(10, 15, "PATIENT", pytest.approx(1 / 3)),
        ScoredSpan(20, 25, "DATE", pytest.approx(2 / 3)),
    ]
    assert counts["vote_dropped"] == 1


def test_one_members_spans_in_a_cluster_count_one_vote() -> None:
    # member a alone has two spans in the cluster: still one vote of three
    spans, counts = combine(
        {
            "a": [ScoredSpan(0, 5, "HOSPITAL"), ScoredSpan(3, 9, "HOSPITAL")],
            "b": [],
            "c": [],
        },
        VOTE,
    )
    assert spans == []
    assert counts["vote_dropped"] == 1
    spans, _ = combine(
        {"a": [ScoredSpan(0, 5, "HOSPITAL"), ScoredSpan(3, 9, "HOSPITAL")], "b": []}, UNION
    )
    assert spans == [ScoredSpan(0, 9, "HOSPITAL", 0.5)]


def test_cross_label_overlap_higher_vote_share_wins() -> None:
    spans, counts = combine(
        {
            "a": [ScoredSpan(0, 10, "LOCATION")],
            "b": [ScoredSpan(0, 10, "HOSPITAL")],
            "c": [ScoredSpan(2, 8, "HOSPITAL")],
        },
        UNION,
    )
    assert spans == [ScoredSpan(0, 10, "HOSPITAL", pytest.approx(2 / 3))]
    assert counts == {"vote_dropped": 0, "overlap_dropped": 1}


def test_member_missing_or_failing_a_note_fails_the_note() -> None:
    a = {
        "n1": NoteLabels("n1", [ScoredSpan(0, 4, "DATE")], input_tokens=100, output_tokens=10),
        "n2": NoteLabels("n2", [ScoredSpan(1, 3, "ID")], input_tokens=50, output_tokens=5),
        "n3": NoteLabels("n3", [], status="timeout", detail="secret text"),
    }
    b = {
        "n4": NoteLabels("n4", [ScoredSpan(0, 2, "ID")]),
        "n1": NoteLabels("n1", [ScoredSpan(2, 6, "DATE")], input_tokens=None, output_tokens=7),
        "n3": NoteLabels("n3", [ScoredSpan(0, 2, "ID")]),
    }
    notes, totals = combine_notes({"a": a, "b": b}, UNION)
    assert [n.note_id for n in notes] == ["n1", "n2", "n3", "n4"]
    by_id = {n.note_id: n for n in notes}

    n1 = by_id["n1"]
    assert n1.ok
    assert n1.spans == [ScoredSpan(0, 6, "DATE", 1.0)]
    assert n1.counts == {"overlap_dropped": 0}
    assert (n1.input_tokens, n1.output_tokens) == (100, 17)

    for note_id, detail in [("n2", "missing: b"), ("n3", "failed: a"), ("n4", "missing: a")]:
        note = by_id[note_id]
        assert note.status == MEMBER_FAILED
        assert note.detail == detail
        assert note.spans == []
    assert "secret" not in by_id["n3"].detail
    assert (by_id["n2"].input_tokens, by_id["n2"].output_tokens) == (50, 5)
    assert (by_id["n4"].input_tokens, by_id["n4"].output_tokens) == (None, None)
    assert totals == {"vote_dropped": 0, "overlap_dropped": 0, "member_failed": 3}


def test_combine_notes_totals_and_overlap_counts() -> None:
    a = {"n1": NoteLabels("n1", [ScoredSpan(0, 10, "LOCATION"), ScoredSpan(20, 22, "ID")])}
    b = {"n1": NoteLabels("n1", [ScoredSpan(0, 10, "HOSPITAL")])}
    c = {"n1": NoteLabels("n1", [ScoredSpan(1, 9, "HOSPITAL")])}
    notes, totals = combine_notes({"a": a, "b": b, "c": c}, VOTE)
    assert notes[0].spans == [ScoredSpan(0, 10, "HOSPITAL", pytest.approx(2 / 3))]
    assert notes[0].counts == {"overlap_dropped": 0}
    assert totals == {"vote_dropped": 2, "overlap_dropped": 0, "member_failed": 0}
    notes, totals = combine_notes({"a": a, "b": b, "c": c}, UNION)
    assert notes[0].counts == {"overlap_dropped": 1}
    assert totals == {"vote_dropped": 0, "overlap_dropped": 1, "member_failed": 0}


def test_min_votes_above_members_is_config_error() -> None:
    policy = EnsemblePolicy(default="vote", min_votes=3)
    with pytest.raises(ConfigError, match="min_votes"):
        combine({"a": [], "b": []}, policy)
    with pytest.raises(ConfigError, match="min_votes"):
        combine_notes({"a": {}, "b": {}}, policy)


def test_no_members_is_config_error() -> None:
    with pytest.raises(ConfigError, match="at least one member"):
        combine({}, UNION)


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"default": "intersection"}, "default"),
        ({"DATE": "majority"}, "DATE"),
        ({"min_votes": 0}, "min_votes"),
        ({"min_votes": -1}, "min_votes"),
        ({"min_votes": 1.5}, "min_votes"),
        ({"min_votes": True}, "min_votes"),
    ],
)
def test_bad_policy_is_config_error_naming_the_key(mapping: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        EnsemblePolicy.from_mapping(mapping)


def test_from_mapping_reads_min_votes_and_labels() -> None:
    policy = EnsemblePolicy.from_mapping({"default": "union", "DATE": "vote", "min_votes": 2})
    assert policy == EnsemblePolicy(default="union", per_label={"DATE": "vote"}, min_votes=2)
    assert policy.required_votes(5) == 2
    assert EnsemblePolicy().required_votes(4) == 3
    assert EnsemblePolicy().required_votes(3) == 2
