"""Synthetic-vs-real diagnostics: statistics, JSD, Fréchet distance, writers and the stage."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from synthdeid import cli
from synthdeid.notes import UNSPLIT, Note, Span, read_notes, write_notes
from synthdeid.synthesis.diagnostics import (
    OUTPUTS,
    diagnose,
    frechet_components,
    frechet_distance,
    has_repetition,
    subset_statistics,
    unigram_jsd,
    write_diagnostics,
)
from synthdeid.synthesis.subsets import (
    DerivedSubset,
    FileSubset,
    load_subsets,
    parse_derived,
    parse_subset,
)

STAGE = "diagnose-synthetic"


def made_up(
    note_id: str, pieces: Sequence[str | tuple[str, str]], split: str = UNSPLIT, patient: str = ""
) -> Note:
    """A made-up note from text pieces; ``(text, label)`` pieces become spans."""
    text = ""
    spans = []
    for piece in pieces:
        if isinstance(piece, tuple):
            spans.append(Span(len(text), len(text) + len(piece[0]), piece[1]))
            text += piece[0]
        else:
            text += piece
    return Note(note_id, patient or f"p-{note_id}", text, tuple(spans), "made-up", split)


def sample_notes(split: str = UNSPLIT) -> list[Note]:
    return [
        # 8 words; the same doctor twice (case and spacing differ): repetition
        made_up(
            "a",
            ["Seen by ", ("Dr Ames", "DOCTOR"), " then ", ("dr  AMES", "DOCTOR"), " again"],
            split,
        ),
        # 6 words; date and hospital only: a PII note without PER
        made_up("b", ["Review ", ("4 June", "DATE"), " at ", ("St Mary", "HOSPITAL")], split),
        # 3 words
        made_up("c", [("Jo", "PATIENT"), " is well"], split),
        made_up("d", ["No identifiers here at all"], split),  # 5 words
        made_up("e", ["Quiet day"], split),  # 2 words
    ]


def test_subset_statistics_known_values() -> None:
    notes = sample_notes()
    stats = subset_statistics(notes)
    assert stats["notes"] == 5 and stats["pii_notes"] == 3
    assert stats["pii_share"] == pytest.approx(0.6)
    # word counts 2, 3, 5, 6, 8
    assert stats["words"] == {"median": 5.0, "q1": 3.0, "q3": 6.0}
    lengths = sorted(len(n.text) for n in notes)
    assert stats["chars"] == {
        "median": float(lengths[2]),
        "q1": float(lengths[1]),
        "q3": float(lengths[3]),
    }
    assert stats["spans"] == 5
    # spans per PII note 2, 2, 1: quartiles by linear interpolation
    assert stats["spans_per_pii_note"] == {"median": 2.0, "q1": 1.5, "q3": 2.0}
    assert stats["label_spans"]["DOCTOR"] == 2 and stats["label_spans"]["ID"] == 0
    assert stats["label_share"]["DOCTOR"] == pytest.approx(0.4)
    assert stats["coarse_spans"] == {"PER": 3, "ORG": 1, "LOC": 0, "TIME": 1, "MISC": 0}
    assert stats["coarse_share"]["PER"] == pytest.approx(0.6)
    with_coarse = stats["pii_notes_with_coarse"]
    assert with_coarse["PER"] == pytest.approx(2 / 3)
    assert with_coarse["ORG"] == pytest.approx(1 / 3) and with_coarse["LOC"] == 0.0
    assert stats["n_pii_notes_without_per"] == 1
    assert stats["pii_notes_without_per"] == pytest.approx(1 / 3)
    assert stats["n_pii_notes_with_repetition"] == 1
    assert stats["pii_notes_with_repetition"] == pytest.approx(1 / 3)


def test_repetition_ignores_labels_and_needs_equal_surfaces() -> None:
    across_labels = made_up("x", [("Kent", "PATIENT"), " went to ", ("KENT", "LOCATION")])
    assert has_repetition(across_labels)
    different = made_up("y", [("Kent", "PATIENT"), " went to ", ("Kenton", "LOCATION")])
    assert not has_repetition(different)
    blanks = made_up("z", [(" ", "OTHER"), "and", ("  ", "OTHER")])
    assert not has_repetition(blanks)  # empty normalised surfaces do not count


def test_subset_statistics_empty_and_unknown_label() -> None:
    stats = subset_statistics([])
    assert stats["notes"] == 0 and stats["spans"] == 0
    assert math.isnan(stats["words"]["median"]) and math.isnan(stats["pii_share"])
    assert math.isnan(stats["pii_notes_without_per"])
    no_pii = subset_statistics([made_up("q", ["nothing to see"])])
    assert no_pii["pii_share"] == 0.0 and math.isnan(no_pii["coarse_share"]["PER"])
    with pytest.raises(ValueError, match="no coarse label"):
        subset_statistics([made_up("u", [("x", "WEBSITE")])])


def test_unigram_jsd() -> None:
    texts = ["The cat sat.", "A dog ran home"]
    assert unigram_jsd(texts, texts) == pytest.approx(0.0, abs=1e-12)
    # the tokeniser lower-cases and drops punctuation
    assert unigram_jsd(["Hello, WORLD!"], ["hello world"]) == pytest.approx(0.0, abs=1e-12)
    assert unigram_jsd(["alpha beta"], ["gamma delta"]) == pytest.approx(1.0)
    # p = (1, 0), q = (1/2, 1/2)
    expected = jensenshannon([1.0, 0.0], [0.5, 0.5], base=2) ** 2
    assert unigram_jsd(["a"], ["a b"]) == pytest.approx(expected)
    assert unigram_jsd(["a b b c"], ["c c a"]) == pytest.approx(unigram_jsd(["c c a"], ["a b b c"]))
    assert math.isnan(unigram_jsd([], ["a"])) and math.isnan(unigram_jsd(["..."], ["a"]))


def test_frechet_distance() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5)) @ rng.normal(size=(5, 5))
    assert frechet_distance(x, x) == pytest.approx(0.0, abs=1e-6)
    shift = np.array([1.0, -2.0, 0.5, 0.0, 3.0])
    assert frechet_distance(x, x + shift) == pytest.approx(float(shift @ shift), rel=1e-6)
    mean_term, cov_term = frechet_components(x, x + shift)
    assert mean_term == pytest.approx(float(shift @ shift)) and cov_term == pytest.approx(
        0, abs=1e-6
    )
    # y = 2x: (S 4S)^(1/2) = 2S, so the covariance term is tr(S) and the mean term |mu|^2
    mean_term, cov_term = frechet_components(x, 2 * x)
    assert mean_term == pytest.approx(float(x.mean(axis=0) @ x.mean(axis=0)))
    assert cov_term == pytest.approx(float(np.trace(np.cov(x, rowvar=False))), rel=1e-6)
    # fewer notes than dimensions: singular covariances, still finite and ~0 for equal sets
    few = rng.normal(size=(6, 20))
    assert frechet_distance(few, few) == pytest.approx(0.0, abs=1e-4)
    assert np.isfinite(frechet_distance(few, rng.normal(size=(4, 20))))
    assert math.isnan(frechet_distance(x[:1], x)) and math.isnan(frechet_distance(x, x[:0]))


class FakeEncoder:
    """Deterministic stand-in for SentenceEncoder: a vector from each text's letters."""

    name = "fake-encoder"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed(
        self, texts: Sequence[str], batch_size: int = 32, progress: bool = False
    ) -> np.ndarray:
        self.seen += list(texts)
        vectors = np.zeros((len(texts), 4), dtype=np.float32)
        for row, text in enumerate(texts):
            vectors[row] = [len(text), text.count("e"), text.count(" "), sum(map(ord, text)) % 7]
        return vectors


def test_diagnose_and_write(tmp_path: Path) -> None:
    real = sample_notes("train")
    synthetic = [
        made_up("s1", ["Called ", ("Ann Lee", "PATIENT"), " today"]),
        made_up("s2", ["Letter from ", ("Dr Ross", "DOCTOR"), " on ", ("2 May", "DATE")]),
        made_up("s3", ["Short visit, all fine"]),
    ]
    subsets = {
        "real train": real,
        "synthetic (all)": synthetic,
        "synthetic PII": synthetic[:2],
        "synthetic no-PII": synthetic[2:],
        "real holdout": [],
        "real again": real,
    }
    encoder = FakeEncoder()
    diag = diagnose(subsets, "real train", encoder)  # type: ignore[arg-type]
    assert sorted(encoder.seen) == sorted({n.text for n in real + synthetic})  # each text once
    assert diag.subsets == list(subsets)
    assert set(diag.divergences) == set(subsets) - {"real train"}
    assert diag.divergences["real again"]["unigram_jsd"] == pytest.approx(0.0, abs=1e-12)
    assert diag.divergences["real again"]["frechet_distance"] == pytest.approx(0.0, abs=1e-6)
    assert diag.divergences["synthetic (all)"]["frechet_distance"] > 0
    assert math.isnan(diag.divergences["synthetic no-PII"]["frechet_distance"])  # one note
    assert math.isnan(diag.divergences["real holdout"]["unigram_jsd"])
    assert diag.statistics["synthetic PII"]["pii_notes_without_per"] == 0.0
    with pytest.raises(ValueError, match="reference"):
        diagnose(subsets, "missing", None)

    paths = write_diagnostics(diag, tmp_path / "out")
    assert sorted(p.name for p in paths.values()) == sorted(OUTPUTS)
    document = json.loads((tmp_path / "out" / "diagnostics.json").read_text())  # strict JSON
    assert document["reference"] == "real train" and document["encoder"] == "fake-encoder"
    assert document["statistics"]["real holdout"]["words"]["median"] is None
    assert document["statistics"]["real train"]["pii_notes_without_per"] == pytest.approx(1 / 3)
    markdown = (tmp_path / "out" / "diagnostics.md").read_text()
    assert "| real train | 5 | 3 (60.0%) | 5 [3\u20136] |" in markdown
    assert "| real train (n=3) | 66.7 | 33.3 | 0.0 | 33.3 | 0.0 | 33.3 | 33.3 |" in markdown
    assert "| PER | 3 (60.0%) | 2 (66.7%) |" in markdown
    assert "| real holdout | 0 | n/a | n/a |" in markdown
    page = (tmp_path / "out" / "diagnostics.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<table>") == markdown.count("\n|---")
    assert "<td>real train</td>" in page
    csv_text = (tmp_path / "out" / "diagnostics.csv").read_text().splitlines()
    assert csv_text[0] == "subset,section,key,value"
    assert "real train,coarse_spans,PER,3" in csv_text
    for figure in ("lengths.png", "labels.png"):
        assert (tmp_path / "out" / figure).read_bytes().startswith(b"\x89PNG")
    assert not list((tmp_path / "out").glob(".*tmp"))  # atomic writes left nothing behind

    no_embeddings = diagnose({"r": real, "s": synthetic}, "r", None)
    assert math.isnan(no_embeddings.divergences["s"]["frechet_distance"])
    assert no_embeddings.divergences["s"]["unigram_jsd"] > 0


def test_parse_subset_and_derive() -> None:
    assert parse_subset("real train=results/split/notes.parquet:train") == FileSubset(
        "real train", Path("results/split/notes.parquet"), ("train",)
    )
    assert parse_subset("syn=pool.parquet") == FileSubset("syn", Path("pool.parquet"), ())
    assert parse_subset("r=a.parquet:train, seed") == FileSubset(
        "r", Path("a.parquet"), ("train", "seed")
    )
    assert parse_subset("odd=x:y.parquet:") == FileSubset("odd", Path("x:y.parquet"), ())
    assert parse_subset("n=a=b.parquet").path == Path("a=b.parquet")  # first '=' splits
    for bad in ("no-equals.parquet", "=a.parquet", "name=", "name=:train"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_subset(bad)
    assert parse_derived("synthetic PII=synthetic (all):pii") == DerivedSubset(
        "synthetic PII", "synthetic (all)", "pii"
    )
    assert parse_derived("n=a:b:no-pii") == DerivedSubset("n", "a:b", "no-pii")
    for bad in ("n=base:maybe", "n=base", "n=:pii"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_derived(bad)


@pytest.fixture
def stage_inputs(tmp_path: Path) -> tuple[Path, Path]:
    real = [
        *sample_notes("train"),
        made_up(
            "h1", ["Seen at ", ("Oak Clinic", "HOSPITAL"), " by ", ("Dr Ames", "DOCTOR")], "holdout"
        ),
        made_up("h2", ["Nothing of note today"], "holdout"),
    ]
    synthetic = [
        made_up("s1", ["Called ", ("Ann Lee", "PATIENT"), " today"]),
        made_up("s2", ["Letter from ", ("Dr Ross", "DOCTOR"), " on ", ("2 May", "DATE")]),
        made_up("s3", ["Short visit, all fine"]),
        made_up("s4", ["Plan unchanged for now"]),
    ]
    write_notes(real, tmp_path / "split" / "notes.parquet")
    write_notes(synthetic, tmp_path / "pool.parquet")
    return tmp_path / "split" / "notes.parquet", tmp_path / "pool.parquet"


def stage_argv(split: Path, pool: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--log",
        str(out / "stage.log"),
        STAGE,
        "--subset",
        f"real train={split}:train",
        "--subset",
        f"synthetic (all)={pool}",
        "--derive",
        "synthetic PII=synthetic (all):pii",
        "--derive",
        "synthetic no-PII=synthetic (all):no-pii",
        "--subset",
        f"real holdout={split}:holdout",
        "--reference",
        "real train",
        "--out-dir",
        str(out),
        *extra,
    ]


def test_stage_end_to_end_with_encoder(stage_inputs: tuple[Path, Path], tmp_path: Path) -> None:
    from ner_helpers import tiny_encoder_dir

    split, pool = stage_inputs
    encoder_dir = tiny_encoder_dir(tmp_path / "tiny-encoder", layers=1, hidden=16)
    out = tmp_path / "diag"
    argv = stage_argv(split, pool, out, "--encoder", str(encoder_dir), "--device", "cpu")
    assert cli.main(argv) == 0
    document = json.loads((out / "diagnostics.json").read_text())
    assert document["subsets"] == [
        "real train",
        "synthetic (all)",
        "synthetic PII",
        "synthetic no-PII",
        "real holdout",
    ]
    stats = document["statistics"]
    assert [stats[name]["notes"] for name in document["subsets"]] == [5, 4, 2, 2, 2]
    assert stats["synthetic no-PII"]["spans"] == 0
    assert document["encoder"] == str(encoder_dir)
    for name in ("synthetic (all)", "synthetic PII", "synthetic no-PII", "real holdout"):
        divergence = document["divergences"][name]
        assert 0 < divergence["unigram_jsd"] <= 1
        assert divergence["frechet_distance"] is not None and divergence["frechet_distance"] >= 0
    assert document["provenance"]["step"] == STAGE
    assert set(document["provenance"]["inputs"]) == {
        "real train",
        "synthetic (all)",
        "real holdout",
    }
    for name in OUTPUTS:
        assert (out / name).is_file()
    assert "diagnostics ->" in (out / "stage.log").read_text()


def test_stage_without_embeddings_and_errors(
    stage_inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    split, pool = stage_inputs
    out = tmp_path / "plain"
    assert cli.main(stage_argv(split, pool, out, "--no-embeddings")) == 0
    document = json.loads((out / "diagnostics.json").read_text())
    assert document["encoder"] is None
    assert document["divergences"]["synthetic (all)"]["frechet_distance"] is None
    assert document["divergences"]["synthetic (all)"]["unigram_jsd"] > 0

    # a known split part with no notes: an empty subset, not an error
    argv = [*stage_argv(split, pool, out, "--no-embeddings"), "--subset", f"seed={split}:seed"]
    assert cli.main(argv) == 0
    assert json.loads((out / "diagnostics.json").read_text())["statistics"]["seed"]["notes"] == 0
    # a misspelt part, an unknown reference, a derive before its base, a derived name
    # reused (a file subset named twice is a union, tested below)
    bad_runs = [
        [*stage_argv(split, pool, out, "--no-embeddings"), "--subset", f"typo={split}:trian"],
        [*stage_argv(split, pool, out, "--no-embeddings"), "--reference", "nope"],
        [
            STAGE,
            "--derive",
            "x=later:pii",
            "--subset",
            f"later={pool}",
            "--reference",
            "later",
            "--out-dir",
            str(out),
            "--no-embeddings",
        ],
        [
            *stage_argv(split, pool, out, "--no-embeddings"),
            "--derive",
            "real train=synthetic (all):pii",
        ],
    ]
    for argv in bad_runs:
        assert cli.main(argv) == 2, argv


def test_a_file_subset_named_twice_is_the_union(stage_inputs: tuple[Path, Path]) -> None:
    split, pool = stage_inputs
    specs = [parse_subset(f"both={split}:train"), parse_subset(f"both={pool}")]
    subsets = load_subsets(specs)
    expected = [n for n in read_notes(split) if n.split == "train"] + read_notes(pool)
    assert [n.note_id for n in subsets["both"]] == [n.note_id for n in expected]


def test_markdown_pages_embed_their_figures(tmp_path: Path) -> None:
    from synthdeid.reporting import markdown_to_html

    figure = tmp_path / "figure.png"
    figure.write_bytes(b"\x89PNG\r\n\x1a\nmade-up")
    page = markdown_to_html(
        "# Audit\n\n![histogram](figure.png)\n", "t", images={"figure.png": figure}
    )
    assert 'src="data:image/png;base64,iVBORw0KGgptYWRlLXVw"' in page
    assert 'src="figure.png"' not in page


def test_figures_label_their_axes_and_name_n_per_subset(tmp_path: Path) -> None:
    from synthdeid.synthesis.diagnostics import plot_labels, plot_lengths

    synthetic = [made_up("s1", ["Called ", ("Ann Lee", "PATIENT"), " today"])]
    subsets = {
        "real train": sample_notes("train"),
        "synthetic PII": synthetic,
        "synthetic no-PII": [made_up("s3", ["Short visit, all fine"])],
    }
    diag = diagnose(subsets, "real train", None)
    fig = plot_labels(diag, tmp_path / "labels.png")
    coarse, canonical = fig.axes
    assert coarse.get_xlabel() == "coarse PHI label"
    assert canonical.get_xlabel() == "canonical PHI label"
    legend = [t.get_text() for t in coarse.get_legend().get_texts()]
    assert legend == [
        "real train (n = 5 spans)",
        "synthetic PII (n = 1 spans)",
        "synthetic no-PII (no spans: n/a)",
    ]
    fig = plot_lengths(diag, tmp_path / "lengths.png")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "subset (n = notes)" and ax.get_ylabel() == "words per note"
