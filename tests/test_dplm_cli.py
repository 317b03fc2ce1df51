"""The DP language model stages end to end through the CLI (made-up notes, tiny GPT-2).

plant-canaries -> train-dp-lm (DP and --no-dp) -> sample-dp-lm -> audit-dp-lm,
plus the refusal and bad-input paths.
"""

from __future__ import annotations

import csv
import json
import random
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from tests.ner_helpers import note_from_pieces

from synthdeid.cli import main
from synthdeid.notes import read_notes, write_notes

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ALLOWLIST = REPO / "resources" / "placeholders.yaml"
SENTENCES = (
    "Patient resting comfortably overnight.",
    "Pain controlled with oral medication.",
    "Family visited in the afternoon.",
    "Breathing unlabored on room air.",
    "Tolerating a regular diet without nausea.",
    "Ambulating in the hallway with assistance.",
)
DOCTORS = ("Dr. Quillfeather", "Dr. Ombrellino", "Dr. Vasterling", "Dr. Penhallow")
SETTINGS = {
    "model": None,
    "scratch": {
        "n_layer": 1,
        "n_head": 2,
        "n_embd": 32,
        "n_positions": 128,
        "vocab_size": 400,
        "min_frequency": 2,
    },
    "control_codes": ["pii"],
    "training": {
        "max_steps": 3,
        "logical_batch_size": 8,
        "physical_batch_size": 8,
        "max_length": 64,
    },
    "privacy": {"target_epsilon": 8.0},
}
SAMPLING = {"per_code": 3, "max_new_tokens": 20, "batch_size": 3, "min_words": 1}
POOLS = {"encoder": False}


@pytest.fixture(scope="module", autouse=True)
def restore_threads() -> Iterator[None]:
    threads = torch.get_num_threads()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    torch.set_num_threads(threads)


def made_up_notes() -> list:
    rng = random.Random(4)
    notes = []
    for i in range(28):
        split = "seed" if i < 20 else "holdout"
        pieces: list = [" ".join(rng.sample(SENTENCES, 3)), " Seen by "]
        if i % 3:
            pieces += [(rng.choice(DOCTORS), "DOCTOR"), " today."]
        else:
            pieces += ["the night team."]
        notes.append(note_from_pieces(f"n{i:02d}", f"p{i // 2:02d}", pieces, split))
    return notes


def run_ok(*argv: str) -> None:
    assert (
        main([*argv, *([] if argv[0] in {"mask-seeds", "plant-canaries"} else ["--no-progress"])])
        == 0
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dplm_cli")
    p = {name: root / name for name in ("notes.parquet", "masked.parquet")}
    p["removed.parquet"] = root / "local" / "removed.parquet"  # mask-seeds writes it there only
    write_notes(made_up_notes(), p["notes.parquet"])
    run_ok(
        "mask-seeds", "--notes", str(p["notes.parquet"]), "--out", str(p["masked.parquet"]),
        "--removed", str(p["removed.parquet"]), "--summary", str(root / "mask.json"),
    )  # fmt: skip
    canaries = root / "canaries.parquet"
    run_ok(
        "plant-canaries", "--count", "3", "--seed", "1", "--outliers", "2", "--out", str(canaries)
    )
    for name, extra in (("dp", []), ("non_dp", ["--no-dp"])):
        run_ok(
            "train-dp-lm", "--masked", str(p["masked.parquet"]), "--canaries", str(canaries),
            "--allowlist", str(ALLOWLIST), "--settings", json.dumps(SETTINGS), *extra,
            "--out-dir", str(root / name / "model"), "--privacy-json", str(root / name / "privacy.json"),
            "--threads", "1",
        )  # fmt: skip
        run_ok(
            "sample-dp-lm", "--model", str(root / name / "model"), "--masked", str(p["masked.parquet"]),
            "--notes", str(p["notes.parquet"]), "--removed", str(p["removed.parquet"]),
            "--allowlist", str(ALLOWLIST), "--settings", json.dumps(SAMPLING),
            "--pool-settings", json.dumps(POOLS), "--name", name,
            "--samples", str(root / name / "samples.parquet"), "--pii", str(root / name / "pii.parquet"),
            "--no-pii", str(root / name / "no_pii.parquet"), "--removals", str(root / name / "removals.parquet"),
            "--summary", str(root / name / "summary.json"), "--threads", "1",
        )  # fmt: skip
    run_ok(
        "audit-dp-lm",
        "--run", f"dp={root / 'dp' / 'samples.parquet'}:{root / 'dp' / 'model'}",
        "--run", f"non_dp={root / 'non_dp' / 'samples.parquet'}:{root / 'non_dp' / 'model'}",
        "--masked", str(p["masked.parquet"]), "--canaries", str(canaries),
        "--notes", str(p["notes.parquet"]), "--settings", json.dumps({"resamples": 200}),
        "--out-dir", str(root / "audit"), "--threads", "1",
    )  # fmt: skip
    return {"root": root, "canaries": canaries, **p}


def test_privacy_json_beside_and_inside_the_model(work: dict[str, Path]) -> None:
    root = work["root"]
    dp = json.loads((root / "dp" / "privacy.json").read_text())
    assert dp == json.loads((root / "dp" / "model" / "privacy.json").read_text())
    assert dp["dp"] is True and 0 < dp["epsilon"] <= 8.01
    assert dp["N"] == 20 + 3 + 2  # masked seed notes, canaries and outliers
    for key in ("delta", "noise_multiplier", "sample_rate", "steps", "accountant", "secure_mode"):
        assert dp[key] is not None, key
    non_dp = json.loads((root / "non_dp" / "privacy.json").read_text())
    assert non_dp["dp"] is False and non_dp["epsilon"] is None
    assert set(dp) == set(non_dp)
    assert non_dp["steps"] == dp["steps"] == 3 and non_dp["sample_rate"] == dp["sample_rate"]
    lm = json.loads((root / "dp" / "model" / "synthdeid_lm.json").read_text())
    assert lm["examples"] == {
        "seed": 20,
        "canary": 3,
        "outlier": 2,
        "truncated": lm["examples"]["truncated"],
    }


def test_samples_are_kept_raw_and_accepted_ones_are_filled_exactly(work: dict[str, Path]) -> None:
    root = work["root"]
    samples = pq.read_table(root / "dp" / "samples.parquet").to_pylist()
    assert len(samples) == 2 * SAMPLING["per_code"]  # codes pii and no_pii
    assert {s["code"] for s in samples} == {"pii", "no_pii"}
    summary = json.loads((root / "dp" / "summary.json").read_text())["summary"]
    assert summary["samples"] == len(samples)
    assert summary["accepted"] == sum(s["status"] == "accepted" for s in samples)
    pooled = read_notes(root / "dp" / "pii.parquet") + read_notes(root / "dp" / "no_pii.parquet")
    surfaces = {d.casefold() for d in DOCTORS}
    for note in pooled:
        assert note.split == "synthetic" and note.source == "synthetic:dplm:dp"
        assert "[[" not in note.text
        assert not any(s in note.text.casefold() for s in surfaces)


def test_audit_outputs(work: dict[str, Path]) -> None:
    audit = work["root"] / "audit"
    for name in (
        "audit.json",
        "audit.md",
        "audit.csv",
        "audit.html",
        "max_rouge_l.png",
        "canaries.png",
        "outliers.png",
    ):
        assert (audit / name).stat().st_size > 0, name
    data = json.loads((audit / "audit.json").read_text())
    assert set(data["models"]) == {"dp", "non_dp"}
    assert data["training_notes"] == 25
    dp = data["models"]["dp"]
    assert len(dp["memorization"]["max_rouge_l"]) == 2 * SAMPLING["per_code"]
    assert dp["canaries"]["n_canaries"] == 3 and dp["canaries"]["kind"] == "canary"
    outliers = dp["outliers"]
    assert outliers["kind"] == "outlier" and outliers["n_canaries"] == 2
    assert len(outliers["rows"]) == 2 and outliers["rows"][0]["canary_id"] == "outlier_001"
    assert outliers["n_samples"] == 2 * SAMPLING["per_code"]
    markdown = (audit / "audit.md").read_text()
    assert "### Canaries" in markdown and "### Outliers" in markdown
    assert "![Best ROUGE-L of each outlier](outliers.png)" in markdown
    with (audit / "audit.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["model"] for r in rows} == {"dp", "non_dp"}
    assert all(r["outliers_regenerated"] in {"0", "1", "2"} for r in rows)
    assert all(0 <= float(r["outlier_mean_best_rouge_l"]) <= 1 for r in rows)
    assert "canaries_reproduced" in rows[0] and "canary_mean_best_rouge_l" in rows[0]
    assert dp["perplexity"]["notes"] == 8 and dp["perplexity"]["perplexity"] > 1
    assert dp["privacy"]["dp"] is True
    samples = pq.read_table(work["root"] / "dp" / "samples.parquet").to_pylist()
    outcomes = dp["outcomes"]
    assert outcomes["samples"] == len(samples)
    assert outcomes["ended"] == sum(s["finished"] for s in samples)
    assert outcomes["accepted"] == sum(s["status"] == "accepted" for s in samples)
    share = outcomes["accepted_share"]
    assert (
        share["ci_lo"] <= share["estimate"] == outcomes["accepted"] / len(samples) <= share["ci_hi"]
    )
    exposure = dp["exposure"]
    assert exposure["references"] == 200 and len(exposure["exposures"]) == 3
    assert all(0 <= e <= exposure["ceiling"] for e in exposure["exposures"])
    assert "### Canary exposure" in (audit / "audit.md").read_text()
    assert "| dp | yes |" in (audit / "audit.md").read_text()


def test_dp_lora_on_a_pretrained_model_through_sampling_and_the_audit(
    work: dict[str, Path], tmp_path: Path
) -> None:
    from tests.dplm_helpers import tiny_pretrained_lm

    pretrained = tiny_pretrained_lm(tmp_path / "pretrained")
    settings = {**SETTINGS, "model": str(pretrained), "lora": {"rank": 4, "alpha": 8}}
    run_ok(
        "train-dp-lm", "--masked", str(work["masked.parquet"]), "--canaries", str(work["canaries"]),
        "--allowlist", str(ALLOWLIST), "--settings", json.dumps(settings),
        "--out-dir", str(tmp_path / "model"), "--privacy-json", str(tmp_path / "privacy.json"),
        "--threads", "1",
    )  # fmt: skip
    privacy = json.loads((tmp_path / "privacy.json").read_text())
    assert privacy["dp"] is True and 0 < privacy["epsilon"] <= 8.01
    trained = privacy["trained_parameters"]
    assert trained["mode"] == "lora" and trained["trained"] < trained["total"]
    assert all("lora_" in n or n.endswith("added.weight") for n in trained["names"])
    lm = json.loads((tmp_path / "model" / "synthdeid_lm.json").read_text())
    assert lm["lora"]["rank"] == 4 and lm["model"]["source"]["kind"] == "directory"
    assert str(tmp_path) not in json.dumps(lm["model"])  # no local path in the provenance
    run_ok(
        "sample-dp-lm", "--model", str(tmp_path / "model"), "--masked", str(work["masked.parquet"]),
        "--notes", str(work["notes.parquet"]), "--removed", str(work["removed.parquet"]),
        "--allowlist", str(ALLOWLIST), "--settings", json.dumps(SAMPLING),
        "--pool-settings", json.dumps(POOLS), "--name", "lora",
        "--samples", str(tmp_path / "samples.parquet"), "--pii", str(tmp_path / "pii.parquet"),
        "--no-pii", str(tmp_path / "no_pii.parquet"), "--removals", str(tmp_path / "removals.parquet"),
        "--summary", str(tmp_path / "summary.json"), "--threads", "1",
    )  # fmt: skip
    run_ok(
        "audit-dp-lm", "--run", f"lora={tmp_path / 'samples.parquet'}:{tmp_path / 'model'}",
        "--masked", str(work["masked.parquet"]), "--canaries", str(work["canaries"]),
        "--notes", str(work["notes.parquet"]), "--settings", json.dumps({"resamples": 50}),
        "--out-dir", str(tmp_path / "audit"), "--threads", "1",
    )  # fmt: skip
    audit = json.loads((tmp_path / "audit" / "audit.json").read_text())["models"]["lora"]
    assert len(audit["memorization"]["max_rouge_l"]) == 2 * SAMPLING["per_code"]
    assert audit["perplexity"]["perplexity"] > 1 and audit["privacy"]["dp"] is True


def test_a_refused_target_writes_nothing(work: dict[str, Path], tmp_path: Path) -> None:
    settings = {**SETTINGS, "privacy": {"target_epsilon": 0.01, "max_noise_multiplier": 2.0}}
    code = main(
        [
            "train-dp-lm", "--masked", str(work["masked.parquet"]), "--allowlist", str(ALLOWLIST),
            "--settings", json.dumps(settings), "--out-dir", str(tmp_path / "model"),
            "--privacy-json", str(tmp_path / "privacy.json"), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 2
    assert not (tmp_path / "model").exists() and not (tmp_path / "privacy.json").exists()


def test_bad_inputs_are_named(work: dict[str, Path], tmp_path: Path, capfd) -> None:
    bad = {**SETTINGS, "sampling": {}}
    code = main(
        [
            "train-dp-lm", "--masked", str(work["masked.parquet"]), "--allowlist", str(ALLOWLIST),
            "--settings", json.dumps(bad), "--out-dir", str(tmp_path / "m"), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 2 and "unknown keys ['sampling']" in capfd.readouterr().err
    code = main(
        [
            "audit-dp-lm", "--run", f"dp={work['notes.parquet']}:{tmp_path}",
            "--masked", str(work["masked.parquet"]), "--canaries", str(work["canaries"]),
            "--notes", str(work["notes.parquet"]), "--out-dir", str(tmp_path / "audit"),
        ]
    )  # fmt: skip
    assert code == 2 and "not a train-dp-lm model directory" in capfd.readouterr().err
