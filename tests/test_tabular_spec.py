"""The tabular variable spec: parsing, discretization, tables, sources and the train/holdout split."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from synthdeid.errors import ConfigError, InputError
from synthdeid.tabular.source import chosen_source, read_source_table
from synthdeid.tabular.spec import (
    MISSING,
    check_categories,
    discretize,
    format_number,
    load_spec,
    number_text,
    parse_spec,
    parse_variable,
)
from synthdeid.tabular.tables import HOLDOUT, TRAIN, read_table, split_labels, write_table

REPO = Path(__file__).resolve().parents[1]
DEMO_SPEC = REPO / "resources" / "tabular" / "breast_cancer.yaml"

DIAGNOSIS = {
    "name": "diagnosis",
    "column": "target",
    "kind": "categorical",
    "merge": {0: "malignant", 1: "benign"},
    "categories": ["malignant", "benign"],
}
SIZE = {
    "name": "size",
    "column": "tumor size",
    "kind": "binned",
    "unit": "mm",
    "bins": [[0, 10], [10, 20], [20, 50]],
}


def small_spec(**size_overrides):
    return parse_spec(
        {"name": "small", "variables": [DIAGNOSIS, {**SIZE, **size_overrides}]}, "small.yaml"
    )


# ------------------------------------------------------------------ parsing and discretization


def test_parse_spec_small_mapping():
    spec = small_spec()
    assert spec.name == "small"
    assert spec.source == "small.yaml"
    assert spec.names == ["diagnosis", "size"]
    diagnosis, size = spec.variables
    assert diagnosis.column == "target"
    assert diagnosis.label == "diagnosis"  # default: the name, underscores as spaces
    assert diagnosis.domain == ("malignant", "benign")
    assert size.domain == ("0-10", "10-20", "20-50")
    assert size.unit == "mm"
    assert spec.domains() == {"diagnosis": diagnosis.domain, "size": size.domain}


def test_parse_spec_name_defaults_to_source_stem():
    spec = parse_spec({"variables": [DIAGNOSIS]}, "some/dir/my_table.yaml")
    assert spec.name == "my_table"
    assert spec.record_id_prefix == "row"


def test_categorical_merge_maps_raw_values():
    diagnosis = small_spec().variable("diagnosis")
    assert diagnosis.discretize(0) == "malignant"
    assert diagnosis.discretize(1) == "benign"
    assert diagnosis.discretize(0.0) == "malignant"
    assert diagnosis.discretize(1.0) == "benign"
    assert diagnosis.discretize("0") == "malignant"
    assert diagnosis.discretize(" 1 ") == "benign"
    # a value already equal to a category stays as is
    assert diagnosis.discretize("benign") == "benign"
    assert diagnosis.discretize("malignant") == "malignant"
    # anything else cannot be placed
    assert diagnosis.discretize(2) is None
    assert diagnosis.discretize(0.5) is None
    assert diagnosis.discretize("Benign") is None


def test_binned_edges():
    size = small_spec().variable("size")
    assert size.discretize(0) == "0-10"  # lower edge of the first bin
    assert size.discretize(10) == "10-20"  # a bin's low end is inclusive
    assert size.discretize(math.nextafter(10.0, 0.0)) == "0-10"  # just below high: lower bin
    assert size.discretize(19.999) == "10-20"
    assert size.discretize(50) == "20-50"  # the last bin includes its high end
    assert size.discretize(50.0) == "20-50"
    assert size.discretize("12.5") == "10-20"  # numeric strings are numbers
    assert size.discretize(math.nextafter(50.0, 100.0)) is None
    assert size.discretize(-0.1) is None
    assert size.discretize("large") is None
    assert size.discretize(float("nan")) is None
    assert size.discretize(None) is None


def test_bin_lookup():
    size = small_spec().variable("size")
    assert size.bin_of("10-20").low == 10
    assert size.bin_of("10-20").high == 20
    with pytest.raises(KeyError, match="size"):
        size.bin_of("1-2")


def test_discretize_frame():
    frame = pd.DataFrame(
        {
            "target": [0, 1, 0.0, "benign"],
            "tumor size": [0.0, 9.99, 10.0, 50.0],
            "unused": ["a", "b", "c", "d"],
        }
    )
    out = discretize(frame, small_spec(), "table.csv")
    assert list(out.columns) == ["diagnosis", "size"]  # unlisted columns never pass
    assert out["diagnosis"].tolist() == ["malignant", "benign", "malignant", "benign"]
    assert out["size"].tolist() == ["0-10", "0-10", "10-20", "20-50"]


@pytest.mark.parametrize(
    ("column", "bad"),
    [
        ("tumor size", 50.5),  # outside every bin
        ("tumor size", -1.0),
        ("target", 7),  # unknown category
        ("target", "borderline"),
        ("tumor size", float("nan")),  # missing without allow_missing
        ("target", None),
    ],
)
def test_discretize_refuses_unplaceable_values(column, bad):
    frame = pd.DataFrame({"target": [0, 1, 0, 1], "tumor size": [1.0, 2.0, 3.0, 4.0]})
    frame[column] = frame[column].astype(object)
    frame.at[2, column] = bad
    with pytest.raises(InputError) as caught:
        discretize(frame, small_spec(), "source.csv")
    message = str(caught.value)
    assert "source.csv" in message
    assert "row 2" in message
    assert repr(column) in message
    assert caught.value.record == "row 2"


def test_discretize_names_missing_columns():
    frame = pd.DataFrame({"target": [0, 1]})
    with pytest.raises(InputError, match=r"source\.csv.*tumor size"):
        discretize(frame, small_spec(), "source.csv")


def test_allow_missing_gives_unknown():
    spec = parse_spec(
        {
            "variables": [
                {**DIAGNOSIS, "allow_missing": True},
                {**SIZE, "allow_missing": True},
            ]
        },
        "missing.yaml",
    )
    assert spec.variable("diagnosis").domain[-1] == MISSING
    assert spec.variable("size").domain == ("0-10", "10-20", "20-50", MISSING)
    frame = pd.DataFrame(
        {"target": [None, 1, "", 0], "tumor size": [float("nan"), 3.0, 12.0, None]}
    )
    out = discretize(frame, spec, "t.csv")
    assert out["diagnosis"].tolist() == [MISSING, "benign", MISSING, "malignant"]
    assert out["size"].tolist() == [MISSING, "0-10", "10-20", MISSING]
    # allow_missing does not let an out-of-range number through
    with pytest.raises(InputError, match="row 0"):
        discretize(pd.DataFrame({"target": [0], "tumor size": [99.0]}), spec, "t.csv")


def test_phrases_default_and_configured():
    spec = parse_spec(
        {
            "variables": [
                {
                    "name": "grade",
                    "kind": "categorical",
                    "categories": ["low_grade", "high_grade"],
                    "phrases": {"high_grade": ["high grade", "grade 3"]},
                }
            ]
        },
        "p.yaml",
    )
    grade = spec.variable("grade")
    assert grade.phrases_of("low_grade") == ("low grade",)
    assert grade.phrases_of("high_grade") == ("high grade", "grade 3")


# ------------------------------------------------------------------ configuration errors


def test_parse_variable_not_a_mapping():
    with pytest.raises(ConfigError, match=r"variables\[0\] must be a mapping"):
        parse_variable(["name", "x"], "variables[0]")


@pytest.mark.parametrize("name", ["Diagnosis", "1size", "tumor-size", "", None, 3])
def test_bad_name(name):
    with pytest.raises(ConfigError, match=r"variables\[0\].*name must be lower_snake_case"):
        parse_variable({**DIAGNOSIS, "name": name}, "variables[0]")


def test_unknown_key():
    with pytest.raises(ConfigError) as caught:
        parse_variable({**DIAGNOSIS, "colour": "red"}, "variables[0]")
    assert "variables[0]" in str(caught.value)
    assert "colour" in str(caught.value)


@pytest.mark.parametrize("kind", ["numeric", None, "Categorical"])
def test_unknown_kind(kind):
    with pytest.raises(ConfigError) as caught:
        parse_variable({**DIAGNOSIS, "kind": kind}, "variables[0]")
    assert "(diagnosis)" in str(caught.value)
    assert "kind must be one of" in str(caught.value)


@pytest.mark.parametrize(
    ("bins", "fragment"),
    [
        ([[0, 10], [11, 20]], "contiguous"),
        ([[0, 10], [5, 20]], "contiguous"),
        ([[10, 10], [10, 20]], "low 10.0 must be below high 10.0"),
        ([[0, 10], [10, 5]], "must be below high"),
        ([[0, 10]], "at least two"),
        (None, "at least two"),
        ("0-10", "at least two"),
        ([[0, 10], [10]], "must be [low, high]"),
        ([[0, 10], [10, "x"]], "must be two numbers"),
    ],
)
def test_bad_bins(bins, fragment):
    with pytest.raises(ConfigError) as caught:
        parse_variable({**SIZE, "bins": bins}, "variables[1]")
    message = str(caught.value)
    assert "variables[1] (size).bins" in message
    assert fragment in message


def test_categories_with_duplicates():
    with pytest.raises(ConfigError, match=r"\(diagnosis\)\.categories has duplicates"):
        parse_variable({**DIAGNOSIS, "categories": ["malignant", "benign", "benign"]}, "v")


@pytest.mark.parametrize("categories", [None, []])
def test_categorical_needs_categories(categories):
    entry = {k: v for k, v in DIAGNOSIS.items() if k != "merge"}
    with pytest.raises(ConfigError, match=r"\(diagnosis\): a categorical variable needs"):
        parse_variable({**entry, "categories": categories}, "v")


def test_categories_with_empty_entry():
    with pytest.raises(ConfigError, match=r"\(diagnosis\)\.categories has an empty entry"):
        parse_variable({**DIAGNOSIS, "categories": ["malignant", " "]}, "v")


def test_categories_as_string():
    with pytest.raises(ConfigError, match=r"\(diagnosis\)\.categories must be a list"):
        parse_variable({**DIAGNOSIS, "categories": "malignant"}, "v")


def test_merge_to_a_non_category():
    with pytest.raises(ConfigError) as caught:
        parse_variable({**DIAGNOSIS, "merge": {0: "malignant", 1: "benignant"}}, "v")
    assert "(diagnosis).merge" in str(caught.value)
    assert "benignant" in str(caught.value)


def test_merge_not_a_mapping():
    with pytest.raises(ConfigError, match=r"\(diagnosis\)\.merge must map"):
        parse_variable({**DIAGNOSIS, "merge": ["malignant"]}, "v")


def test_phrases_for_a_non_category():
    with pytest.raises(ConfigError) as caught:
        parse_variable({**DIAGNOSIS, "phrases": {"cancer": ["carcinoma"]}}, "v")
    assert "(diagnosis).phrases" in str(caught.value)
    assert "cancer" in str(caught.value)


def test_phrases_not_a_mapping():
    with pytest.raises(ConfigError, match=r"\(diagnosis\)\.phrases must map"):
        parse_variable({**DIAGNOSIS, "phrases": ["carcinoma"]}, "v")


def test_phrases_as_a_string():
    with pytest.raises(ConfigError, match=r"\(diagnosis\)\.phrases\.malignant must be a list"):
        parse_variable({**DIAGNOSIS, "phrases": {"malignant": "carcinoma"}}, "v")


def test_mentions_as_a_string():
    with pytest.raises(ConfigError, match=r"\(diagnosis\)\.mentions must be a list"):
        parse_variable({**DIAGNOSIS, "mentions": "diagnosis"}, "v")


def test_unknown_as_a_category():
    with pytest.raises(ConfigError) as caught:
        parse_variable({**DIAGNOSIS, "categories": ["malignant", "benign", "unknown"]}, "v")
    assert "(diagnosis)" in str(caught.value)
    assert "allow_missing" in str(caught.value)


def test_duplicate_variable_names():
    with pytest.raises(ConfigError) as caught:
        parse_spec({"variables": [DIAGNOSIS, SIZE, {**SIZE, "column": "other"}]}, "dup.yaml")
    assert "dup.yaml" in str(caught.value)
    assert "['size']" in str(caught.value)


def test_bins_on_a_categorical():
    with pytest.raises(ConfigError, match=r"\(diagnosis\): 'bins' is for binned"):
        parse_variable({**DIAGNOSIS, "bins": [[0, 1], [1, 2]]}, "v")


@pytest.mark.parametrize("key", ["categories", "merge", "phrases"])
def test_categories_on_a_binned(key):
    with pytest.raises(ConfigError) as caught:
        parse_variable({**SIZE, key: DIAGNOSIS.get(key, {})}, "v")
    assert "(size)" in str(caught.value)
    assert f"{key!r} is for categorical" in str(caught.value)


def test_decimals_not_a_number_is_a_config_error():
    # parse_variable promises that every problem is a ConfigError naming the variable
    with pytest.raises(ConfigError, match=r"\(size\).*decimals"):
        parse_variable({**SIZE, "decimals": "two"}, "variables[1]")


@pytest.mark.parametrize("mapping", [None, [], "text"])
def test_spec_not_a_mapping(mapping):
    with pytest.raises(ConfigError, match=r"bad\.yaml: a table spec must be a mapping"):
        parse_spec(mapping, "bad.yaml")


@pytest.mark.parametrize("variables", [None, [], "diagnosis", {"name": "x"}])
def test_spec_without_variables(variables):
    with pytest.raises(ConfigError, match=r"bad\.yaml: 'variables' must be a non-empty list"):
        parse_spec({"variables": variables}, "bad.yaml")


def test_spec_error_names_the_entry():
    with pytest.raises(ConfigError, match=r"bad.yaml: variables\[1\] \(size\)"):
        parse_spec({"variables": [DIAGNOSIS, {**SIZE, "bins": [[0, 1]]}]}, "bad.yaml")


def test_load_spec_unreadable(tmp_path):
    with pytest.raises(ConfigError, match="cannot read table spec"):
        load_spec(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("variables: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot read table spec"):
        load_spec(broken)


# ------------------------------------------------------------------ the demo spec


def test_demo_spec_discretizes_all_of_wdbc():
    from sklearn.datasets import load_breast_cancer

    spec = load_spec(DEMO_SPEC)
    assert spec.name == "breast_cancer"
    assert spec.record_id_prefix == "wdbc"
    assert len(spec.variables) == 12
    for variable in spec.variables:
        assert variable.domain, variable.name
        assert len(set(variable.domain)) == len(variable.domain), variable.name
    raw = load_breast_cancer(as_frame=True).frame
    out = discretize(raw, spec, "sklearn:breast_cancer")
    assert len(out) == 569
    assert list(out.columns) == spec.names
    check_categories(out, spec, "sklearn:breast_cancer")
    # the target is 0 = malignant, 1 = benign: 212 malignant, 357 benign
    assert out["diagnosis"].value_counts().to_dict() == {"benign": 357, "malignant": 212}
    assert (out != MISSING).all().all()


# ------------------------------------------------------------------ check_categories, numbers


def test_check_categories_refuses_a_stray_value():
    spec = small_spec()
    frame = pd.DataFrame(
        {"diagnosis": ["benign", "malignant", "benign"], "size": ["0-10", "0-10", "10-20"]}
    )
    check_categories(frame, spec, "t.parquet")
    frame.at[1, "size"] = "nan"
    with pytest.raises(InputError) as caught:
        check_categories(frame, spec, "t.parquet")
    assert caught.value.record == "row 1"
    assert "t.parquet: row 1" in str(caught.value)
    assert "size = 'nan'" in str(caught.value)


def test_check_categories_refuses_nan_and_missing_columns():
    spec = small_spec()
    frame = pd.DataFrame({"diagnosis": ["benign", None], "size": ["0-10", "0-10"]})
    with pytest.raises(InputError, match="row 1"):
        check_categories(frame, spec, "t.parquet")
    with pytest.raises(
        InputError, match=r"t.parquet: not a discretized .* table: missing columns \['size'\]"
    ):
        check_categories(frame[["diagnosis"]], spec, "t.parquet")


@pytest.mark.parametrize(
    ("value", "text"),
    [(12, "12"), (12.0, "12"), (0.085, "0.085"), (0.1, "0.1"), (2510.0, "2510"), (0, "0")],
)
def test_format_number(value, text):
    assert format_number(value) == text


@pytest.mark.parametrize(
    ("value", "decimals", "text"),
    [
        (12.345, 1, "12.3"),
        (12.0, 2, "12.00"),
        (0.0851, 3, "0.085"),
        (87.6, 0, "88"),
        (3.0, 0, "3"),
    ],
)
def test_number_text(value, decimals, text):
    assert number_text(value, decimals) == text


# ------------------------------------------------------------------ tables


def _discretized(spec):
    return pd.DataFrame(
        {
            "record_id": ["r-0", "r-1", "r-2"],
            "sample": [0, 0, 1],
            "diagnosis": ["benign", "malignant", "benign"],
            "size": ["0-10", "20-50", "10-20"],
        }
    )


def test_table_round_trip(tmp_path):
    spec = small_spec()
    path = tmp_path / "samples.parquet"
    frame = _discretized(spec)
    write_table(frame, spec, path, {"step": "test"}, {"sample": pa.int32()})
    schema = pq.read_schema(path)
    assert schema.names == ["record_id", "sample", "diagnosis", "size"]
    assert schema.field("record_id").type == pa.string()
    assert schema.field("sample").type == pa.int32()
    assert schema.field("diagnosis").type == pa.string()
    assert schema.field("size").type == pa.string()
    back, provenance = read_table(path, spec, ("sample",))
    assert provenance == {"step": "test"}
    assert back["sample"].dtype == np.int32
    pd.testing.assert_frame_equal(
        back.astype({"sample": "int64"}), frame[back.columns.tolist()], check_dtype=False
    )
    assert back.to_dict("records") == frame.to_dict("records")


def test_write_table_refuses_a_value_outside_the_domain(tmp_path):
    spec = small_spec()
    frame = _discretized(spec)
    frame.at[2, "diagnosis"] = "cancer"
    path = tmp_path / "samples.parquet"
    with pytest.raises(InputError, match="row 2"):
        write_table(frame, spec, path, {}, {"sample": pa.int32()})
    assert not path.exists()


def test_read_table_refuses_a_file_missing_a_variable(tmp_path):
    spec = small_spec()
    path = tmp_path / "partial.parquet"
    pq.write_table(
        pa.table({"record_id": ["r-0"], "diagnosis": ["benign"]}),
        path,
    )
    with pytest.raises(InputError) as caught:
        read_table(path, spec)
    assert str(path) in str(caught.value)
    assert "size" in str(caught.value)
    # an extra column the caller asks for is checked as well
    complete = tmp_path / "complete.parquet"
    pq.write_table(
        pa.table({"record_id": ["r-0"], "diagnosis": ["benign"], "size": ["0-10"]}), complete
    )
    read_table(complete, spec)
    with pytest.raises(InputError, match="split"):
        read_table(complete, spec, ("split",))


def test_read_table_refuses_a_stray_value(tmp_path):
    spec = small_spec()
    path = tmp_path / "stray.parquet"
    pq.write_table(
        pa.table({"record_id": ["a", "b"], "diagnosis": ["benign", "x"], "size": ["0-10"] * 2}),
        path,
    )
    with pytest.raises(InputError, match=r"stray\.parquet: row 1"):
        read_table(path, spec)


# ------------------------------------------------------------------ sources


def _raw():
    return pd.DataFrame({"target": [0, 1, 1], "tumor size": [1.5, 12.0, 30.25]})


def test_read_csv_tsv_and_parquet(tmp_path):
    raw = _raw()
    csv, tsv, parquet = tmp_path / "t.csv", tmp_path / "t.tsv", tmp_path / "t.parquet"
    raw.to_csv(csv, index=False)
    raw.to_csv(tsv, index=False, sep="\t")
    raw.to_parquet(parquet, index=False)
    for path in (csv, tsv, parquet):
        frame = read_source_table({"path": str(path)})
        pd.testing.assert_frame_equal(frame, raw, check_dtype=False)
        out = discretize(frame, small_spec(), path)
        assert out["size"].tolist() == ["0-10", "10-20", "20-50"]


def test_read_sklearn():
    frame = read_source_table({"sklearn": "breast_cancer"})
    assert frame.shape == (569, 31)
    assert "target" in frame.columns
    assert "mean radius" in frame.columns


@pytest.mark.parametrize(
    "source",
    [
        {"path": "t.csv", "sklearn": "breast_cancer"},
        {},
        {"path": None, "sklearn": None},
    ],
)
def test_check_source_needs_exactly_one_key(source):
    with pytest.raises(ConfigError, match="exactly one of 'path'"):
        chosen_source(source)


def test_check_source_is_a_mapping():
    with pytest.raises(ConfigError, match="must be a mapping"):
        chosen_source("t.csv")


def test_check_source_unknown_key():
    with pytest.raises(ConfigError, match=r"unknown keys \['format'\]"):
        chosen_source({"path": "t.csv", "format": "csv"})


def test_check_source_unknown_sklearn_dataset():
    with pytest.raises(ConfigError) as caught:
        chosen_source({"sklearn": "iris"})
    assert "'iris'" in str(caught.value)
    assert "breast_cancer" in str(caught.value)


def test_unsupported_suffix(tmp_path):
    path = tmp_path / "t.xlsx"
    path.write_bytes(b"not a table")
    with pytest.raises(InputError) as caught:
        read_source_table({"path": str(path)})
    assert str(path) in str(caught.value)
    assert "'.xlsx'" in str(caught.value)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_source_table({"path": str(tmp_path / "absent.csv")})
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="not a readable table"):
        read_source_table({"path": str(broken)})


# ------------------------------------------------------------------ split


def test_split_labels_deterministic_and_exact():
    first = split_labels(101, 0.5, seed=3)
    assert first == split_labels(101, 0.5, seed=3)
    assert first != split_labels(101, 0.5, seed=4)
    assert set(first) == {TRAIN, HOLDOUT}
    assert first.count(HOLDOUT) == round(0.5 * 101)
    assert len(first) == 101


@pytest.mark.parametrize(("n", "fraction"), [(10, 0.5), (7, 0.3), (569, 0.5), (3, 0.5), (20, 0.9)])
def test_split_labels_holdout_count(n, fraction):
    labels = split_labels(n, fraction, seed=0)
    assert labels.count(HOLDOUT) == round(fraction * n)
    assert labels.count(TRAIN) == n - round(fraction * n)


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_split_labels_bad_fraction(fraction):
    with pytest.raises(ConfigError, match="holdout_fraction must be in"):
        split_labels(100, fraction, seed=0)


@pytest.mark.parametrize(("n", "fraction"), [(1, 0.5), (0, 0.5), (2, 0.9), (10, 0.01)])
def test_split_labels_too_few_records(n, fraction):
    with pytest.raises(ConfigError, match=f"{n} records cannot be split"):
        split_labels(n, fraction, seed=0)
