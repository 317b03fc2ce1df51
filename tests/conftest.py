"""Shared fixtures: the repository root, the PhysioNet corpus (when available)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from synthdeid.ingest import IngestResult, IngestSettings, ingest_corpus
from synthdeid.labels import LabelMap
from synthdeid.workflow.outputs import RuleOutputs
from workflow_helpers import declared_outputs

REPO = Path(__file__).resolve().parents[1]
# SLURM_CONF as the test session found it (None: unset); _no_slurm_probe replaces it
SLURM_CONF_AT_START = os.environ.get("SLURM_CONF")


# The modules that take longest, longest first (seconds on 2 AMD EPYC cores: the demo run
# and its reruns ~1,100; SLURM ~350; the local LLM ~270; PhysioNet ~170; shard resumption
# ~130). pyproject's addopts run the tests on 2 workers, a module to a worker, in this
# order (--dist loadfile --no-loadscope-reorder): these start first, one worker each,
# and the many short modules fill in around them.
LONGEST_FIRST = (
    "test_workflow.py",
    "test_slurm_workflow.py",
    "test_llm_local.py",
    "test_physionet_corpus.py",
    "test_bench_scale.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of LONGEST_FIRST first, in that order; the rest as collected."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def rule_outputs(repo: Path) -> RuleOutputs:
    """Every rule's declared outputs, parsed from the workflow (once per session)."""
    return declared_outputs(repo)


@pytest.fixture(scope="session")
def physionet_dir() -> Path:
    """The PhysioNet deid developer part, from PHYSIONET_DEID_DIR; skips when absent."""
    value = os.environ.get("PHYSIONET_DEID_DIR")
    if not value:
        pytest.skip("PHYSIONET_DEID_DIR is not set: PhysioNet integration tests need the corpus")
    path = Path(value)
    if not (path / "id.text").is_file() or not (path / "id-phi.phrase").is_file():
        pytest.skip(f"PHYSIONET_DEID_DIR={value} has no id.text / id-phi.phrase")
    return path


@pytest.fixture(scope="session")
def physionet_ingest(repo: Path, physionet_dir: Path) -> IngestResult:
    """The PhysioNet corpus ingested with config/physionet.yaml's settings (once per session)."""
    config = yaml.safe_load((repo / "config" / "physionet.yaml").read_text())
    settings = IngestSettings(
        format="physionet",
        label_map=LabelMap(config["labels"]["mapping"]),
        source="physionet-deid",
        encoding=config["corpus"]["encoding"],
        overlaps=config["corpus"]["overlaps"],
    )
    return ingest_corpus(physionet_dir, settings)


@pytest.fixture(scope="session", autouse=True)
def _model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """GGUF models converted for transformers go to one folder per test session (shared
    by its tests and the workflows they run), never to the user's cache."""
    folder = tmp_path_factory.mktemp("model-cache")
    previous = os.environ.get("SYNTHDEID_MODEL_CACHE")
    os.environ["SYNTHDEID_MODEL_CACHE"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("SYNTHDEID_MODEL_CACHE", None)
    else:
        os.environ["SYNTHDEID_MODEL_CACHE"] = previous


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """synthdeid.cli.main() reconfigures the root logger; undo it after every test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread for a module: faster for tiny models, robust to a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session", autouse=True)
def _no_slurm_probe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every snakemake start imports the SLURM executor plugin, which runs `scontrol show
    config` to read MinJobAge. Where SLURM's client is installed and no controller answers
    (after tests/test_slurm_workflow.py has stopped its cluster, say), scontrol waits 10 s
    for one: each snakemake a test starts would pay that. An empty SLURM_CONF makes
    scontrol fail at once; the SLURM tests put the real one back (slurm_conf_at_start)."""
    empty = tmp_path_factory.mktemp("no-slurm") / "slurm.conf"
    empty.write_text("")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SLURM_CONF", str(empty))
        yield


@pytest.fixture(scope="session")
def slurm_conf_at_start() -> str | None:
    """SLURM_CONF as the test session found it (None: unset)."""
    return SLURM_CONF_AT_START
