"""The tabular regime's stages end to end on the breast cancer table (Lorenzo et al. 2026).

prepare -> fit (DP and non-DP) -> compare -> subsample -> verbalize (seeded
grammar, and an OpenAI-compatible server on 127.0.0.1 with scripted and
adversarial answers) -> faithfulness (rules, and an LLM judge over HTTP).
The two opacus environments are exercised here too: DP-CTGAN under the
opacus 0.14 overlay, DP-SGD under the main env's opacus 1.6.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

import llm_server
from llm_server import ok_body
from synthdeid import cli
from synthdeid.notes import read_notes

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "resources" / "tabular" / "breast_cancer.yaml"
ALLOWLIST = ROOT / "resources" / "placeholders.yaml"
REPORT_PROMPT = ROOT / "resources" / "prompts" / "tabular_report.yaml"
JUDGE_PROMPT = ROOT / "resources" / "prompts" / "tabular_judge.yaml"
OVERLAY = Path(sys.prefix) / "opt" / "dpgan-overlay"

chat_server = llm_server.chat_server  # the fixture


def run(*argv: str) -> int:
    return cli.main(list(argv))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The prepared table and two fitted synthesizers, shared by the module's tests."""
    root = tmp_path_factory.mktemp("tabular")
    prepared = root / "prepared.parquet"
    assert (
        run(
            "prepare-tabular",
            "--source",
            '{"sklearn": "breast_cancer"}',
            "--spec",
            str(SPEC),
            "--out",
            str(prepared),
            "--summary",
            str(root / "prepared.json"),
        )
        == 0
    )
    for name, budget in (("mst", ["--epsilon", "3"]), ("gaussian_copula", [])):
        assert fit(root, name, *budget, "--samples", "3") == 0
    return root


def fit(root: Path, name: str, *extra: str, env_dir: str | None = None) -> int:
    out = root / (env_dir or name)
    return run(
        "fit-dp-tabular",
        "--prepared",
        str(root / "prepared.parquet"),
        "--spec",
        str(SPEC),
        "--synthesizer",
        name,
        *extra,
        "--out",
        str(out / "samples.parquet"),
        "--privacy-json",
        str(out / "privacy.json"),
        "--no-progress",
    )


def test_prepare_keeps_only_the_spec_variables_split_50_50(work: Path) -> None:
    frame = pd.read_parquet(work / "prepared.parquet")
    summary = json.loads((work / "prepared.json").read_text())
    assert summary["records"] == 569 and summary["splits"] == {"train": 285, "holdout": 284}
    assert len(frame.columns) == 2 + 12  # record_id, split, the 12 variables; nothing else
    assert "mean radius" not in frame.columns and "target" not in frame.columns


def test_dp_fit_records_a_budget_that_sums_to_the_configured_epsilon(work: Path) -> None:
    privacy = json.loads((work / "mst" / "privacy.json").read_text())
    assert privacy["dp"] is True and privacy["epsilon_total"] == 3.0
    assert privacy["preprocessor_epsilon_spent"] + privacy["synthesizer_epsilon"] == 3.0
    assert privacy["sums_to_total"] is True and privacy["delta"] > 0
    samples = pd.read_parquet(work / "mst" / "samples.parquet")
    assert sorted(samples["sample"].unique()) == [0, 1, 2]
    assert samples["record_id"].is_unique and len(samples) == 3 * 285
    baseline = json.loads((work / "gaussian_copula" / "privacy.json").read_text())
    assert baseline["dp"] is False and "epsilon_total" not in baseline


def test_comparison_scores_every_synthesizer_against_the_real_holdout(work: Path) -> None:
    out = work / "comparison"
    code = run(
        "evaluate-tabular",
        "--prepared",
        str(work / "prepared.parquet"),
        "--spec",
        str(SPEC),
        "--run",
        f"mst (eps 3)={work / 'mst' / 'samples.parquet'}",
        "--run",
        f"gaussian_copula={work / 'gaussian_copula' / 'samples.parquet'}",
        "--settings",
        '{"encoder": false}',
        "--out-dir",
        str(out),
        "--no-progress",
    )
    assert code == 0
    results = json.loads((out / "comparison.json").read_text())["results"]
    assert [r["label"] for r in results] == ["holdout (real)", "mst (eps 3)", "gaussian_copula"]
    for result in results[1:]:
        metrics = result["metrics"]
        assert metrics["overall"]["n"] == 3 and 0 < metrics["overall"]["mean"] <= 1
        assert 0 <= metrics["dcr_share"]["mean"] <= 1
        assert metrics["identical_match_share"]["std"] >= 0
    table = (out / "comparison.md").read_text()
    assert "Accuracy - trivariate" in table and "DCR share" in table and "epsilon 3" in table
    assert (out / "comparison.png").stat().st_size > 10_000
    page = (out / "comparison.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page and "DCR share" in page


def test_comparison_figure_names_its_series_axes_and_samples(tmp_path: Path) -> None:
    from synthdeid.tabular.comparison_report import comparison_figure

    def metric(mean: float | None) -> dict:
        return {"mean": mean, "std": None if mean is None else 0.01, "n": 3}

    keys = ("univariate", "bivariate", "trivariate", "identical_match_share", "dcr_share")
    results = [
        {"label": "holdout (real)", "samples": 1, "metrics": {k: metric(0.9) for k in keys[:3]}},
        {"label": "mst (eps 3)", "samples": 3, "metrics": {k: metric(0.5) for k in keys}},
        {"label": "aim", "samples": 3, "metrics": {**{k: metric(0.4) for k in keys}}},
    ]
    results[2]["metrics"]["dcr_share"] = metric(None)
    fig = comparison_figure(results, tmp_path / "comparison.png")
    fidelity, novelty = fig.axes
    legend = [t.get_text() for t in novelty.get_legend().get_texts()]
    assert legend[0] == "identical matches with training rows" and legend[1].startswith("DCR")
    assert not any("_" in entry for entry in legend)  # no raw keys
    assert [t.get_text() for t in fidelity.get_legend().get_texts()] == [
        "univariate",
        "bivariate",
        "trivariate",
    ]
    assert [t.get_text() for t in fidelity.get_xticklabels()][1] == "mst (eps 3)\n(n = 3)"
    assert fidelity.get_ylabel() and novelty.get_ylabel() and fidelity.get_xlabel()
    # the reference has no novelty figures, aim no DCR share: n/a, not a bar at 0
    assert [t.get_text() for t in novelty.texts] == ["n/a", "n/a", "n/a"]


def test_a_dp_synthesizer_without_epsilon_writes_nothing(work: Path) -> None:
    assert fit(work, "aim", env_dir="aim_refused") == 2
    assert not (work / "aim_refused").exists()


def test_dp_ctgan_refuses_the_main_env_opacus(work: Path, capsys) -> None:
    import opacus

    if opacus.__version__.startswith("0.14"):
        pytest.skip("this environment already has opacus 0.14")
    assert fit(work, "dp_ctgan", "--epsilon", "3", env_dir="dpctgan_refused") == 2
    error = capsys.readouterr().err
    assert "opacus 0.14" in error and "dpgan" in error
    assert not (work / "dpctgan_refused").exists()


def test_both_opacus_environments_run(work: Path) -> None:
    """DP-CTGAN in the dpgan overlay (opacus 0.14), DP-SGD in the main env (opacus 1.6)."""
    if not OVERLAY.is_dir():
        pytest.skip(f"{OVERLAY} is absent: build the env with scripts/setup-env.sh")
    out = work / "dp_ctgan"
    command = [
        sys.executable,
        "-m",
        "synthdeid",
        "fit-dp-tabular",
        "--prepared",
        str(work / "prepared.parquet"),
        "--spec",
        str(SPEC),
        "--synthesizer",
        "dp_ctgan",
        "--epsilon",
        "3",
        "--settings",
        '{"epochs": 2, "batch_size": 64}',
        "--samples",
        "2",
        "--out",
        str(out / "samples.parquet"),
        "--privacy-json",
        str(out / "privacy.json"),
        "--no-progress",
    ]
    env = {**os.environ, "PYTHONPATH": str(OVERLAY)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    privacy = json.loads((out / "privacy.json").read_text())
    assert 0 < privacy["library_reported_epsilon"] <= privacy["synthesizer_epsilon"] == 3.0

    # the main env: opacus 1.6 runs a DP-SGD step (what the DP language model needs)
    import opacus
    import torch

    assert opacus.__version__.startswith("1.6")
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    private, optimizer, loader = opacus.PrivacyEngine().make_private(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
    )
    before = [p.detach().clone() for p in private.parameters()]
    features, labels = next(iter(loader))
    torch.nn.functional.cross_entropy(private(features), labels).backward()
    optimizer.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, private.parameters(), strict=True))


def subsample(work: Path, size: int) -> Path:
    out = work / f"subsample_{size}.parquet"
    code = run(
        "subsample-tabular",
        "--samples",
        str(work / "mst" / "samples.parquet"),
        "--spec",
        str(SPEC),
        "--strata",
        "diagnosis",
        "mean_radius",
        "--size",
        str(size),
        "--out",
        str(out),
        "--stats",
        str(work / f"subsample_{size}.json"),
    )
    assert code == 0
    return out


def verbalize(work: Path, rows: Path, name: str, settings: dict) -> Path:
    out = work / name
    code = run(
        "verbalize-tabular",
        "--subsample",
        str(rows),
        "--spec",
        str(SPEC),
        "--allowlist",
        str(ALLOWLIST),
        "--prompt",
        str(REPORT_PROMPT),
        "--settings",
        json.dumps(settings),
        "--reports",
        str(out / "reports.parquet"),
        "--pii",
        str(out / "pii.parquet"),
        "--no-pii",
        str(out / "no_pii.parquet"),
        "--removals",
        str(out / "removals.parquet"),
        "--summary",
        str(out / "summary.json"),
        "--no-progress",
    )
    assert code == 0
    return out


def faithfulness(work: Path, reports: Path, name: str, *judge: str) -> dict:
    out = work / name
    code = run(
        "check-faithfulness",
        "--reports",
        str(reports),
        "--spec",
        str(SPEC),
        *judge,
        "--out-dir",
        str(out),
        "--no-progress",
    )
    assert code == 0
    return json.loads((out / "faithfulness.json").read_text())


def assert_exact_offsets(pool: Path) -> list:
    notes = read_notes(pool)
    for note in notes:
        assert note.spans, note.note_id
        assert {s.label for s in note.spans} <= {"PATIENT", "DOCTOR", "DATE", "HOSPITAL"}
        assert "[[" not in note.text
        for span in note.spans:
            assert note.text[span.start : span.end].strip() == note.text[span.start : span.end]
    return notes


def test_grammar_reports_fill_into_a_pool_and_state_every_value(work: Path, capsys) -> None:
    rows = subsample(work, 12)
    out = verbalize(
        work, rows, "grammar", {"rules": [{"kind": "draw_within", "variable": "mean_area"}]}
    )
    assert "seeded grammar, not by a language model" in capsys.readouterr().err
    reports = pd.read_parquet(out / "reports.parquet")
    assert len(reports) == 12 and set(reports["status"]) == {"accepted"}
    assert set(reports["generator"]) == {"grammar"}
    assert all("draw_within:mean_area" in list(r) for r in reports["rules_applied"])
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["language_model"] is False and summary["pii_notes"] == 12
    notes = assert_exact_offsets(out / "pii.parquet")
    assert {n.source for n in notes} == {"synthetic:tabular:grammar"}
    scores = faithfulness(work, out / "reports.parquet", "grammar_faithfulness")
    assert scores["checker"] == "rules" and scores["overall_accuracy"] == 1.0
    assert scores["document_buckets"]["Perfect"] == 1.0
    text = (work / "grammar_faithfulness" / "faithfulness.md").read_text()
    assert "seeded grammar" in text
    assert "The rules checker found every variable stated correctly in all 12 reports" in text
    page = (work / "grammar_faithfulness" / "faithfulness.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page


def report_from_prompt(user: str) -> str:
    """A faithful report for a prompt: every '- label: value' line stated, ranges at midpoint."""
    sentences = []
    for label, value in re.findall(r"^- (.+?): (.+)$", user, re.MULTILINE):
        found = re.match(r"to be selected within the range of ([\d.]+) to ([\d.]+)", value)
        if found:
            value = f"{(float(found.group(1)) + float(found.group(2))) / 2:.4g}"
        sentences.append(f"The {label} is {value}.")
    return (
        "Patient [[PATIENT_1]] seen at [[HOSPITAL_1]] on [[DATE_1]].\n"
        + " ".join(sentences)
        + "\nSigned: [[DOCTOR_1]]"
    )


def test_llm_reports_over_http_are_validated_filled_and_judged(work: Path, chat_server) -> None:
    rows = subsample(work, 8)
    lock = threading.Lock()
    served = {"reports": 0, "judge": 0}

    def answer(request_json):
        user = llm_server.last_user_message(request_json)
        with lock:
            if 'Reply with a JSON object: {"note"' in user:
                served["reports"] += 1
                n = served["reports"]
                good = report_from_prompt(user)
                content = {
                    1: '{"note": "Patient [[PATIENT_1]] has a',  # cut off: invalid JSON
                    2: json.dumps({"note": good.replace("[[DATE_1]]", "3/14/2019")}),
                    3: json.dumps({"note": good + " Call [[EMAIL_1]]."}),
                }.get(n, json.dumps({"note": good}))
                return 200, ok_body(content), {}
            served["judge"] += 1
            if served["judge"] == 1:
                return 200, ok_body("I think it is fine"), {}  # not JSON at all
            names = re.findall(r"^(\w+) \(", user, re.MULTILINE)
            verdicts = {name: {"correct": "yes", "reference": ""} for name in names}
            return 200, ok_body("```json\n" + json.dumps(verdicts) + "\n```"), {}

    chat_server.handler = answer
    backend = {
        "kind": "openai",
        "base_url": chat_server.url,
        "model": "scripted",
        "concurrency": 1,
        "max_retries": 0,
        "timeout_s": 10,
    }
    out = verbalize(work, rows, "http", {"backend": backend, "generation": {"temperature": 0.0}})
    reports = pd.read_parquet(out / "reports.parquet")
    reasons = sorted(r for r in reports["reason"] if r)
    assert reasons == ["identifier_like:date", "invalid_json", "placeholder_not_allowlisted"]
    accepted = reports[reports["status"] == "accepted"]
    assert len(accepted) == 5 and set(accepted["generator"]) == {"llm:scripted"}
    assert accepted["input_tokens"].notna().all()
    notes = assert_exact_offsets(out / "pii.parquet")
    assert len(notes) == 5 and "3/14/2019" not in "".join(n.text for n in notes)
    for body in chat_server.requests[:8]:
        prompt = llm_server.last_user_message(body)
        assert "to be selected within the range of" in prompt and "[[PATIENT_1]]" in prompt

    rules = faithfulness(work, out / "reports.parquet", "http_rules")
    assert rules["overall_accuracy"] == 1.0  # every accepted report states its row

    judged = faithfulness(
        work,
        out / "reports.parquet",
        "http_judge",
        "--judge-backend",
        json.dumps(backend),
        "--judge-prompt",
        str(JUDGE_PROMPT),
    )
    assert judged["checker"] == "llm:scripted" and judged["judge_failures"] == {"invalid_json": 1}
    assert judged["statuses"]["not_judged"] == 12  # the unreadable answer: 12 variables
    # the unreadable answer judged nothing: its report is left out, not counted as wrong
    assert judged["document_buckets"]["Perfect"] == pytest.approx(1.0)
    # the judge said yes to every pair it judged, as the rules did: full agreement, and a
    # kappa that is undefined (chance agreement 1), reported as such
    assert judged["agreement_with_rules"] == {"pairs": 48, "observed": 1.0, "kappa": None}
    assert "(Cohen's kappa n/a)" in (work / "http_judge" / "faithfulness.md").read_text()

    # a model that wrote no acceptable report: the step says so, every accuracy n/a
    none_accepted = pd.read_parquet(out / "reports.parquet").assign(status="rejected")
    none_accepted.to_parquet(work / "none_accepted.parquet")
    empty = faithfulness(work, work / "none_accepted.parquet", "empty")
    assert empty["reports"] == 0 and empty["overall_accuracy"] is None
    assert "n/a" in (work / "empty" / "faithfulness.md").read_text()
    assert pd.read_parquet(work / "empty" / "pairs.parquet").empty


def test_similarity_with_the_bundled_minilm_embeds_each_distinct_row_once() -> None:
    import numpy as np

    from synthdeid.tabular.comparison import cached_embedder
    from synthdeid.tabular.metrics import similarity

    embed = cached_embedder(None, progress=False)
    train = pd.DataFrame({"a": ["x", "y", "x", "x"], "b": ["p", "q", "p", "q"]})
    vectors = embed(["a: x; b: p", "a: y; b: q", "a: x; b: p"])
    assert vectors.shape[0] == 3 and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert np.array_equal(vectors[0], vectors[2])
    assert similarity(train, train, embed) == pytest.approx(1.0)
    assert 0 < similarity(train, pd.DataFrame({"a": ["z"] * 3, "b": ["r"] * 3}), embed) < 1


def test_comparison_table_is_written_exactly() -> None:
    from synthdeid.tabular.comparison_report import comparison_markdown

    def spread(mean: float | None, std: float | None = None, n: int = 3) -> dict:
        return {"mean": mean, "std": std, "min": mean, "max": mean, "n": n}

    real = {"label": "holdout (real)", "privacy": "real", "samples": 1}
    real["metrics"] = {"overall": spread(0.9, None, 1), "similarity": spread(1.0, None, 1)}
    dp = {"label": "mst (eps 3)", "epsilon": 3.0, "privacy": "epsilon 3", "samples": 3}
    dp["epsilon_accounted"] = 3.0
    dp["metrics"] = {
        "overall": spread(0.74825, 0.00271),
        "similarity": spread(0.5),
        "identical_match_share": spread(0.0),
        "nndr_ratio": spread(None),
        "dcr_share": spread(float("nan")),
    }
    assert comparison_markdown([real, dp]).splitlines()[:9] == [
        "| Metric \\ Synthesizer | holdout (real) | mst (eps 3) |",
        "|---|---|---|",
        "| **Privacy** | real | epsilon 3 |",
        "| **Fidelity** | | |",
        "| Overall accuracy | 90.00% | 74.83% ± 0.27% |",
        "| Accuracy - univariate | - | - |",
        "| Accuracy - bivariate | - | - |",
        "| Accuracy - trivariate | - | - |",
        "| **Similarity** | | |",
    ]
    assert comparison_markdown([real, dp]).splitlines()[9:15] == [
        "| Cosine similarity | 1.000 | 0.500 |",
        "| **Novelty** | | |",
        "| % identical matches (lower is better) | - | 0.00% |",
        "| NNDR, synthetic / holdout (higher is more novel) | - | n/a |",
        "| DCR share (0.5 is ideal) | - | n/a |",  # -: not measured; n/a: undefined
        "| DCR overfitting score (1 is best) | - | - |",
    ]
    # DP-CTGAN's accountant stopped below its budget: the table shows both
    gan = dp | {"label": "dp_ctgan", "epsilon_accounted": 0.878}
    assert comparison_markdown([real, gan]).splitlines()[2] == (
        "| **Privacy** | real | epsilon 0.878 accounted (budget 3) |"
    )
