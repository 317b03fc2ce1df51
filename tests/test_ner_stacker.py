"""The lexicon stacker: features, fit and calibration, the stacked tagger, stack-lexicons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from ner_helpers import note_from_pieces, tiny_encoder_dir
from synthdeid.cli import main
from synthdeid.encoders import default_model_path
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.lexicons import LEXICONS, lexicon, normalize
from synthdeid.ner.loading import load_tagger
from synthdeid.ner.model import SpanTagger
from synthdeid.ner.stacker import (
    STACKER_FILE,
    LexiconStacker,
    StackedTagger,
    StackerFitSettings,
    feature_names,
    fit_stacker,
    gold_phi,
    lexical_features,
    replace_o,
)
from synthdeid.ner.untrained_notes import choose_development_notes
from synthdeid.notes import Note, Span, read_notes, write_notes
from synthdeid.scoring.metrics import headline_metrics

LEXICON_SET = ["first_names", "last_names", "cities", "states"]

# ---------------------------------------------------------------- features


def test_features_of_a_hand_made_note() -> None:
    text = "Pt Mary O'Brien from Boston, Massachusetts; will call new york."
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    offsets = np.asarray(
        tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    )
    lexicons = ["first_names", "last_names", "cities", "states"]
    features = lexical_features(text, offsets, lexicons)
    names = feature_names(lexicons)[2:]  # the lexical columns follow the model's two
    assert features.shape == (len(offsets), len(names))

    def row(surface: str) -> dict[str, float]:
        start = text.index(surface)
        token = next(k for k, (a, b) in enumerate(offsets.tolist()) if a <= start < b)
        return {n: float(v) for n, v in zip(names, features[token], strict=True) if v}

    mary = row("Mary")
    assert mary.items() >= {"title": 1, "in:first_names": 1, "in:first_names&cased": 1}.items()
    assert "upper" not in mary and "in:states" not in mary
    assert row("Mary").keys() == row("ary").keys()  # every sub-word token gets its word's
    assert row("Brien")["in:last_names&cased"] == 1  # the word runs across the apostrophe
    assert row("Boston")["in:cities&cased"] == 1
    assert row("Massachusetts")["in:states&cased"] == 1
    assert row("Pt") == {"title": 1}
    assert row("will") == {}  # a common word, lower case
    # a lower-case phrase: in the lexicon, but not cased
    assert row("new")["in:states"] == 1
    assert not any(name.endswith("&cased") for name in row("new"))
    assert row(",") == {} and row(";") == {}


def test_gold_marks_every_token_that_overlaps_a_span() -> None:
    offsets = np.array([[0, 2], [3, 7], [7, 9], [10, 15]])
    spans = [Span(3, 9, "PATIENT"), Span(10, 12, "ANY_LABEL")]
    assert gold_phi(offsets, spans).tolist() == [False, True, True, True]
    assert gold_phi(offsets, []).tolist() == [False] * 4


def test_replacing_p_o_keeps_the_models_label_choice() -> None:
    probs = np.array(
        [
            [0.9, 0.02, 0.06, 0.01, 0.01],  # label 0 (I) is the model's choice
            [0.2, 0.1, 0.1, 0.5, 0.1],  # label 1 (B)
            [1.0, 0.0, 0.0, 0.0, 0.0],  # no non-O mass at all
        ],
        dtype=np.float32,
    )
    out = replace_o(probs, np.array([0.7, 0.05, 0.4]))
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[:, 0], [0.3, 0.95, 0.6], rtol=1e-6)
    assert out[0, 1:].argmax() == probs[0, 1:].argmax() == 1
    assert out[1, 1:].argmax() == probs[1, 1:].argmax() == 2
    np.testing.assert_allclose(out[2, 1:], 0.1, rtol=1e-6)


# ---------------------------------------------------------------- fit


def synthetic_tokens(
    n_patients: int = 40, per_patient: int = 100, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens where a cased first-name hit means PHI and the model's P(O) is noise."""
    rng = np.random.default_rng(seed)
    n = n_patients * per_patient
    member = rng.random(n) < 0.06
    cased = rng.random(n) < 0.5
    phi = (member & cased & (rng.random(n) < 0.9)) | (rng.random(n) < 0.01)
    x = np.zeros((n, len(feature_names(["first_names"]))), dtype=np.float64)
    x[:, 0] = rng.normal(4.0, 1.0, n)  # p_o_logit: confident O everywhere, uninformative
    x[:, 1] = rng.normal(-5.0, 1.0, n)
    x[:, 2] = cased
    x[:, 4] = member
    x[:, 5] = member & cased
    groups = np.repeat([f"p{k}" for k in range(n_patients)], per_patient)
    return x, phi, groups


def test_the_stacker_learns_a_lexicon_signal_and_stays_calibrated() -> None:
    x, phi, groups = synthetic_tokens()
    fit = fit_stacker(x, phi, groups, ["first_names"])
    weights = fit.stacker.coefficients()
    assert weights["in:first_names&cased"] > 2.0
    assert weights["in:first_names&cased"] > 5 * abs(weights["p_o_logit"])
    # balanced class weights, then the intercept taken back: P(PHI) matches the base rate
    p = fit.stacker.phi_probability(x)
    assert abs(p.mean() - phi.mean()) < 0.01
    assert abs(fit.out_of_fold.mean() - phi.mean()) < 0.01
    assert fit.record["cv_log_loss"] < fit.record["base_log_loss"]
    assert fit.record["folds"] == 5 and fit.record["patients"] == 40
    assert {row["C"] for row in fit.record["cv"]} == set(StackerFitSettings().c_grid)
    assert fit.record["C"] in StackerFitSettings().c_grid


def test_out_of_fold_probabilities_come_from_fits_without_the_patient() -> None:
    x, phi, groups = synthetic_tokens(n_patients=10, per_patient=60, seed=3)
    # one patient written all in capitals and all PHI: only a fit that saw it can know
    mine = groups == "p0"
    x[mine, 3] = 1.0
    phi[mine] = True
    fit = fit_stacker(x, phi, groups, ["first_names"], StackerFitSettings(c_grid=(100.0,)))
    assert fit.stacker.phi_probability(x)[mine].mean() > 0.9
    assert fit.out_of_fold[mine].mean() < 0.5


def test_the_fit_needs_phi_of_two_patients() -> None:
    x, phi, groups = synthetic_tokens(n_patients=3, per_patient=50)
    phi = phi & (groups == "p0")
    with pytest.raises(ConfigError, match="at least two patients"):
        fit_stacker(x, phi, groups, ["first_names"])


def test_fit_settings_are_checked() -> None:
    assert StackerFitSettings.from_mapping({"c_grid": [1, 2]}).c_grid == (1.0, 2.0)
    with pytest.raises(ConfigError, match="positive"):
        StackerFitSettings.from_mapping({"c_grid": [0.0]})
    with pytest.raises(ConfigError, match="at least 2"):
        StackerFitSettings.from_mapping({"max_folds": 1})


def test_a_stacker_checks_its_weights_and_lexicons() -> None:
    with pytest.raises(ConfigError, match="weights"):
        LexiconStacker(("states",), np.zeros(3), 0.0)
    with pytest.raises(ConfigError, match="unknown lexicons"):
        LexiconStacker(("streets",), np.zeros(6), 0.0)


# ---------------------------------------------------------------- development notes


def test_development_notes_refuse_the_holdout_and_what_the_base_trained_on() -> None:
    notes = [
        Note("s1", "p1", "a", (), "unit", "seed"),
        Note("s2", "p2", "b", (), "unit", "seed"),
        Note("h1", "p3", "c", (), "unit", "holdout"),
    ]
    validation = [Note("v1", "p4", "d", (), "unit", "validation")]
    training = [Note("t1", "p2", "e", (), "unit", "train")]  # patient p2 trained on
    kept, counts = choose_development_notes(notes, ["seed"], validation, training)
    assert [n.note_id for n in kept] == ["s1", "v1"]
    assert counts == {"parts": ["seed"], "offered": 3, "trained_on": 1, "kept": 2, "patients": 2}
    with pytest.raises(ConfigError, match="holdout"):
        choose_development_notes(notes, ["seed", "holdout"], validation, training)
    with pytest.raises(InputError, match="holdout note"):
        choose_development_notes(notes, ["seed"], [notes[2]], training)
    with pytest.raises(InputError, match="no development note"):
        choose_development_notes(notes[:2], ["seed"], [], notes[:2])


# ---------------------------------------------------------------- a tiny trained base

FIRST = ("James", "Robert", "Michael", "William", "David", "Mary", "Patricia", "Linda")
LAST = ("Johnson", "Williams", "Jones", "Miller", "Davis", "Garcia", "Rodriguez", "Wilson")
HELD_FIRST = ("Joseph", "Thomas", "Charles", "Jennifer", "Maria", "Susan")
HELD_LAST = ("Taylor", "Moore", "Jackson", "Martin", "Thompson", "Anderson")
# made-up capitalized words in no lexicon: only lexicon membership tells them from names
DECOYS = ("Zorvex", "Quandrel", "Blivet", "Frobnal", "Tessaquin", "Vornish", "Klathe", "Mirrock")
DOCTORS = ("Abernathy", "Quillfeather", "Lindqvist", "Brightwater")


def name_note(note_id: str, patient: str, split: str, k: int, first: tuple, last: tuple) -> Note:
    """A family meeting with a named person (PATIENT) and one with two decoy words (no PHI)."""
    name = [(first[k % len(first)], "PATIENT"), " ", (last[(3 * k) % len(last)], "PATIENT")]
    decoy = f"{DECOYS[k % len(DECOYS)]} {DECOYS[(k + 3) % len(DECOYS)]}"
    if k % 2:
        pieces = ["Family meeting with ", *name, " today. Also present: ", decoy, "."]
    else:
        pieces = ["Family meeting with ", decoy, " today. Also present: ", *name, "."]
    return note_from_pieces(note_id, patient, pieces, split)


def split_notes() -> list[Note]:
    """Train: doctors and dates; seed and holdout: names and decoys (other names in holdout)."""
    notes = []
    for i in range(24):
        pieces: list[str | tuple[str, str]] = [
            "Seen by Dr. ",
            (DOCTORS[i % len(DOCTORS)], "DOCTOR"),
            " on ",
            (f"{i % 12 + 1}/{i % 27 + 1}", "DATE"),
            ".",
        ]
        notes.append(note_from_pieces(f"t{i:02d}", f"tp{i % 6}", pieces, "train"))
    notes += [name_note(f"s{i:02d}", f"sp{i % 10}", "seed", i, FIRST, LAST) for i in range(40)]
    notes += [
        name_note(f"h{i:02d}", f"hp{i % 4}", "holdout", i, HELD_FIRST, HELD_LAST) for i in range(24)
    ]
    return notes


def test_the_made_up_names_are_in_the_lexicons_and_the_decoys_are_not() -> None:
    people = {normalize(n) for n in (*FIRST, *LAST, *HELD_FIRST, *HELD_LAST)}
    assert all(
        any(name in lexicon(lex) for lex in ("first_names", "last_names")) for name in people
    )
    assert not any(normalize(d) in lexicon(lex) for d in DECOYS for lex in LEXICONS)


# the stages set --threads 1; conftest's fixture restores torch's thread count after
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A split notes table, a base model trained through the CLI, and a stacker over it."""
    root = tmp_path_factory.mktemp("stacker")
    torch.manual_seed(0)
    paths = {
        "root": root,
        "notes": root / "notes.parquet",
        "train": root / "mixture" / "train.parquet",
        "validation": root / "mixture" / "validation.parquet",
        "summary": root / "mixture" / "summary.json",
        "base": root / "runs" / "base" / "model",
        "stacked": root / "runs" / "stacked" / "model",
    }
    write_notes(split_notes(), paths["notes"])
    spec = '{"regime": "augmentation", "synthetic_fraction": 0.0, "seed": 1}'
    mixture = ["build-mixture", "--notes", str(paths["notes"]), "--spec", spec]
    mixture += ["--out-train", str(paths["train"]), "--out-validation", str(paths["validation"])]
    assert main([*mixture, "--summary", str(paths["summary"])]) == 0
    config = {
        "model": str(tiny_encoder_dir(root / "encoder")),
        "epochs": 1,
        "max_length": 64,
        "stride": 8,
        "learning_rate": 1e-3,
        "batch_size": 8,
        "operating_point": {"grid": [0.5, 0.9]},
    }
    train = ["train-ner", "--train", str(paths["train"]), "--validation", str(paths["validation"])]
    train += ["--mixture-summary", str(paths["summary"]), "--settings", json.dumps(config)]
    train += ["--run", "base", "--out-dir", str(paths["base"]), "--threads", "1", "--no-progress"]
    assert main(train) == 0
    assert main(stack_argv(paths, paths["stacked"])) == 0
    return paths


def stack_argv(paths: dict[str, Path], out: Path, *, parts: tuple[str, ...] = ("seed",)) -> list:
    return [
        "stack-lexicons",
        "--model",
        str(paths["base"]),
        "--notes",
        str(paths["notes"]),
        "--parts",
        *parts,
        "--validation",
        str(paths["validation"]),
        "--train",
        str(paths["train"]),
        "--lexicons",
        ",".join(LEXICON_SET),
        "--settings",
        json.dumps({"c_grid": [0.1, 1.0, 10.0]}),
        "--run",
        "stacked",
        "--out-dir",
        str(out),
        "--threads",
        "1",
        "--no-progress",
    ]


def holdout_notes() -> list[Note]:
    return [n for n in split_notes() if n.split == "holdout"]


def best_recall(tagger: SpanTagger, notes: list[Note], precision_floor: float) -> float:
    """The highest detection recall over a threshold grid at a precision of at least the floor."""
    encoded = tagger.encode(notes)
    probabilities = tagger.token_probabilities(encoded)
    best = 0.0
    for threshold in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99, 0.999):
        predicted = {
            n.note_id: tagger.decode(p, e, n.text, o_threshold=threshold)
            for n, e, p in zip(notes, encoded, probabilities, strict=True)
        }
        metrics = headline_metrics(notes, predicted)
        if metrics["detection_precision"] >= precision_floor:
            best = max(best, metrics["detection_recall"])
    return best


@pytest.mark.slow
def test_the_stacker_finds_names_the_base_misses_on_held_out_notes(work: dict) -> None:
    base = load_tagger(work["base"], device="cpu")
    stacked = load_tagger(work["stacked"], device="cpu")
    assert isinstance(stacked, StackedTagger)
    notes = holdout_notes()  # other names, other patients: never seen by the stacker
    base_recall = best_recall(base, notes, precision_floor=0.9)
    stacked_recall = best_recall(stacked, notes, precision_floor=0.9)
    assert stacked_recall >= 0.9
    assert stacked_recall >= base_recall + 0.5
    weights = stacked.stacker.coefficients()
    assert max(weights["in:first_names&cased"], weights["in:last_names&cased"]) > 1.0


@pytest.mark.slow
def test_the_stacked_directory_records_its_base_lexicons_and_fit(work: dict) -> None:
    directory = work["stacked"]
    assert {p.name for p in directory.iterdir()} == {STACKER_FILE, "README.md"}
    data = json.loads((directory / STACKER_FILE).read_text())
    assert data["base"]["path"] == "../../base/model"
    assert [r["name"] for r in data["lexicons"]] == LEXICON_SET
    assert all(r["licence"] and r["digest"] and r["entries"] > 0 for r in data["lexicons"])
    assert data["features"] == feature_names(LEXICON_SET)
    assert len(data["coefficients"]) == len(data["features"])
    assert data["fit"]["C"] in (0.1, 1.0, 10.0) and data["fit"]["patients"] >= 10
    # the seed notes and the base run's validation notes; nothing the base trained on
    development = data["development_notes"]
    assert development["parts"] == ["seed"]
    assert development["kept"] == 40 + len(read_notes(work["validation"]))
    assert development["trained_on"] == 0
    assert data["settings"]["o_threshold"] == data["validation_at_operating_point"]["o_threshold"]
    base = json.loads((work["base"] / "synthdeid_ner.json").read_text())
    assert data["settings"]["labels"] == base["labels"]
    assert data["settings"]["regex_detectors"] == base["regex_detectors"]
    card = (directory / "README.md").read_text()
    assert "run `stacked`" in card and "CC BY 4.0" in card and "`in:last_names&cased`" in card


@pytest.mark.slow
def test_a_stacked_directory_round_trips_and_moves_with_its_base(
    work: dict, tmp_path: Path
) -> None:
    notes = holdout_notes()[:6]
    loaded = load_tagger(work["stacked"], device="cpu")
    base = load_tagger(work["base"], device="cpu")
    data = json.loads((work["stacked"] / STACKER_FILE).read_text())
    rebuilt = StackedTagger(
        base,
        LexiconStacker(
            tuple(LEXICON_SET), np.asarray(data["coefficients"]), float(data["intercept"])
        ),
        loaded.settings,
    )
    a = loaded.token_probabilities(loaded.encode(notes))
    b = rebuilt.token_probabilities(rebuilt.encode(notes))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6)
    assert loaded.predict_spans(notes) == rebuilt.predict_spans(notes)
    # both directories moved together: the relative path still finds the base
    shutil.copytree(work["root"] / "runs", tmp_path / "runs")
    moved = load_tagger(tmp_path / "runs" / "stacked" / "model", device="cpu")
    assert moved.predict_spans(notes) == loaded.predict_spans(notes)
    # without its base it says so
    shutil.rmtree(tmp_path / "runs" / "base")
    with pytest.raises(InputError, match="missing or incomplete"):
        load_tagger(tmp_path / "runs" / "stacked" / "model", device="cpu")


@pytest.mark.slow
def test_a_changed_lexicon_is_refused_at_load(work: dict, tmp_path: Path) -> None:
    target = tmp_path / "runs" / "stacked" / "model"
    shutil.copytree(work["root"] / "runs", tmp_path / "runs")
    data = json.loads((target / STACKER_FILE).read_text())
    data["lexicons"][1]["digest"] = "0" * 16
    (target / STACKER_FILE).write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="lexicon 'last_names' now has"):
        load_tagger(target, device="cpu")


@pytest.mark.slow
def test_stack_lexicons_refuses_the_holdout(work: dict, capsys: pytest.CaptureFixture[str]) -> None:
    out = work["root"] / "refused" / "model"
    assert main(stack_argv(work, out, parts=("seed", "holdout"))) == 2
    assert "stack-lexicons reads development parts only" in capsys.readouterr().err
    # the split table offered as validation notes holds holdout notes: refused too
    argv = stack_argv(work, out)
    argv[argv.index("--validation") + 1] = str(work["notes"])
    assert main(argv) == 2
    assert "holdout notes" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_deid_runs_on_the_stacked_directory(work: dict) -> None:
    out = work["root"] / "deid" / "predictions.parquet"
    argv = ["predict-ner", "--model", str(work["stacked"]), "--notes", str(work["notes"])]
    argv += ["--parts", "holdout", "--out", str(out), "--threads", "1", "--device", "cpu"]
    assert main(argv) == 0
    predicted = {n.note_id: n for n in read_notes(out)}
    notes = holdout_notes()
    assert set(predicted) == {n.note_id for n in notes}
    tagger = load_tagger(work["stacked"], device="cpu")
    expected = tagger.predict_spans(notes)
    assert [list(predicted[n.note_id].spans) for n in notes] == expected
    assert sum(len(spans) for spans in expected) > 0
