"""Repository hygiene the test command checks: style, the rule graph, the pinned envs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from smk_rules import read_rule_files

BIN = Path(sys.executable).parent


def run(repo: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=300)


def test_ruff_lint_and_format(repo: Path) -> None:
    for command in (
        ("check", "src", "tests", "bench"),
        ("format", "--check", "src", "tests", "bench"),
    ):
        result = run(repo, str(BIN / "ruff"), *command)
        assert result.returncode == 0, result.stdout + result.stderr


def test_snakefmt(repo: Path) -> None:
    result = run(repo, str(BIN / "snakefmt"), "--check", "workflow")
    assert result.returncode == 0, result.stdout + result.stderr


def rule_graph(dot: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Rules and edges of a --rulegraph DOT text (node numbers vary between runs)."""
    names = dict(re.findall(r'^\s*(\d+)\[label = "([^"]+)"', dot, re.MULTILINE))
    edges = re.findall(r"^\s*(\d+) -> (\d+)", dot, re.MULTILINE)
    return set(names.values()), {(names[a], names[b]) for a, b in edges}


def test_committed_rule_graph_is_current(repo: Path) -> None:
    result = run(repo, sys.executable, "-m", "snakemake", "all", "probe_gpu_env", "--rulegraph")
    assert result.returncode == 0, result.stderr
    committed = (repo / "docs" / "rulegraph.dot").read_text()
    assert rule_graph(result.stdout) == rule_graph(committed), (
        "docs/rulegraph.* is stale: run scripts/render-rulegraph.sh"
    )


def test_torch_is_pinned_exactly(repo: Path) -> None:
    lock = (repo / "envs" / "requirements-cpu.lock").read_text().splitlines()
    assert "torch==2.13.0" in lock
    assert 'torch==2.13.0"' in (repo / "pyproject.toml").read_text()


def test_main_env_has_opacus_1_6_and_the_gan_overlay_has_0_14() -> None:
    """The smartnoise / opacus conflict, solved: one env, an overlay only GAN rules see."""
    overlay = Path(sys.prefix) / "opt" / "dpgan-overlay"
    if not overlay.is_dir():
        pytest.skip(f"{overlay} is absent: build the env with scripts/setup-env.sh")
    probe = "import opacus, snsynth; print(opacus.__version__)"
    main = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert main.stdout.strip() == "1.6.0", main.stderr
    env = {**os.environ, "PYTHONPATH": str(overlay)}
    gan = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert gan.stdout.strip() == "0.14.0", gan.stderr


PAPER_BY_FILE_NUMBER = re.compile(r"(?i)\bseeds? ?-?0{2}[0-4]\b")
CITING_PATHS = (
    "src",
    "workflow",
    "config",
    "docs",
    "README.md",
    "resources",
    "scripts",
    "bench",
    "envs",
    "profiles",
)


def test_no_paper_is_cited_by_file_number(repo: Path) -> None:
    """Papers are cited by short name and section (docs/references.md), never by file number."""
    if not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    listed = run(repo, "git", "ls-files", "-z", "--", *CITING_PATHS)
    assert listed.returncode == 0, listed.stderr
    hits = []
    for name in filter(None, listed.stdout.split("\0")):
        try:
            text = (repo / name).read_text(encoding="utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            continue  # deleted in the working tree, or not text
        hits += [
            f"{name}:{number}"
            for number, line in enumerate(text.splitlines(), 1)
            if PAPER_BY_FILE_NUMBER.search(line)
        ]
    assert not hits, "cite the paper by short name (docs/references.md):\n" + "\n".join(hits)


MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


# a commit cited in prose: "commit 1a2b3c4", "at 1a2b3c4", "code 1a2b3c4", and lists after
# them ("commits 1a2b3c4, 5d6e7f8 and 9a0b1c2"); a token needs a digit (no English word)
COMMIT_CITATION = re.compile(
    r"\b(?:[Cc]ommits?|at|code)\s+((?:`?[0-9a-f]{7,40}`?(?:,\s*|\s+and\s+)?)+)"
)
HEX_TOKEN = re.compile(r"[0-9a-f]{7,40}")


def cited_commits(text: str) -> set[str]:
    """The commit ids a Markdown text cites (see COMMIT_CITATION)."""
    found = set()
    for match in COMMIT_CITATION.finditer(text):
        found |= {t for t in HEX_TOKEN.findall(match.group(1)) if re.search(r"\d", t)}
    return found


def test_cited_commits_are_read_as_such() -> None:
    text = "trained at d6a8caa; commits 1a2b3c4, 5d6e7f8 and 9a0b1c2; sha256 `cc324af0`; at facade1"
    assert cited_commits(text) == {"d6a8caa", "1a2b3c4", "5d6e7f8", "9a0b1c2", "facade1"}
    assert cited_commits("config hash `589ba5345e27`, code digest sha256:41ce4ab5") == set()


def test_readme_and_docs_cite_only_commits_of_this_history(repo: Path) -> None:
    """A result cites the commit it was measured at: that commit must be in main's history."""
    shallow = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=repo, capture_output=True, text=True
    )
    if shallow.returncode != 0:
        pytest.skip("not a git checkout")
    if shallow.stdout.strip() == "true":
        pytest.skip("a shallow clone lacks the history the citations point into")
    missing = []
    for path in [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]:
        for commit in sorted(cited_commits(path.read_text("utf-8"))):
            ancestor = subprocess.run(
                ["git", "merge-base", "--is-ancestor", commit, "HEAD"],
                cwd=repo,
                capture_output=True,
            )
            if ancestor.returncode != 0:
                missing.append(f"{path.relative_to(repo)}: {commit}")
    assert not missing, "cites commits that are not ancestors of HEAD:\n" + "\n".join(missing)


def test_readme_is_short_and_its_links_resolve(repo: Path) -> None:
    """The README stays an overview; every relative link of it and of docs/ reaches a file."""
    readme = repo / "README.md"
    lines = len(readme.read_text().splitlines())
    assert lines <= 300, f"README.md has {lines} lines: move details into docs/"
    broken = []
    for page in (readme, *sorted((repo / "docs").rglob("*.md"))):
        text = re.sub(r"(?s)<!--.*?-->", "", page.read_text())
        for target in MARKDOWN_LINK.findall(text):
            path = target.split("#", 1)[0]
            if not path or re.match(r"[a-z][a-z0-9+.-]*:", path):
                continue  # an anchor in the page, or a URL
            resolved = (page.parent / path).resolve()
            if not resolved.exists() or not resolved.is_relative_to(repo.resolve()):
                broken.append(f"{page.relative_to(repo)}: {target}")
    assert not broken, "links to no file in the repository:\n" + "\n".join(broken)


def test_conda_envs_differ_only_in_torch_and_install_the_tested_lock_and_package(
    repo: Path,
) -> None:
    """conda channels are unreachable here: check what can be checked without them."""
    import yaml

    envs = repo / "envs"
    flavours = {"cpu": "--torch cpu", "gpu": "--torch cuda"}
    for name, torch in flavours.items():
        spec = yaml.safe_load((envs / f"{name}.yaml").read_text())
        # Snakemake copies env files into .snakemake/conda/: no relative file references
        assert spec["dependencies"] == ["python=3.11.7", "pip=24.3.1"], spec
        script = (envs / f"{name}.post-deploy.sh").read_text()
        assert f'envs/install.sh --prefix "$CONDA_PREFIX" {torch}' in script
        assert run(repo, "bash", "-n", str(envs / f"{name}.post-deploy.sh")).returncode == 0
    install = (envs / "install.sh").read_text()
    assert run(repo, "bash", "-n", str(envs / "install.sh")).returncode == 0
    # the same lock files the venv route (scripts/setup-env.sh, CI) installs
    for lock in re.findall(r"envs/(requirements-[\w-]+\.lock)", install):
        assert (envs / lock).is_file(), lock
    assert {"requirements-cpu.lock", "requirements-smartnoise.lock"} <= set(
        re.findall(r"envs/(requirements-[\w-]+\.lock)", install)
    )
    assert "-e ." in install and "download.pytorch.org/whl/cpu" in install
    assert "envs/install.sh" in (repo / "scripts" / "setup-env.sh").read_text()


def test_rules_that_ask_for_a_gpu_run_in_the_gpu_env(repo: Path) -> None:
    """conda: and gpu= agree: a rule that may get a GPU has the CUDA torch, others the CPU one."""
    checked = 0
    rules = read_rule_files(sorted((repo / "workflow" / "rules").glob("*.smk")))
    for rule, directives in ((name, rule.directives) for name, rule in rules.items()):
        env = re.search(r'"\.\./\.\./envs/(\w+)\.yaml"', directives.get("conda", ""))
        gpu = re.search(r"^\s*gpu=(.+),$", directives.get("resources", ""), flags=re.MULTILINE)
        if env is None:
            continue  # a target, or a rule inheriting its env
        wants_gpu = gpu is not None and gpu.group(1) != "0"
        assert env.group(1) == ("gpu" if wants_gpu else "cpu"), (
            f"rule {rule}: gpu={gpu.group(1) if gpu else 'none'} but envs/{env.group(1)}.yaml"
        )
        checked += 1
    assert checked > 30


def test_shipped_slurm_profile_holds_no_ci_cluster_values(repo: Path) -> None:
    import yaml

    profile = yaml.safe_load((repo / "profiles" / "slurm" / "config.v8+.yaml").read_text())
    assert "slurm_partition" not in profile["default-resources"]
    assert "slurm-init-seconds-before-status-checks" not in profile
    assert profile["executor"] == "slurm"
    # GPU rules run in envs/gpu.yaml (CUDA torch), not the pinned CPU venv
    assert profile["software-deployment-method"] == "conda"


def test_the_reliability_page_counts_the_tries_there_are(repo: Path) -> None:
    """docs/reliability.md states how many tries each reliability test file holds."""
    files = sorted((repo / "tests").glob("test_reliability_*.py"))
    result = run(repo, sys.executable, "-m", "pytest", "--collect-only", "-q", *map(str, files))
    assert result.returncode == 0, result.stdout + result.stderr
    collected: dict[str, int] = {}
    for line in result.stdout.splitlines():
        if "::" in line and not line.endswith("::test_the_matrix_ids_are_unique"):  # no try
            name = Path(line.split("::")[0]).name
            collected[name] = collected.get(name, 0) + 1
    page = (repo / "docs" / "reliability.md").read_text(encoding="utf-8")
    stated = {
        name: int(n) for name, n in re.findall(r"`(test_reliability_\w+\.py)` \((\d+)\)", page)
    }
    matrix = re.search(r"`tests/test_reliability_matrix\.py`, (\d+) tries", page)
    newer = re.search(r"`tests/test_reliability_\*\.py`, (\d+) tries", page)
    assert matrix and newer
    stated["test_reliability_matrix.py"] = int(matrix[1])
    assert stated == collected
    assert int(newer[1]) == sum(collected.values()) - collected["test_reliability_matrix.py"]
