"""Benchmark the local template fill: notes/s, spans/s and peak memory on one core.

    python bench/fill_throughput.py [--n 20000] [--templates PATH] [--forbidden 5000]

The templates are generated here (clinical-looking sentences written for this
benchmark, 0-8 placeholders each, some repeated), or read from a Parquet file
with a ``template`` column (``--templates``). Each measurement runs in its own
process pinned to one core: the fill as the pipeline runs it (TemplateFiller
with the repository's allowlist, ``check_fill`` on every output, a set of
synthetic forbidden surfaces made with Faker under another seed) and, as the
baseline, plain ``str`` assembly of the same templates with one constant value
per placeholder name (``re.sub``), so the ratio isolates the cost of drawing
values, avoiding forbidden surfaces and recording spans. Setup (Faker pools,
forbidden set) is timed apart from the fill. Peak memory is the process's
maximum resident set size. The target is at least 5,000 notes/s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
TARGET_NOTES_PER_S = 5_000
MAX_PLACEHOLDERS = 8
REPEAT_PROBABILITY = 0.3
DATE_PATTERNS = ("%m/%d/%Y", "%-m/%-d", "%Y-%m-%d", "%B %-d, %Y")

PLAIN_SENTENCES = (
    "Pt resting comfortably in bed, no acute distress.",
    "Neuro: alert and oriented x3, follows commands, MAE.",
    "CV: NSR 70s-80s, no ectopy noted, BP stable on current regimen.",
    "Resp: lungs clear bilaterally, sats 95-98% on 2L NC.",
    "GI: abd soft, non-tender, +BS, tolerating clear liquids.",
    "GU: foley draining clear yellow urine, adequate output.",
    "Skin: intact, no breakdown noted, turned q2h.",
    "Pain controlled with PRN acetaminophen.",
    "Labs reviewed; K repleted per sliding scale.",
    "Afebrile overnight, WBC trending down.",
    "Continue current antibiotic course and monitor cultures.",
    "Plan: wean O2 as tolerated, OOB to chair, advance diet.",
    "Family updated at bedside regarding plan of care.",
    "CXR shows improving bibasilar atelectasis.",
    "Will continue to monitor closely overnight.",
    "Ambulated in hallway with PT, steady gait with walker.",
    "Insulin drip titrated per protocol, FS glucose 110-140.",
    "Echo with preserved EF, mild MR.",
    "No events overnight.",
    "Code status: full code, confirmed with patient.",
)
SLOT_SENTENCES = (
    "Seen and examined with <DOCTOR>.",
    "Discussed with <DOCTOR> who agrees with the plan.",
    "<DOCTOR> paged re: hypotension, fluid bolus given.",
    "Pt is a <AGE> y/o woman admitted on <DATE> with CHF exacerbation.",
    "<PATIENT> is a <AGE> year old man with hx of CAD.",
    "Transferred from <HOSPITAL> on <DATE> for further management.",
    "<PATIENT> states she lives alone in <LOCATION>.",
    "Daughter can be reached at <PHONE>.",
    "Wife <PATIENT> visited this afternoon and was updated.",
    "MRN <ID>, admitted to <OTHER> under <DOCTOR>.",
    "Follow up with <DOCTOR> at <HOSPITAL> on <DATE>.",
    "PCP is <DOCTOR>, phone <PHONE>.",
    "Prior cath on <DATE> at <HOSPITAL> showed 3VD.",
    "Discharged to rehab in <LOCATION> on <DATE>.",
    "Case manager paged at <OTHER> regarding placement.",
    "Accession <ID> sent to pathology.",
    "<PATIENT> asked that her son be called at <PHONE>.",
    "Last seen in clinic on <DATE> by <DOCTOR>.",
)
_SLOT = re.compile(r"<([A-Z]+)>")


def make_template(rng: random.Random) -> str:
    """A note of 6-16 sentences with 0-8 placeholders, some of them repeated."""
    budget = rng.randint(0, MAX_PLACEHOLDERS)
    numbers: dict[str, int] = {}

    def token(match: re.Match[str]) -> str:
        name = match.group(1)
        used = numbers.get(name, 0)
        if used and rng.random() < REPEAT_PROBABILITY:
            return f"[[{name}_{rng.randint(1, used)}]]"
        numbers[name] = used + 1
        return f"[[{name}_{used + 1}]]"

    sentences: list[str] = []
    for _ in range(rng.randint(6, 16)):
        slotted = [s for s in SLOT_SENTENCES if len(_SLOT.findall(s)) <= budget]
        if slotted and rng.random() < 0.4:
            sentence = rng.choice(slotted)
            budget -= len(_SLOT.findall(sentence))
            sentences.append(_SLOT.sub(token, sentence))
        else:
            sentences.append(rng.choice(PLAIN_SENTENCES))
    return "\n".join(sentences) if rng.random() < 0.5 else " ".join(sentences)


def synthetic_forbidden(count: int) -> list[str]:
    """``count`` made-up PHI-like surfaces (Faker, another seed than the pools)."""
    import faker

    fake = faker.Faker("en_US")
    fake.seed_instance(424242)
    pick = random.Random(424242)
    makers = (
        (0.35, fake.name),
        (0.05, fake.last_name),
        (0.25, lambda: fake.date(pattern=pick.choice(DATE_PATTERNS))),
        (0.15, fake.phone_number),
        (0.10, fake.street_address),
        (0.05, fake.city),
        (0.05, lambda: fake.numerify("#######")),
    )  # fmt: skip
    surfaces: list[str] = []
    for share, make in makers:
        surfaces += [make() for _ in range(round(count * share))]
    return surfaces


def write_templates(n: int, path: Path, source: Path | None) -> str:
    """Write ``n`` templates (with ids) to ``path``; returns a description of them."""
    if source is not None:
        templates = pq.read_table(source, columns=["template"])["template"].to_pylist()
        if not templates:
            raise SystemExit(f"{source} has no templates")
        templates = [templates[i % len(templates)] for i in range(n)]
        name = f"{source.name} ({len(set(templates))} distinct)"
    else:
        rng = random.Random(20240601)
        templates = [make_template(rng) for _ in range(n)]
        name = "generated"
    ids = [f"bench-{i}" for i in range(n)]
    pq.write_table(pa.table({"template_id": ids, "template": templates}), path)
    return name


def measure(path: Path, mode: str, forbidden: int) -> dict[str, float]:
    """Run one measurement in a child process on one core."""
    command = [sys.executable, __file__, "--child", mode, str(path), "--forbidden", str(forbidden)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def child(mode: str, path: str, forbidden: int) -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    table = pq.read_table(path)
    ids, templates = table["template_id"].to_pylist(), table["template"].to_pylist()
    if mode == "baseline":
        from synthdeid.mask import PLACEHOLDER_RE

        constant = lambda match: f"<{match.group(1)}>"  # noqa: E731
        setup = 0.0
        started = time.perf_counter()
        total = sum(len(PLACEHOLDER_RE.sub(constant, template)) for template in templates)
        seconds = time.perf_counter() - started
        spans = sum(1 for template in templates for _ in PLACEHOLDER_RE.finditer(template))
        redraws = 0
    else:
        from synthdeid.synthesis.fill import TemplateFiller
        from synthdeid.synthesis.placeholders import load_allowlist

        begun = time.perf_counter()
        allowlist = load_allowlist(REPO / "resources" / "placeholders.yaml")
        filler = TemplateFiller(allowlist, seed=7, forbidden=synthetic_forbidden(forbidden))
        setup = time.perf_counter() - begun
        started = time.perf_counter()
        spans = total = redraws = 0
        for template_id, template in zip(ids, templates, strict=True):
            filled = filler.fill(template, template_id)  # runs check_fill on the output
            spans += len(filled.spans)
            total += len(filled.text)
            redraws += filled.redraws
        seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record = {"notes": len(templates), "spans": spans, "chars": total, "redraws": redraws}
    record |= {"seconds": seconds, "setup": setup, "peak_mb": peak_mb}
    print(json.dumps(record))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000, help="number of templates")
    parser.add_argument("--templates", type=Path, help="Parquet with a 'template' column")
    parser.add_argument("--forbidden", type=int, default=5_000, help="forbidden surfaces")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.forbidden)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "templates.parquet"
        name = write_templates(args.n, path, args.templates)
        print(
            f"template fill benchmark: {args.n} templates ({name}), "
            f"{args.forbidden} forbidden surfaces, one core"
        )
        baseline = measure(path, "baseline", args.forbidden)
        fill = measure(path, "fill", args.forbidden)
    print(
        f"{'run':>9} {'setup s':>8} {'seconds':>8} {'notes/s':>9} {'spans/s':>9} "
        f"{'redraws':>8} {'peak MB':>8} {'vs base':>8}"
    )
    for label, run in (("baseline", baseline), ("fill", fill)):
        print(
            f"{label:>9} {run['setup']:>8.2f} {run['seconds']:>8.2f} "
            f"{run['notes'] / run['seconds']:>9.0f} {run['spans'] / run['seconds']:>9.0f} "
            f"{run['redraws']:>8.0f} {run['peak_mb']:>8.0f} "
            f"{run['seconds'] / baseline['seconds']:>7.1f}x"
        )
    rate = fill["notes"] / fill["seconds"]
    verdict = "meets" if rate >= TARGET_NOTES_PER_S else "MISSES"
    print(
        f"fill: {fill['spans'] / fill['notes']:.2f} spans/note, "
        f"{fill['chars'] / fill['notes']:.0f} chars/note; {rate:.0f} notes/s {verdict} the "
        f"target of {TARGET_NOTES_PER_S} notes/s"
    )


if __name__ == "__main__":
    main()
