"""The generator of the synthetic demo corpus (resources/demo/).

The demo corpus is the project's embedded default input: short clinical-style
notes in four styles (ICU nursing, veterinary consult, pathology report,
radiology report), several per patient, about 30% of them carrying annotated
PHI. Everything in it is made up: names, cities, streets and companies come
from Faker (``en_US``, seeded), every other value from small phrase lists
(``phrases.json`` beside this module, :mod:`synthdeid.demo.phrases`) and a
seeded :class:`random.Random`. No text is taken from any real corpus.

A note is assembled left to right from sentence templates whose slots are
filled with values; a slot whose name is in :data:`SLOT_LABELS` becomes a span
with that canonical label, and its offsets are recorded at the moment it is
inserted (the text is never searched afterwards). Non-PHI notes use only
templates without labelled slots, so they contain no PHI at all.

The output for a given ``(n_notes, seed)`` is fully deterministic; the
committed ``resources/demo/notes.jsonl`` is ``write_demo_corpus`` with the
defaults, and a test checks it has not drifted from the generator.
"""

from __future__ import annotations

import json
import logging
import random
import string
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Protocol

from faker import Faker
from tqdm import tqdm

from synthdeid.artifacts import atomic_text
from synthdeid.demo.phrases import Phrases, Style, load_phrases
from synthdeid.detectors import MONTHS
from synthdeid.errors import ConfigError
from synthdeid.labels import CANONICAL_LABELS

log = logging.getLogger(__name__)

DEFAULT_N_NOTES = 360
DEFAULT_SEED = 20261122
DEFAULT_OUT_DIR = Path("resources/demo")
NOTES_FILE = "notes.jsonl"

Record = dict[str, Any]

#: share of notes that carry PHI (the rest carry none)
PHI_SHARE = 0.30
#: share of patients that are animals (their notes are veterinary consults)
ANIMAL_SHARE = 0.25
#: share of human patients aged 90 or over
OLDEST_SHARE = 0.18
FAKER_LOCALE = "en_US"

STYLES: tuple[str, ...] = ("icu_nursing", "veterinary", "pathology", "radiology")
HUMAN_STYLES: tuple[str, ...] = ("icu_nursing", "pathology", "radiology")

#: template slot name -> canonical label; every other slot is plain text
SLOT_LABELS: dict[str, str] = {
    "doctor": "DOCTOR",
    "patient": "PATIENT",
    "patient_last": "PATIENT",
    "owner": "PATIENT",
    "date": "DATE",
    "date2": "DATE",
    "age": "AGE",
    "phone": "PHONE",
    "mrn": "ID",
    "accession": "ID",
    "hospital": "HOSPITAL",
    "city": "LOCATION",
    "street": "LOCATION",
    "employer": "OTHER",
    "pager": "OTHER",
}

_FORMATTER = string.Formatter()


class _NoteBuilder:
    """Assembles a note left to right, recording span offsets as slots go in."""

    def __init__(self, *, allow_phi: bool) -> None:
        self.allow_phi = allow_phi
        self.parts: list[str] = []
        self.spans: list[dict[str, Any]] = []
        self.length = 0

    def literal(self, text: str) -> None:
        self.parts.append(text)
        self.length += len(text)

    def slot(self, label: str, value: str) -> None:
        if not self.allow_phi:
            raise RuntimeError(f"a {label} slot in a note meant to carry no PHI")
        start = self.length
        self.literal(value)
        self.spans.append({"start": start, "end": self.length, "label": label, "text": value})

    def template(self, template: str, values: Mapping[str, str]) -> None:
        for literal, name, _spec, _conversion in _FORMATTER.parse(template):
            if literal:
                self.literal(literal)
            if name is None:
                continue
            label = SLOT_LABELS.get(name)
            if label is None:
                self.literal(values[name])
            else:
                self.slot(label, values[name])

    def text(self) -> str:
        return "".join(self.parts)


@dataclass
class _Patient:
    patient_id: str
    kind: str  # "human" or "animal"
    values: dict[str, str]
    doctors: list[str]
    base_date: date


class _Names(Protocol):
    """What the generator asks Faker for."""

    def first_name(self) -> str: ...
    def last_name(self) -> str: ...
    def city(self) -> str: ...
    def street_address(self) -> str: ...
    def company(self) -> str: ...


class _NoNames:
    """Stands in for Faker where only the draws from ``rng`` count (the first pass over the
    plan): the same calls, a fixed name, none of Faker's cost. No draw from ``rng``
    depends on a name (a test checks it)."""

    def first_name(self) -> str:
        return "Name"

    last_name = city = street_address = company = first_name


def _format_date(day: date, rng: random.Random) -> str:
    month = MONTHS[day.month - 1]
    forms = (
        f"{day.month}/{day.day}",
        f"{day.month:02d}/{day.day:02d}/{day.year}",
        day.isoformat(),
        f"{day.day:02d}-{month[:3]}-{day.year}",
        f"{month} {day.day}, {day.year}",
    )
    return rng.choice(forms)


def _phone(rng: random.Random, area_codes: Sequence[str]) -> str:
    # 555-0100 to 555-0199 is reserved for fictional use
    area = rng.choice(area_codes)
    line = f"555-01{rng.randint(0, 99):02d}"
    return f"({area}) {line}" if rng.random() < 0.6 else f"{area}-{line}"


def _doctor_name(fake: _Names, rng: random.Random) -> str:
    first, last = fake.first_name(), fake.last_name()
    form = rng.random()
    if form < 0.5:
        return last
    if form < 0.8:
        return f"{first} {last}"
    return f"{first[0]}. {last}"


def _hospital_name(fake: _Names, rng: random.Random, *, animal: bool) -> str:
    forms: tuple[str, ...]
    if animal:
        forms = (f"{fake.city()} Animal Hospital", f"{fake.last_name()} Veterinary Clinic")
    else:
        forms = (
            f"{fake.city()} General Hospital",
            f"{fake.last_name()} Memorial Hospital",
            f"{fake.city()} Regional Medical Center",
        )
    return rng.choice(forms)


def _make_patient(index: int, fake: _Names, rng: random.Random, phrases: Phrases) -> _Patient:
    kind = "animal" if rng.random() < ANIMAL_SHARE else "human"
    first, last = fake.first_name(), fake.last_name()
    values = {
        "patient": f"{first} {last}",
        "patient_last": last,
        "owner": f"{first} {last}",
        "mrn": f"{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}",
        "phone": _phone(rng, phrases.area_codes),
        "city": fake.city(),
        "street": fake.street_address(),
        "hospital": _hospital_name(fake, rng, animal=kind == "animal"),
        "employer": fake.company(),
        "pager": f"{rng.randint(1, 9)}-{rng.randint(1000, 9999)}",
    }
    doctors = [_doctor_name(fake, rng) for _ in range(2)]
    if kind == "human":
        sex = rng.choice("MF")
        oldest = rng.random() < OLDEST_SHARE
        age = rng.randint(90, 103) if oldest else rng.randint(19, 89)
        values.update(
            sex=sex,
            sex_word="man" if sex == "M" else "woman",
            title="Mr." if sex == "M" else "Ms.",
        )
    else:
        species = rng.choice(sorted(phrases.species))
        values.update(
            species=species,
            breed=rng.choice(phrases.species[species].breeds),
            vet_sex=rng.choice(phrases.veterinary_sexes),
            vet_stage=rng.choice(phrases.veterinary_life_stages),
        )
        age = rng.randint(1, 25 if species == "equine" else 16)
    values["age"] = str(age)
    base_date = date(2003, 1, 1) + timedelta(days=rng.randint(0, 21 * 365))
    return _Patient(f"demo-p{index:03d}", kind, values, doctors, base_date)


def _note_values(
    style: str, patient: _Patient, note_day: date, rng: random.Random, phrases: Phrases
) -> dict[str, str]:
    """Slot values for one note: the patient's, plus per-note dates and fillers."""
    values = dict(patient.values)
    values["doctor"] = rng.choice(patient.doctors)
    values["date"] = _format_date(note_day, rng)
    # a second date: an earlier one (a comparison study, an onset) or a later one (a plan)
    if style in ("radiology", "veterinary"):
        second_day = note_day - timedelta(days=rng.randint(3, 400))
    else:
        second_day = note_day + timedelta(days=rng.randint(1, 14))
    values["date2"] = _format_date(second_day, rng)
    if style == "icu_nursing":
        hr = rng.randrange(60, 110, 10)
        sbp = rng.randrange(90, 140, 10)
        values.update(
            shift=rng.choice(phrases.icu_shifts),
            hd=str(rng.randint(1, 12)),
            prop=str(rng.randrange(10, 60, 5)),
            fent=str(rng.randrange(25, 200, 25)),
            hr=str(hr),
            hr2=str(rng.randint(130, 165)),
            sbp=str(sbp),
            sbp2=str(sbp + 20),
            levo=f"0.{rng.randint(2, 15):02d}",
            k=f"{rng.randint(30, 36) / 10:.1f}",
            sat=str(rng.randint(92, 99)),
            tv=str(rng.randrange(350, 550, 50)),
            rr=str(rng.randint(12, 20)),
            peep=str(rng.choice((5, 8, 10, 12))),
            fio2=str(rng.randrange(30, 70, 10)),
            uo=str(rng.randrange(30, 120, 10)),
            tf=str(rng.randrange(40, 80, 5)),
        )
    elif style == "radiology":
        exam = rng.choice(phrases.radiology_exams)
        finding1, finding2 = rng.sample(exam.choices["findings"], 2)
        history = rng.choice(exam.choices["histories"])
        values.update(
            rad_exam=exam.phrases["exam"],
            rad_technique=exam.phrases["technique"],
            rad_history=history,
            rad_history_lc=history[0].lower() + history[1:],
            rad_finding1=finding1,
            rad_finding2=finding2,
            rad_impression=rng.choice(exam.choices["impressions"]),
            accession=f"RA{rng.randint(1_000_000, 9_999_999)}",
        )
    elif style == "pathology":
        case = rng.choice(phrases.pathology_cases)
        history = case.phrases["history"]
        values.update(
            path_specimen=case.phrases["specimen"],
            path_history=history,
            path_history_lc=history[0].lower() + history[1:],
            path_gross=case.phrases["gross"],
            path_micro=case.phrases["micro"],
            path_dx=rng.choice(case.choices["diagnoses"]),
            accession=f"S{note_day.year % 100:02d}-{rng.randint(10000, 99999)}",
        )
    else:  # veterinary
        case = rng.choice(phrases.species[values["species"]].cases)
        equine = values["species"] == "equine"
        values.update(
            vet_service=rng.choice(phrases.veterinary_services),
            vet_complaint=case.phrases["complaint"],
            vet_exam=case.phrases["exam"],
            vet_assessment=case.phrases["assessment"],
            vet_plan=case.phrases["plan"],
            vet_temp=f"{rng.randint(995, 1025) / 10:.1f}",
            vet_hr=str(rng.randint(32, 48) if equine else rng.randint(80, 180)),
            vet_rr=str(rng.randint(10, 40)),
        )
    return values


def _build_note(
    style: Style, values: Mapping[str, str], rng: random.Random, *, phi: bool
) -> tuple[str, list[dict[str, Any]]]:
    sections = style.sections
    chosen: set[int] = set()
    if phi:
        candidates = [i for i, section in enumerate(sections) if section.phi]
        k = min(len(candidates), rng.choice((1, 1, 2, 2, 3)))
        chosen = set(rng.sample(candidates, k))
    builder = _NoteBuilder(allow_phi=phi)
    separator = style.separator
    first = True
    for i, section in enumerate(sections):
        if i in chosen:
            template = rng.choice(section.phi)
        elif section.plain and rng.random() < section.p:
            template = rng.choice(section.plain)
        else:
            continue
        if not first:
            builder.literal(separator)
        first = False
        builder.template(template, values)
    return builder.text(), builder.spans


def _draw_plan(
    n_notes: int, fake: _Names, rng: random.Random, phrases: Phrases
) -> Iterator[tuple[_Patient, str, int]]:
    """The patients, each with several notes, and every note's style, in note order.

    Yields ``(patient, style, number)`` note by note; one patient is alive at a time.
    """
    planned = index = 0
    while planned < n_notes:
        index += 1
        patient = _make_patient(index, fake, rng, phrases)
        remaining = n_notes - planned
        count = rng.randint(2, 6)
        if count >= remaining - 1:  # take the rest rather than leave one note over
            count = remaining
        for number in range(1, count + 1):
            style = "veterinary" if patient.kind == "animal" else rng.choice(HUMAN_STYLES)
            yield patient, style, number
        planned += count


def _seeded_faker(seed: int) -> Faker:
    fake = Faker(FAKER_LOCALE)
    fake.seed_instance(seed)
    return fake


def generate_demo_notes(
    n_notes: int = DEFAULT_N_NOTES, seed: int = DEFAULT_SEED
) -> Iterator[Record]:
    """Yield ``n_notes`` synthetic notes one at a time, deterministically for ``seed``.

    Each record is ``{"note_id", "patient_id", "style", "synthetic": True,
    "text", "spans"}`` with spans ``{"start", "end", "label", "text"}`` sorted,
    non-overlapping and with ``text[start:end] == span["text"]``. Exactly
    ``round(PHI_SHARE * n_notes)`` notes carry spans; the others carry no PHI.

    The plan (patients and note styles) is drawn first, then which notes carry
    PHI, then the notes. Memory stays flat in ``n_notes`` but for the PHI draw:
    the plan is drawn twice from the same seed, holding one patient at a time
    (once without names, only to reach the PHI draw; once in step with the
    notes), and the PHI notes are one byte per note, after a transient
    :meth:`random.Random.sample` of about 40 bytes per note.
    """
    if n_notes < 1:
        raise ConfigError(f"n_notes must be at least 1, got {n_notes}")
    return _generate(n_notes, seed)


def _generate(n_notes: int, seed: int) -> Iterator[Record]:
    phrases = load_phrases()
    rng = random.Random(seed)
    for _ in _draw_plan(n_notes, _NoNames(), rng, phrases):
        pass
    phi = bytearray(n_notes)
    for index in rng.sample(range(n_notes), round(PHI_SHARE * n_notes)):
        phi[index] = 1
    plan = _draw_plan(n_notes, _seeded_faker(seed), random.Random(seed), phrases)
    for index, (patient, style, number) in enumerate(plan):
        note_day = patient.base_date + timedelta(days=2 * (number - 1) + rng.randint(0, 1))
        values = _note_values(style, patient, note_day, rng, phrases)
        text, spans = _build_note(phrases.templates[style], values, rng, phi=bool(phi[index]))
        yield {
            "note_id": f"{patient.patient_id}-n{number:02d}",
            "patient_id": patient.patient_id,
            "style": style,
            "synthetic": True,
            "text": text,
            "spans": spans,
        }


def jsonl_line(record: Mapping[str, Any]) -> str:
    """One line of ``notes.jsonl``: the record as sorted-key JSON, newline-terminated."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"


class DemoStats:
    """Counts for the README and the log, gathered record by record.

    Holds the patient ids seen (O(patients)) and a few counters, not the records.
    """

    def __init__(self) -> None:
        self.notes = 0
        self.patients: set[str] = set()
        self.styles: Counter[str] = Counter()
        self.phi_bearing = 0
        self.spans_per_label: Counter[str] = Counter()
        self.words_min: int | None = None
        self.words_max = 0
        self.words_total = 0

    def add(self, record: Mapping[str, Any]) -> None:
        words = len(record["text"].split())
        self.notes += 1
        self.patients.add(record["patient_id"])
        self.styles[record["style"]] += 1
        self.phi_bearing += bool(record["spans"])
        self.spans_per_label.update(span["label"] for span in record["spans"])
        self.words_min = words if self.words_min is None else min(self.words_min, words)
        self.words_max = max(self.words_max, words)
        self.words_total += words

    def summary(self) -> dict[str, Any]:
        """Notes, patients, styles, PHI share, spans and words."""
        return {
            "notes": self.notes,
            "patients": len(self.patients),
            "notes_per_style": dict(sorted(self.styles.items())),
            "phi_bearing_notes": self.phi_bearing,
            "phi_bearing_share": self.phi_bearing / self.notes if self.notes else 0.0,
            "spans": sum(self.spans_per_label.values()),
            "spans_per_label": {
                label: self.spans_per_label.get(label, 0) for label in CANONICAL_LABELS
            },
            "words_min": self.words_min or 0,
            "words_max": self.words_max,
            "words_mean": self.words_total / self.notes if self.notes else 0.0,
        }


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts for the README and the log: notes, patients, styles, PHI share, spans."""
    stats = DemoStats()
    for record in records:
        stats.add(record)
    return stats.summary()


def write_demo_corpus(out_dir: Path, n_notes: int, seed: int) -> None:
    """Write ``out_dir/notes.jsonl`` atomically, record by record."""
    path = Path(out_dir) / NOTES_FILE
    stats = DemoStats()
    records = tqdm(
        generate_demo_notes(n_notes, seed),
        total=n_notes,
        desc="make-demo",
        unit="note",
        mininterval=2,
    )
    with atomic_text(path) as handle:
        for record in records:
            handle.write(jsonl_line(record))
            stats.add(record)
    summary = stats.summary()
    log.info(
        "wrote %s: %d notes, %d patients, %d PHI-bearing (%.1f%%), %d spans",
        path,
        summary["notes"],
        summary["patients"],
        summary["phi_bearing_notes"],
        100 * summary["phi_bearing_share"],
        summary["spans"],
    )
