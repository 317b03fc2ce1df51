"""An ensemble of token classifiers: mean probabilities, checks on its members, its directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

from ner_helpers import note_from_pieces, tiny_encoder_dir
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.ensemble import (
    ENSEMBLE_FILE,
    EnsembleTagger,
    ensemble_settings,
    is_ensemble_directory,
)
from synthdeid.ner.loading import load_tagger
from synthdeid.ner.model import DeidTagger, NerSettings
from synthdeid.ner.untrained_notes import validation_notes
from synthdeid.notes import Note

LABELS = ["DOCTOR", "DATE"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def settings(**overrides: object) -> NerSettings:
    values: dict = {"labels": list(LABELS), "max_length": 32, "stride": 4, **overrides}
    return NerSettings(**values)


def member(encoder: Path, seed: int, **overrides: object) -> DeidTagger:
    """An untrained token classifier on the tiny encoder (its head drawn from ``seed``)."""
    these = settings(**overrides)
    torch.manual_seed(seed)
    model = AutoModelForTokenClassification.from_pretrained(
        encoder, num_labels=len(these.tags), id2label=dict(enumerate(these.tags))
    )
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    return DeidTagger(model.eval(), tokenizer, these, torch.device("cpu"))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return tiny_encoder_dir(tmp_path_factory.mktemp("ensemble") / "encoder")


def notes() -> list[Note]:
    long_tail = " Vitals stable and the plan is unchanged." * 6
    return [
        note_from_pieces("a", "p1", ["Seen by Dr. ", ("Quillfeather", "DOCTOR"), " today."]),
        note_from_pieces("b", "p2", ["Discharged on ", ("3/14", "DATE"), "." + long_tail]),
        note_from_pieces("c", "p3", ["No acute events overnight."]),
    ]


def test_probabilities_are_the_members_mean(encoder: Path) -> None:
    first, second = member(encoder, 1), member(encoder, 2)
    ensemble = EnsembleTagger([("one", first), ("two", second)], settings())
    encoded = ensemble.encode(notes())
    mean = ensemble.token_probabilities(encoded)
    separate = [m.token_probabilities(m.encode(notes())) for m in (first, second)]
    for got, a, b in zip(mean, *separate, strict=True):
        assert got.shape == a.shape
        np.testing.assert_allclose(got, (a + b) / 2, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
    # the two heads differ, so the mean is neither member
    assert not np.allclose(mean[0], separate[0][0])
    # the long note spans several windows and is merged per member before averaging
    assert encoded[1].n_tokens > 32


def test_an_ensemble_of_one_model_twice_predicts_like_the_model(encoder: Path) -> None:
    model = member(encoder, 3)
    ensemble = EnsembleTagger([("a", model), ("b", model)], settings(o_threshold=0.9))
    for threshold in (0.5, 0.9, 0.99):
        assert ensemble.predict_spans(notes(), o_threshold=threshold) == model.predict_spans(
            notes(), o_threshold=threshold
        )
    # without an override the ensemble decodes at its own threshold, not the member's
    assert ensemble.predict_spans(notes()) == model.predict_spans(notes(), o_threshold=0.9)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"labels": ["DOCTOR", "AGE"]}, "labels"),
        ({"initials": "separate"}, "initials"),
    ],
)
def test_members_must_decode_alike(encoder: Path, overrides: dict, match: str) -> None:
    first = member(encoder, 1)
    other = member(encoder, 2, **overrides)
    with pytest.raises(ConfigError, match=f"member 'two' has {match}"):
        ensemble_settings([("one", first), ("two", other)])


def test_an_ensemble_needs_two_distinctly_named_members(encoder: Path) -> None:
    model = member(encoder, 1)
    with pytest.raises(ConfigError, match="at least two members"):
        ensemble_settings([("one", model)])
    with pytest.raises(ConfigError, match="distinct names"):
        ensemble_settings([("one", model), ("one", model)])


def test_settings_take_the_members_labels_and_regex_union(encoder: Path) -> None:
    first = member(encoder, 1, regex_detectors=["DATE"], initials="separate")
    second = member(encoder, 2, regex_detectors=["PHONE"], initials="separate")
    combined = ensemble_settings([("one", first), ("two", second)])
    assert combined.labels == LABELS
    assert combined.regex_detectors == ["DATE", "PHONE"]
    assert combined.initials == "separate"
    assert combined.o_threshold == 0.5
    assert combined.base_model == "ensemble of one, two"
    assert ensemble_settings([("one", first), ("two", second)], []).regex_detectors == []


def test_members_must_tokenize_alike(encoder: Path) -> None:
    cased = member(encoder, 2)
    # the bundled tokenizer lower-cases; without that, capitalized words get other ids
    cased.tokenizer = AutoTokenizer.from_pretrained(encoder, do_lower_case=False)
    ensemble = EnsembleTagger([("uncased", member(encoder, 1)), ("cased", cased)], settings())
    with pytest.raises(ConfigError, match="'uncased' and 'cased' tokenize note 'a' differently"):
        ensemble.encode(notes())


def saved_member(tagger: DeidTagger, directory: Path) -> Path:
    tagger.model.save_pretrained(directory)
    tagger.tokenizer.save_pretrained(directory)
    tagger.settings.save(directory)
    return directory


def test_directory_round_trip_with_relative_member_paths(encoder: Path, tmp_path: Path) -> None:
    tree = tmp_path / "results"
    dirs = [
        saved_member(member(encoder, 1), tree / "train" / "one"),
        saved_member(member(encoder, 2), tree / "train" / "two"),
    ]
    taggers = [("one", DeidTagger.load(dirs[0])), ("two", DeidTagger.load(dirs[1]))]
    ensemble = EnsembleTagger(taggers, settings(o_threshold=0.8, base_model="x"))
    target = tree / "ensemble" / "model"
    target.mkdir(parents=True)
    ensemble.save(target, dirs, target=target, extra={"run": "pair"})
    data = json.loads((target / ENSEMBLE_FILE).read_text())
    assert [m["path"] for m in data["members"]] == ["../../train/one", "../../train/two"]
    assert data["run"] == "pair"
    assert is_ensemble_directory(target) and not is_ensemble_directory(dirs[0])

    # the whole tree moves: relative paths still find the members
    moved = shutil.move(tree, tmp_path / "elsewhere")
    loaded = load_tagger(Path(moved) / "ensemble" / "model", device="cpu")
    assert isinstance(loaded, EnsembleTagger)
    assert loaded.member_names == ["one", "two"]
    assert loaded.settings.o_threshold == 0.8
    assert loaded.predict_spans(notes()) == ensemble.predict_spans(notes())
    assert isinstance(load_tagger(Path(moved) / "train" / "one", device="cpu"), DeidTagger)

    shutil.rmtree(Path(moved) / "train" / "two")
    with pytest.raises(InputError, match=r"member 'two': model directory .* missing"):
        load_tagger(Path(moved) / "ensemble" / "model", device="cpu")


def test_a_broken_ensemble_file_names_itself(tmp_path: Path) -> None:
    (tmp_path / ENSEMBLE_FILE).write_text('{"members": []')
    with pytest.raises(InputError, match=f"{ENSEMBLE_FILE}: not a valid ensemble file"):
        load_tagger(tmp_path)
    (tmp_path / ENSEMBLE_FILE).write_text('{"settings": {}}')
    with pytest.raises(InputError, match="not a valid ensemble file"):
        load_tagger(tmp_path)


# ---------------------------------------------------------------- validation notes


def plain(note_id: str, patient: str, text: str = "Seen today.") -> Note:
    return note_from_pieces(note_id, patient, [text])


def test_validation_notes_leave_out_what_any_member_trained_on() -> None:
    validation = {
        Path("v1.parquet"): [plain("v1", "p1"), plain("v2", "p2"), plain("v3", "p3")],
        # the second member's validation part repeats v2 and adds v4 and v5
        Path("v2.parquet"): [plain("v2", "p2"), plain("v4", "p4"), plain("v5", "p5")],
    }
    training = {
        Path("t1.parquet"): [plain("t1", "p9")],
        # the second member trained on v3 itself and on another note of patient p4
        Path("t2.parquet"): [plain("v3", "p3"), plain("t2", "p4")],
    }
    kept, counts = validation_notes(validation, training)
    assert [note.note_id for note in kept] == ["v1", "v2", "v5"]
    assert counts == {"offered": 5, "trained_on": 2, "kept": 3}


def test_validation_notes_refuse_two_versions_of_a_note() -> None:
    validation = {
        Path("v1.parquet"): [plain("v1", "p1")],
        Path("v2.parquet"): [plain("v1", "p1", "Another text.")],
    }
    with pytest.raises(InputError, match=r"v2\.parquet: note 'v1': differs"):
        validation_notes(validation, {})


def test_validation_notes_must_not_run_out() -> None:
    with pytest.raises(InputError, match="no validation note is left"):
        validation_notes({Path("v.parquet"): [plain("v1", "p1")]}, {Path("t"): [plain("x", "p1")]})
