"""The date_shift operator: per-patient shifts that keep each date's written form."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthdeid.detectors import MONTHS, WEEKDAYS
from synthdeid.errors import ConfigError
from synthdeid.notes import Note, Span
from synthdeid.surrogate.keying import SurrogateKey
from synthdeid.surrogate.operators.base import OPERATORS, Mention, build_operator
from synthdeid.surrogate.operators.dates import DateShiftOperator
from synthdeid.surrogate.replace import SurrogateReplacer

KEY = SurrogateKey(b"test-key")


def mention(surface: str, patient: str = "patient-1") -> Mention:
    return Mention(surface=surface, label="DATE", patient_id=patient, note_id="note-1")


def operator(key: SurrogateKey = KEY, **options: object) -> DateShiftOperator:
    return DateShiftOperator(key, options)


def ordinal(day: int) -> str:
    if day in (11, 12, 13):
        return f"{day}th"
    return f"{day}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th') }"


def month_name(d: date) -> str:
    return MONTHS[d.month - 1]


# full dates: an independent writer for each form, and the text for 2006-07-22
FULL_FORMS: dict[str, Callable[[date], str]] = {
    "7/22/2006": lambda d: f"{d.month}/{d.day}/{d.year}",
    "07/22/2006": lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}",
    "7/22/06": lambda d: f"{d.month}/{d.day}/{d.year % 100:02d}",
    "7-22-2006": lambda d: f"{d.month}-{d.day}-{d.year}",
    "7.22.2006": lambda d: f"{d.month}.{d.day}.{d.year}",
    "2006-07-22": lambda d: d.isoformat(),
    "20060722": lambda d: f"{d.year}{d.month:02d}{d.day:02d}",
    "22-Jul-2006": lambda d: f"{d.day}-{month_name(d)[:3]}-{d.year}",
    "22 Jul 2006": lambda d: f"{d.day} {month_name(d)[:3]} {d.year}",
    "22 JULY 2006": lambda d: f"{d.day} {month_name(d).upper()} {d.year}",
    "July 22, 2006": lambda d: f"{month_name(d)} {d.day}, {d.year}",
    "July 22 2006": lambda d: f"{month_name(d)} {d.day} {d.year}",
    "jul 22, 2006": lambda d: f"{month_name(d)[:3].lower()} {d.day}, {d.year}",
    "Jul. 22nd, 2006": lambda d: f"{month_name(d)[:3]}. {ordinal(d.day)}, {d.year}",
    "Saturday, July 22, 2006": lambda d: (
        f"{WEEKDAYS[d.weekday()]}, {month_name(d)} {d.day}, {d.year}"
    ),
    "Sat 7/22/2006": lambda d: f"{WEEKDAYS[d.weekday()][:3]} {d.month}/{d.day}/{d.year}",
}
# month and day without a year (placed in the leap year 2000, written without it)
MONTH_DAY_FORMS: dict[str, Callable[[date], str]] = {
    "7/22": lambda d: f"{d.month}/{d.day}",
    "07/22": lambda d: f"{d.month:02d}/{d.day:02d}",
    "Jul 22": lambda d: f"{month_name(d)[:3]} {d.day}",
    "JULY 22": lambda d: f"{month_name(d).upper()} {d.day}",
    "22 Jul": lambda d: f"{d.day} {month_name(d)[:3]}",
    "22nd of July": lambda d: f"{ordinal(d.day)} of {month_name(d)}",
}
# month and year: (year, month) -> text
MONTH_YEAR_FORMS: dict[str, Callable[[int, int], str]] = {
    "7/2006": lambda y, m: f"{m}/{y}",
    "07/2006": lambda y, m: f"{m:02d}/{y}",
    "2006-07": lambda y, m: f"{y}-{m:02d}",
    "July 2006": lambda y, m: f"{MONTHS[m - 1]} {y}",
    "Jul-2006": lambda y, m: f"{MONTHS[m - 1][:3]}-{y}",
    "Jul '06": lambda y, m: f"{MONTHS[m - 1][:3]} '{y % 100:02d}",
}
YEAR_FORMS: dict[str, Callable[[int], str]] = {
    "2006": lambda y: f"{y}",
    "'06": lambda y: f"'{y % 100:02d}",
}
PATIENTS = [f"patient-{i}" for i in range(40)]
# "May" is both the full name and its abbreviation; it is read as the full name,
# so these forms cannot round-trip a date in May
ABBREVIATED = {"22-Jul-2006", "22 Jul 2006", "jul 22, 2006", "Jul. 22nd, 2006", "Jul 22", "22 Jul"}
# unpadded numeric forms: a date like 10/14 shows no padding and is read as padded
UNPADDED = {"7/22/2006", "7/22/06", "7-22-2006", "7.22.2006", "Sat 7/22/2006", "7/22"}


def round_trips(form: str, original: date) -> bool:
    """Whether the written form of ``original`` says how to write any other date."""
    if form in ABBREVIATED:
        return original.month != 5
    if form in UNPADDED:
        return original.month < 10 or original.day < 10
    return True


def test_registered() -> None:
    assert OPERATORS["date_shift"] is DateShiftOperator
    assert isinstance(build_operator(KEY, "date_shift"), DateShiftOperator)


@pytest.mark.parametrize("patient", PATIENTS[:6])
@pytest.mark.parametrize("form", sorted(FULL_FORMS))
def test_full_dates_keep_their_form(form: str, patient: str) -> None:
    op = operator()
    write = FULL_FORMS[form]
    assert write(date(2006, 7, 22)) == form
    days = op.shift_days(mention(form, patient))
    result = op.replace(mention(form, patient))
    assert result == write(date(2006, 7, 22) + timedelta(days=days))
    assert op.counts == {"shifted_dates": 1}


@pytest.mark.parametrize("patient", PATIENTS[:6])
@pytest.mark.parametrize("form", sorted(MONTH_DAY_FORMS))
def test_month_day_dates_keep_their_form(form: str, patient: str) -> None:
    op = operator()
    write = MONTH_DAY_FORMS[form]
    assert write(date(2000, 7, 22)) == form
    days = op.shift_days(mention(form, patient))
    assert op.replace(mention(form, patient)) == write(date(2000, 7, 22) + timedelta(days=days))


@pytest.mark.parametrize("patient", PATIENTS[:6])
@pytest.mark.parametrize("form", sorted(MONTH_YEAR_FORMS))
def test_month_year_dates_move_by_whole_months(form: str, patient: str) -> None:
    op = operator()
    write = MONTH_YEAR_FORMS[form]
    shift = op.shift(mention(form, patient))
    sign = 1 if shift.days > 0 else -1
    assert shift.months == sign * max(1, round(abs(shift.days) / 30 + 1e-9))
    year, month0 = divmod(2006 * 12 + 6 + shift.months, 12)
    assert op.replace(mention(form, patient)) == write(year, month0 + 1)


@pytest.mark.parametrize("patient", PATIENTS[:6])
@pytest.mark.parametrize("form", sorted(YEAR_FORMS))
def test_bare_years_move_by_whole_years(form: str, patient: str) -> None:
    op = operator()
    shift = op.shift(mention(form, patient))
    assert shift.years == (1 if shift.days > 0 else -1)  # 90 days round to no year
    assert op.replace(mention(form, patient)) == YEAR_FORMS[form](2006 + shift.years)


@pytest.mark.parametrize(
    ("surface", "expected"),
    [
        # shift of +40 days, +1 month, +1 year
        ("  7/22/2006 ", "  8/31/2006 "),
        ("(07/22/2006).", "(08/31/2006)."),
        ("12/15/2006", "01/24/2007"),  # two-digit fields: padded when nothing says otherwise
        ("12/5/2006", "1/14/2007"),  # an unpadded day says the month is unpadded too
        ("Sept 30", "Nov 9"),
        ("Jul 06", "Aug 15"),  # month-day, not month-year
        ("July 1st", "August 10th"),
        ("JULY 2ND", "AUGUST 11TH"),
        ("May 3", "June 12"),
        ("22/7/2006", "31/8/2006"),  # day first only when the month cannot be first
        ("Tue. 7/22", "Sun. 8/31"),  # the weekday moves by 40 mod 7
        ("July of 2006", "August of 2006"),
        ("Dec 2006", "Jan 2007"),
        ("12/2006", "01/2007"),
        ("'99", "'00"),
        ("Jul \u201906", "Aug \u201906"),
        ("12/31/99", "02/09/00"),
    ],
)
def test_known_shift(surface: str, expected: str) -> None:
    op = operator(min_days=40, max_days=40, direction="forward")
    assert op.replace(mention(surface)) == expected
    assert op.counts == {"shifted_dates": 1}


@pytest.mark.parametrize(
    ("surface", "expected"),
    [
        # shift of +40 days, +1 month, +1 year
        # a month name alone keeps its case, abbreviation and dot
        ("nov. ", "dec. "),
        ("Nov.", "Dec."),
        ("NOV", "DEC"),
        ("november", "december"),
        ("sept", "oct"),
        ("Sept", "Oct"),
        ("Aug", "Sep"),
        ("May", "June"),
        ("Nov. 3", "Dec. 13"),
        ("3rd of November", "13th of December"),
        # an ordinal day alone moves from that day of a 31-day month
        ("11th", "20th"),
        ("29th", "9th"),
        ("2ND", "11TH"),
        # two-digit years move by whole years
        ("92", "93"),
        ("09", "10"),
        ("99", "00"),
        # month and two-digit year, where the year cannot be a day
        ("8/88", "9/88"),
        ("12/82", "01/83"),
        ("1/00", "2/00"),
        # ranges: both dates move
        ("6/30-7/2", "8/9-8/11"),
        ("1980-85", "1981-86"),
        ("10/15 to 10/16", "11/24 to 11/25"),
        ("3rd-5th", "12th-14th"),
        ("Jul 2006 - Aug 2006", "Aug 2006 - Sep 2006"),
    ],
)
def test_known_shift_of_partial_dates(surface: str, expected: str) -> None:
    op = operator(min_days=40, max_days=40, direction="forward")
    assert op.replace(mention(surface)) == expected
    assert op.counts == {"shifted_dates": 1}


@pytest.mark.parametrize(
    ("surface", "days", "expected"),
    [
        ("11th", 3, "14th"),
        ("1st", -3, "29th"),
        ("sept", 3, "oct"),
        ("Oct.", -3, "Sep."),
        ("OCTOBER", -3, "SEPTEMBER"),
        ("92", -3, "91"),
        ("Tues. 7/18", 2, "Thur. 7/20"),  # a four-letter weekday keeps four letters
        ("Thur 7/20", 2, "Sat 7/22"),
    ],
)
def test_partial_dates_move_with_the_shift(surface: str, days: int, expected: str) -> None:
    direction = "forward" if days > 0 else "backward"
    op = operator(min_days=abs(days), max_days=abs(days), direction=direction)
    assert op.replace(mention(surface)) == expected


def collected(options: dict[str, object], *notes: tuple[str, list[str]]) -> DateShiftOperator:
    """A date_shift operator after the engine collected ``notes`` (patient, DATE surfaces)."""
    policies = {"DATE": {"operator": "date_shift", "options": options}}
    replacer = SurrogateReplacer(KEY, policies, labels=["DATE"])
    batch = []
    for number, (patient, surfaces) in enumerate(notes):
        text, spans = "", []
        for surface in surfaces:
            spans.append(Span(len(text), len(text) + len(surface), "DATE"))
            text += surface + " and "
        batch.append(Note(f"n{number}", patient, text, tuple(spans), "test"))
    replacer.collect(batch)
    op = replacer.operators["DATE"]
    assert isinstance(op, DateShiftOperator)
    return op


def test_the_shift_avoids_moving_a_date_onto_another_original() -> None:
    options = {"min_days": 3, "max_days": 4, "direction": "forward"}
    # a patient whose first draw is +3 days: 3/30 would become 4/2, its other date
    patient = next(p for p in PATIENTS if operator(**options).shift_days(mention("", p)) == 3)
    op = collected(options, (patient, ["3/30"]), ("other", ["1/1"]), (patient, ["4/2"]))
    assert op.shift_days(mention("3/30", patient)) == 4
    assert op.replace(mention("3/30", patient)) == "4/3"
    assert op.replace(mention("4/2", patient)) == "4/6"  # one shift: the interval is kept
    assert op.counts == {"shifted_dates": 2}
    # another patient's dates are no obstacle
    other = next(p for p in PATIENTS if p != patient and op.shift_days(mention("", p)) == 3)
    assert op.replace(mention("3/30", other)) == "4/2"


def test_year_and_month_shifts_are_redrawn_off_the_originals() -> None:
    years = ("91", "92", "93")
    months = ("nov", "dec", "oct")
    op = collected({}, ("p1", [*years, *months]))
    moved_years = [op.replace(mention(year, "p1")) for year in years]
    moved_months = [op.replace(mention(month, "p1")) for month in months]
    # a shift of one year or one month would land on another original
    assert not set(moved_years) & set(years) and not set(moved_months) & set(months)
    shift = op.shift(mention("", "p1"))
    assert abs(shift.years) >= 3 and abs(shift.months) >= 2
    assert [int(y) for y in moved_years] == [int(y) + shift.years for y in years]
    assert op.counts == {"shifted_dates": 6}


def test_a_collision_no_shift_avoids_gets_a_same_shape_surrogate() -> None:
    # a single possible shift (+3 days) moves 3/30 onto 4/2
    op = collected({"min_days": 3, "max_days": 3, "direction": "forward"}, ("p1", ["3/30", "4/2"]))
    surrogate = op.replace(mention("3/30", "p1"))
    assert_same_shape("3/30", surrogate)
    assert surrogate not in {"3/30", "4/2"}
    assert op.counts == {"dates_colliding_with_originals": 1}


class CountingReader:
    """Gives the same batches at every call, and counts the calls."""

    def __init__(self, batches: list[list[Note]]) -> None:
        self.batches, self.calls = batches, 0

    def __call__(self) -> list[list[Note]]:
        self.calls += 1
        return self.batches


@pytest.mark.parametrize("consistency", ["patient", "corpus"])
def test_the_notes_are_read_again_only_for_crowded_scopes(consistency: str) -> None:
    options = {"min_days": 3, "max_days": 4, "direction": "forward", "consistency": consistency}
    scope = "*" if consistency == "corpus" else "p1"
    first = operator(**options).shift_days(mention("", scope))
    policies = {"DATE": {"operator": "date_shift", "options": options}}
    for other, reads in [("1/1", 1), (f"4/{first - 1}", 2)]:
        # the first draw would move 3/30 onto the other original (an ID, in a later batch)
        batches = [
            [Note("n1", "p1", "3/30", (Span(0, 4, "DATE"),), "test")],
            [Note("n2", "p2", "x", (), "test")],
            [Note("n3", "p1", other, (Span(0, len(other), "ID"),), "test")],
        ]
        read = CountingReader(batches)
        replacer = SurrogateReplacer(KEY, policies, labels=["DATE"])
        replacer.collect_batches(read)
        assert read.calls == reads
        shift = replacer.operators["DATE"].shift_days(mention("3/30", "p1"))
        assert shift == (first if reads == 1 else 7 - first)


def test_same_patient_same_shift_other_patients_other_shifts() -> None:
    op = operator()
    surfaces = ["7/22/2006", "Jan 3", "1999", "xmas", "July 2006"]
    for patient in PATIENTS:
        shifts = {op.shift(mention(surface, patient)) for surface in surfaces}
        assert len(shifts) == 1
        assert 3 <= abs(op.shift_days(mention("7/22/2006", patient))) <= 90
    assert len({op.shift_days(mention("7/22/2006", patient)) for patient in PATIENTS}) > 20
    assert operator().shift_days(mention("1/1/2001", "patient-7")) == op.shift_days(
        mention("5/5/2005", "patient-7")
    )


def test_corpus_consistency_shares_one_shift() -> None:
    op = operator(consistency="corpus")
    assert len({op.shift_days(mention("7/22/2006", patient)) for patient in PATIENTS}) == 1


def test_different_keys_give_different_shifts() -> None:
    shifts = {
        secret: tuple(
            operator(SurrogateKey(secret)).shift_days(mention("7/22/2006", p)) for p in PATIENTS
        )
        for secret in (b"test-key", b"other-key", b"third-key")
    }
    assert len(set(shifts.values())) == 3


@pytest.mark.parametrize("direction", ["forward", "backward", "both"])
def test_direction_and_range(direction: str) -> None:
    op = operator(min_days=10, max_days=12, direction=direction)
    days = [op.shift_days(mention("7/22/2006", patient)) for patient in PATIENTS]
    assert all(10 <= abs(d) <= 12 for d in days)
    signs = {d > 0 for d in days}
    assert signs == {"forward": {True}, "backward": {False}, "both": {True, False}}[direction]


@pytest.mark.parametrize(
    "options",
    [
        {"min_days": 0},
        {"min_days": -5},
        {"min_days": 10, "max_days": 5},
        {"min_days": "3"},
        {"max_days": 9.5},
        {"min_days": True},
        {"direction": "sideways"},
        {"days": 3},
        {"consistency": "note"},
    ],
)
def test_bad_options(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="date_shift"):
        operator(**options)


@pytest.mark.parametrize(
    ("surface", "days", "expected"),
    [
        ("12/31/2006", 1, "01/01/2007"),
        ("12/31/06", 1, "01/01/07"),
        ("Dec 31, 2006", 3, "Jan 3, 2007"),
        ("2006-12-31", 1, "2007-01-01"),
        ("1/1/2007", -1, "12/31/2006"),
        ("2/28/2008", 1, "2/29/2008"),
        ("2/28/2007", 1, "3/1/2007"),
        ("2/29/2008", 1, "3/1/2008"),
        ("2/29/2008", -3, "2/26/2008"),
        ("2/29/2008", 366, "3/1/2009"),
        ("2/29", 1, "3/1"),
        ("2/29", -1, "2/28"),
        ("3/1", -1, "2/29"),
        ("1/31/2006", 30, "3/2/2006"),
        ("Feb 29th", 3, "Mar 3rd"),
        ("1/2006", -1, "12/2005"),
        ("Jan 2006", -30, "Dec 2005"),
        ("2006-12", 1, "2007-01"),
    ],
)
def test_calendar_edges(surface: str, days: int, expected: str) -> None:
    direction = "forward" if days > 0 else "backward"
    op = operator(min_days=abs(days), max_days=abs(days), direction=direction)
    assert op.replace(mention(surface)) == expected


def assert_same_shape(original: str, surrogate: str) -> None:
    assert surrogate != original
    assert len(surrogate) == len(original)
    for before, after in zip(original, surrogate, strict=True):
        if before.isdigit():
            assert after.isdigit()
        elif before.isalpha():
            assert after.isalpha() and after.isupper() == before.isupper()
        else:
            assert after == before


@pytest.mark.parametrize(
    "surface",
    ["Tuesday", "the 3rd", "xmas", "Spring 2006", "7/22 or 7/25", "13/45/2006", "Feb 30", "0"],
)
def test_unparsed_dates_get_a_same_shape_surrogate(surface: str) -> None:
    op = operator()
    first = op.replace(mention(surface))
    assert_same_shape(surface, first)
    assert op.replace(mention(surface)) == first  # deterministic
    assert op.counts == {"unparsed_dates": 2}


def test_dates_that_cannot_move_fall_back_to_same_shape() -> None:
    op = operator(min_days=5, max_days=5, direction="forward")
    assert_same_shape("12/31/9999", op.replace(mention("12/31/9999")))
    # 366 days from 2000-01-01 is 2001-01-01: the same month and day again
    op = operator(min_days=366, max_days=366, direction="forward")
    assert_same_shape("1/1", op.replace(mention("1/1")))
    assert op.counts == {"unparsed_dates": 1}


def test_text_without_letters_or_digits_still_changes() -> None:
    op = operator()
    assert op.replace(mention("/")) != "/"
    assert op.replace(mention(" ")) != " "


dates = st.dates(min_value=date(1930, 1, 1), max_value=date(2029, 12, 31))


@settings(max_examples=60, deadline=None)
@given(
    entries=st.lists(st.tuples(dates, st.sampled_from(sorted(FULL_FORMS))), min_size=2),
    patient=st.sampled_from(PATIENTS),
)
def test_one_patient_keeps_intervals(entries: list[tuple[date, str]], patient: str) -> None:
    op = operator()
    days = op.shift_days(mention("", patient))
    for original, form in entries:
        write = FULL_FORMS[form]
        if not round_trips(form, original):
            continue
        assert op.replace(mention(write(original), patient)) == write(
            original + timedelta(days=days)
        )


PARSE_BACK = {
    "7/22/2006": "%m/%d/%Y",
    "2006-07-22": "%Y-%m-%d",
    "20060722": "%Y%m%d",
    "July 22, 2006": "%B %d, %Y",
}


@settings(max_examples=60, deadline=None)
@given(
    entries=st.lists(st.tuples(dates, st.sampled_from(sorted(PARSE_BACK))), min_size=2),
    patient=st.sampled_from(PATIENTS),
)
def test_pairwise_intervals_identical(entries: list[tuple[date, str]], patient: str) -> None:
    op = operator()
    before = [original for original, _ in entries]
    after = [
        datetime.strptime(
            op.replace(mention(FULL_FORMS[form](original), patient)), PARSE_BACK[form]
        ).date()
        for original, form in entries
    ]
    for i in range(len(entries)):
        for j in range(len(entries)):
            assert after[i] - after[j] == before[i] - before[j]


@settings(max_examples=150, deadline=None)
@given(
    surface=st.text(alphabet="0123456789/-. ,'aJulyMAYthSept", max_size=14),
    patient=st.sampled_from(PATIENTS),
    days=st.integers(min_value=1, max_value=800),
)
def test_never_identity(surface: str, patient: str, days: int) -> None:
    op = operator(min_days=1, max_days=days)
    assert op.replace(mention(surface, patient)) != surface


@settings(max_examples=100, deadline=None)
@given(
    original=dates,
    form=st.sampled_from(sorted(FULL_FORMS | MONTH_DAY_FORMS)),
    patient=st.sampled_from(PATIENTS),
)
def test_dates_always_shift(original: date, form: str, patient: str) -> None:
    op = operator()
    surface = {**FULL_FORMS, **MONTH_DAY_FORMS}[form](original)
    result = op.replace(mention(surface, patient))
    assert result != surface
    assert op.counts == {"shifted_dates": 1}
