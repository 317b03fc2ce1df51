"""bench/llm_tasks.py end to end against a scripted OpenAI-compatible server on 127.0.0.1.

A tiny invented corpus (seed, train and holdout notes) is masked and its
seed notes labelled, rewritten and scored; the breast cancer table (from
scikit-learn) gives the rows. The server answers each task with answers
whose right and wrong spans, accepted and rejected templates, faithful and
unfaithful reports and judge verdicts are known, so every figure of
tasks.json and of the table's row is known exactly.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import llm_server
from bench_helpers import bench_module
from llm_server import ScriptedChatServer, last_user_message, ok_body
from ner_helpers import note_from_pieces
from synthdeid import cli
from synthdeid.notes import Note, write_notes
from synthdeid.stats import wilson_interval
from synthdeid.synthesis.template_generation import sample_ids
from synthdeid.tabular.spec import load_spec

chat_server = llm_server.chat_server  # the fixture

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "resources" / "tabular" / "breast_cancer.yaml"
FILLER = (
    "Vital signs stable overnight on room air, tolerating a regular diet, ambulating in "
    "the hallway with assistance. Urine output adequate. Continue current plan and "
    "reassess in the morning with the team."
)
# condition -> (patient, doctor's surname, date) of its seed note; all invented
SEEDS = {
    "pneumonia": ("Mira Lindqvist", "Okafor", "3/14"),
    "cellulitis": ("Tomas Haddad", "Petrov", "4/2"),
    "pancreatitis": ("Ines Moreno", "Welsh", "5/6"),
    "appendicitis": ("Arlo Brennan", "Sato", "6/9"),
    "syncope": ("Della Fox", "Kumar", "7/11"),
}
TRAIN = {"bronchitis": ("Rosa Calloway", "Nguyen", "8/3"), "gout": ("Emil Strand", "Ortiz", "9/1")}
HOLDOUT = {"sepsis": ("Zebulon Quartermaine", "Abernathy", "10/12")}
SIZE, SEED = 4, 0
# the seeded subset of 4 of the 5 seed notes (seed 0): cellulitis is left out
CHOSEN = ("pneumonia", "pancreatitis", "appendicitis", "syncope")

# the teacher's answers: pneumonia all right (3 of 3); pancreatitis no JSON; appendicitis
# the patient right, the doctor named as a patient, the date missed and "hallway" as a
# place (1 right of 3 predicted, 3 gold); syncope nothing (3 gold missed)
TEACHER = {
    "pneumonia": {
        "PATIENT": [{"text": "Mira Lindqvist", "confidence": 0.95}],
        "DOCTOR": [{"text": "Okafor", "confidence": 0.9}],
        "DATE": [{"text": "3/14", "confidence": 0.97}],
    },
    "pancreatitis": "Sure! The patient is Ines and the date is 5/6.",
    "appendicitis": {
        "PATIENT": [
            {"text": "Arlo Brennan", "confidence": 0.9},
            {"text": "Sato", "confidence": 0.8},
        ],
        "LOCATION": [{"text": "hallway", "confidence": 0.6}],
    },
    "syncope": {},
}
GOOD = (
    "Admitted on [[DATE_1]] with {condition}; [[PATIENT_1]] started on antibiotics by "
    "[[DOCTOR_1]]. Afebrile since, sputum thinner, weaned to two liters nasal cannula this "
    "afternoon. Eating half of meals, walked twice with physical therapy. Family aware of plan."
)
# template answers by decoding constraint, and the outcome each must get
TEMPLATES = {
    "placeholders": {
        "pneumonia": ("good", None),
        "pancreatitis": ("date", "identifier_like:date"),
        "appendicitis": ("copied", "copied_seed"),
        "syncope": ("good", None),
    },
    "free": {
        "pneumonia": ("good", None),
        "pancreatitis": ("cut", "invalid_json"),
        "appendicitis": ("name", "identifier_like:name"),
        "syncope": ("prose", "invalid_json"),
    },
}
TEACHER_MAX_TOKENS = 333  # the teacher's answer cap the harness passes on
FILLS = 3  # each accepted template with placeholders is filled this many times
TOKENS = {"teacher": 40, "template": 30, "report": 20, "judge": 10}


def seed_note(condition: str, split: str, people: tuple[str, str, str]) -> Note:
    patient, doctor, date = people
    pieces: list[str | tuple[str, str]] = [
        "Pt ",
        (patient, "PATIENT"),
        f" seen for {condition} by Dr. ",
        (doctor, "DOCTOR"),
        " on ",
        (date, "DATE"),
        ". " + FILLER,
    ]
    return note_from_pieces(f"n-{condition}", f"p-{condition}", pieces, split)


def corpus() -> list[Note]:
    return [
        *(seed_note(c, "seed", p) for c, p in SEEDS.items()),
        *(seed_note(c, "train", p) for c, p in TRAIN.items()),
        *(seed_note(c, "holdout", p) for c, p in HOLDOUT.items()),
    ]


def template_answer(kind: str, condition: str, masked: str) -> str:
    good = GOOD.format(condition=condition)
    return {
        "good": json.dumps({"note": good}),
        "date": json.dumps({"note": good.replace("[[DATE_1]]", "3/14/2019")}),
        "copied": json.dumps({"note": masked}),
        "cut": '{"note": "Admitted for observation',
        "name": json.dumps({"note": good.replace("[[DOCTOR_1]]", "Dr. Jennifer")}),
        "prose": "Here is a new note about the admission, written in the same style.",
    }[kind]


def report(user: str, flip: bool) -> str:
    """A report stating the row's diagnosis (the other one with ``flip``) and nothing else."""
    diagnosis = re.search(r"^- cytological diagnosis: (\w+)$", user, re.MULTILINE).group(1)
    if flip:
        diagnosis = {"malignant": "benign", "benign": "malignant"}[diagnosis]
    return (
        "Patient [[PATIENT_1]] seen at [[HOSPITAL_1]] on [[DATE_1]]. "
        f"Cytological diagnosis: {diagnosis}.\nSigned: [[DOCTOR_1]]"
    )


class Script:
    """Answers every task's requests (one at a time: the backend sends them in order)."""

    def __init__(self, variables: list[str]) -> None:
        self.variables = variables
        self.lock = threading.Lock()
        self.reports = 0
        self.judged = 0

    def __call__(self, body: Any) -> tuple[int, Any, dict[str, str]]:
        user = last_user_message(body)
        condition = next((c for c in (*SEEDS, *TRAIN, *HOLDOUT) if c in user), None)
        if "Clinical note:\n" in user:
            answer = TEACHER[condition]
            content = answer if isinstance(answer, str) else json.dumps(answer)
            return 200, ok_body(content, completion_tokens=TOKENS["teacher"]), {}
        if "<pairs>" in user:
            return 200, ok_body(self.verdicts(), completion_tokens=TOKENS["judge"]), {}
        if "<note>" in user:
            mode = "placeholders" if body.get("response_format") else "free"
            kind, _ = TEMPLATES[mode][condition]
            masked = re.search(r"<note>\n(.*)\n</note>", user, re.DOTALL).group(1)
            content = template_answer(kind, condition, masked)
            return 200, ok_body(content, completion_tokens=TOKENS["template"]), {}
        with self.lock:
            self.reports += 1
            n = self.reports
        # the 1st and 3rd reports state the diagnosis, the 2nd the other one, the 4th is cut
        content = (
            '{"note": "Patient [[PATIENT_1]] has a'
            if n == 4
            else json.dumps({"note": report(user, flip=n == 2)})
        )
        return 200, ok_body(content, completion_tokens=TOKENS["report"]), {}

    def verdicts(self) -> str:
        """The 1st answer is no JSON; then yes for the diagnosis and, in the 2nd, the radius."""
        with self.lock:
            self.judged += 1
            n = self.judged
        if n == 1:
            return "The report looks fine to me."
        yes = {"diagnosis", "mean_radius"} if n == 2 else {"diagnosis"}
        return json.dumps(
            {
                name: {"correct": "yes" if name in yes else "no", "reference": ""}
                for name in self.variables
            }
        )


@pytest.fixture
def torch_threads() -> Iterator[None]:
    """The harness sets torch's threads for its process: put them back after the test."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def load_harness() -> ModuleType:
    """bench/llm_tasks.py as a module."""
    return bench_module("llm_tasks")


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    notes = tmp_path / "split" / "notes.parquet"
    write_notes(corpus(), notes)
    masked, removed = (
        tmp_path / "mask" / "masked.parquet",
        tmp_path / "mask" / "local" / "r.parquet",
    )
    prepared = tmp_path / "tabular" / "prepared.parquet"
    cli.run_stage(
        "mask-seeds", "--notes", str(notes), "--parts", "seed", "--out", str(masked),
        "--removed", str(removed), "--summary", str(tmp_path / "mask" / "summary.json"),
    )  # fmt: skip
    cli.run_stage(
        "prepare-tabular", "--source", '{"sklearn": "breast_cancer"}', "--spec", str(SPEC),
        "--out", str(prepared), "--summary", str(tmp_path / "tabular" / "summary.json"),
    )  # fmt: skip
    return {"notes": notes, "masked": masked, "removed": removed, "rows": prepared}


def backend(server: ScriptedChatServer) -> dict[str, Any]:
    return {
        "kind": "openai",
        "base_url": server.url,
        "model": "scripted",
        "concurrency": 1,
        "max_retries": 0,
        "timeout_s": 10,
    }


def arguments(server: ScriptedChatServer, inputs: dict[str, Path], out: Path, size: int) -> list:
    return [
        "--model-name",
        "scripted",
        "--backend",
        json.dumps(backend(server)),
        *(f"--{name}={path}" for name, path in inputs.items()),
        *(f"--{task}-size={size}" for task in ("teacher", "template", "verbalize")),
        f"--seed={SEED}",
        f"--fills={FILLS}",
        f"--teacher-max-tokens={TEACHER_MAX_TOKENS}",
        "--threads=1",
        "--out",
        str(out / "scripted"),
        "--table",
        str(out / "llm-tasks.md"),
    ]


def test_every_task_is_measured_and_every_figure_is_the_known_one(
    tmp_path: Path,
    chat_server: ScriptedChatServer,
    inputs: dict[str, Path],
    monkeypatch,
    torch_threads,
) -> None:
    monkeypatch.chdir(REPO)
    ids = [f"n-{c}" for c in SEEDS]
    assert sample_ids(ids, SIZE, SEED) == {f"n-{c}" for c in CHOSEN}
    variables = list(load_spec(SPEC).names)
    chat_server.handler = Script(variables)
    harness = load_harness()
    out = tmp_path / "measured"
    assert harness.main(arguments(chat_server, inputs, out, SIZE)) == 0
    result = json.loads((out / "scripted" / "tasks.json").read_text())
    tasks = result["tasks"]

    # nothing of the holdout, the train part or the left-out seed note reached the model
    sent = json.dumps(chat_server.requests)
    for name in ("Quartermaine", "Abernathy", "Calloway", "Strand", "Haddad", "Petrov"):
        assert name not in sent
    assert "cellulitis" not in sent
    caps = [
        body["max_tokens"]
        for body in chat_server.requests
        if "de-identification annotator" in json.dumps(body)
    ]
    assert caps == [TEACHER_MAX_TOKENS] * SIZE

    # teacher: 4 right of 6 predicted spans, 12 gold spans; 1 of 4 answers not JSON
    teacher = tasks["teacher"]
    assert (teacher["n"], teacher["part"], teacher["part_notes"]) == (4, "seed", 5)
    assert teacher["recall"]["estimate"] == pytest.approx(4 / 12)
    assert teacher["precision"]["estimate"] == pytest.approx(4 / 6)
    assert (teacher["gold_spans"], teacher["predicted_spans"]) == (12, 6)
    per_label = {k: (v["recall"], v["precision"]) for k, v in teacher["per_label"].items()}
    assert per_label["PATIENT"] == (pytest.approx(2 / 4), pytest.approx(2 / 3))
    assert per_label["DOCTOR"] == per_label["DATE"] == (pytest.approx(1 / 4), 1.0)
    assert per_label["LOCATION"] == (None, 0.0)  # no gold place: recall undefined
    assert teacher["invalid_json"] == {"count": 1, "share": 0.25}
    assert teacher["output_tokens"] == 4 * TOKENS["teacher"]
    assert teacher["seconds_per_item"] == pytest.approx(teacher["seconds"] / 4)
    local = out / "scripted" / "local" / "teacher"
    assert (local / "notes.parquet").is_file() and (local / "labels" / "labels.parquet").is_file()

    # templates: the same 4 seeds with each constraint; share of those sent, Wilson 95%
    for mode, expected in TEMPLATES.items():
        found = tasks["templates"][mode]
        accepted = sum(reason is None for _, reason in expected.values())
        rejections: dict[str, int] = {}
        for _, reason in expected.values():
            if reason is not None:
                rejections[reason] = rejections.get(reason, 0) + 1
        interval = wilson_interval(accepted, 4)
        assert (found["requested"], found["refused"], found["sent"], found["n"]) == (4, 0, 4, 4)
        assert found["accepted"] == accepted and found["share"] == accepted / 4
        assert found["ci"] == [pytest.approx(interval.lo), pytest.approx(interval.hi)]
        assert found["rejections"] == rejections
        assert found["output_tokens"] == 4 * TOKENS["template"]
        pool = found["pool"]
        # every template here has placeholders: each is filled FILLS times, all distinct
        assert pool["fills_per_template"] == FILLS
        assert (pool["pii_notes"], pool["no_pii_notes"]) == (FILLS * accepted, 0)
        assert 0.0 < pool["diagnostics"]["unigram_jsd"] <= 1.0
        assert pool["diagnostics"]["frechet_distance"] is None
    assert tasks["templates"]["placeholders"]["accepted"] == 2
    assert tasks["templates"]["free"]["accepted"] == 1

    # verbalizer: 3 of 4 reports accepted; each states the diagnosis only, the 2nd wrongly
    verbalizer = tasks["verbalizer"]
    assert (verbalizer["rows"], verbalizer["sent"], verbalizer["accepted"]) == (4, 4, 3)
    assert verbalizer["n"] == 3 and verbalizer["rejections"] == {"invalid_json": 1}
    assert verbalizer["per_variable"]["diagnosis"] == pytest.approx(2 / 3)
    assert all(verbalizer["per_variable"][v] == 0.0 for v in variables if v != "diagnosis")
    assert verbalizer["faithful_share"] == pytest.approx(2 / 3 / 12)
    assert verbalizer["pairs"] == {"correct": 2, "wrong": 1, "not_mentioned": 33}
    assert verbalizer["faithful_of_stated"] == pytest.approx(2 / 3)
    assert verbalizer["output_tokens"] == 4 * TOKENS["report"]

    # judge: the 1st answer unusable (12 pairs not judged); 24 pairs judged, 22 agree with
    # the rules; yes 3 times (the rules: once): kappa (22/24 - 486/576) / (1 - 486/576)
    judge = tasks["judge"]
    assert (judge["reports"], judge["pairs"], judge["usable"], judge["n"]) == (3, 36, 24, 24)
    assert judge["usable_share"] == pytest.approx(24 / 36)
    assert judge["kappa"] == pytest.approx(42 / 90) and judge["kappa_pairs"] == 24
    assert judge["observed_agreement"] == pytest.approx(22 / 24)
    assert judge["failures"] == {"invalid_json": 1}
    assert judge["statuses"]["not_judged"] == 12

    # speed: the tokens the teacher, templates and verbalizer recorded, over their seconds
    speed = tasks["speed"]
    steps = [teacher, *tasks["templates"].values(), verbalizer]
    tokens = 4 * TOKENS["teacher"] + 8 * TOKENS["template"] + 4 * TOKENS["report"]
    assert speed["output_tokens"] == tokens
    assert speed["seconds"] == pytest.approx(sum(step["seconds"] for step in steps))
    assert speed["tokens_per_second"] == pytest.approx(tokens / speed["seconds"])

    # provenance
    assert result["backend"] == backend(chat_server)
    description = result["backend_description"]
    assert (description["model"], description["base_url"]) == ("scripted", chat_server.url)
    assert result["sizes"] == {
        "teacher": 4,
        "templates": 4,
        "verbalizer": 4,
        "fills_per_template": FILLS,
    }
    assert result["machine"]["cpu"] and result["machine"]["threads"] == 1
    assert datetime.fromisoformat(result["date"]).tzinfo is not None
    assert result["command"].startswith("python bench/llm_tasks.py --model-name scripted")
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    assert result["commit"] == (head.stdout.strip() if head.returncode == 0 else None)

    # the table's row, every figure as tasks.json has it
    text = (out / "llm-tasks.md").read_text()
    assert text.startswith(harness.TITLE) and "never on the holdout" in text
    assert "- `scripted`: teacher 4 seed notes, templates 4 masked seeds, verbalizer 4 rows" in text
    row = next(line for line in text.splitlines() if line.startswith("| scripted |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    p_ci, f_ci = wilson_interval(2, 4), wilson_interval(1, 4)
    assert cells[:8] == [
        "scripted",
        "0.33 / 0.67 [4]",
        "25% (1 of 4)",
        f"50% [4, {p_ci.lo:.0%}-{p_ci.hi:.0%}] / 25% [4, {f_ci.lo:.0%}-{f_ci.hi:.0%}]",
        f"{2 * FILLS} / {FILLS} [{FILLS}]",
        "0.056 [3]",
        "0.47 [24]",
        f"{speed['tokens_per_second']:.1f}",
    ]
    assert cells[8].startswith(f"teacher {teacher['seconds_per_item']:.1f}, templates ")

    # no PHI of a seed note outside the local/ folders
    surfaces = [p for people in SEEDS.values() for p in people[:2]]
    for path in (out / "scripted").rglob("*"):
        if path.is_dir() or "local" in path.relative_to(out).parts or path.suffix == ".png":
            continue
        content = path.read_bytes().decode("utf-8", errors="replace")
        assert not [s for s in surfaces if s in content], path


def test_a_size_of_0_skips_its_task_and_the_table_says_n_a(
    tmp_path: Path,
    chat_server: ScriptedChatServer,
    inputs: dict[str, Path],
    monkeypatch,
    torch_threads,
) -> None:
    monkeypatch.chdir(REPO)
    harness = load_harness()
    assert harness.main(arguments(chat_server, inputs, tmp_path, 0)) == 0
    assert chat_server.count == 0
    result = json.loads((tmp_path / "scripted" / "tasks.json").read_text())
    tasks = result["tasks"]
    for task in (tasks["teacher"], *tasks["templates"].values(), tasks["verbalizer"]):
        assert task == {"run": False, "n": 0, "seconds": None, "seconds_per_item": None}
    assert tasks["judge"]["run"] is False and tasks["speed"]["tokens_per_second"] is None
    row = (tmp_path / "llm-tasks.md").read_text().splitlines()[-1]
    assert row == (
        f"| scripted | n/a | n/a | n/a / n/a | n/a / n/a [{FILLS}] | n/a | n/a | n/a | "
        "teacher n/a, templates "
        "n/a / n/a, verbalizer n/a, judge n/a |"
    )

    # the same model again replaces its row and sizes line; another model adds its own
    harness.update_table(tmp_path / "llm-tasks.md", "other", result)
    harness.update_table(tmp_path / "llm-tasks.md", "scripted", result)
    lines = (tmp_path / "llm-tasks.md").read_text().splitlines()
    assert [line.split("|")[1].strip() for line in lines if line.startswith("| ")][1:] == [
        "scripted",
        "other",
    ]
    assert sum(line.startswith("- `scripted`:") for line in lines) == 1
