"""The documentation stays true to the install page and to the code.

The install page (the user-facing contract) is kept verbatim in docs/contract/install-page.txt;
it names pages, a table of values and cosign commands, and the parts of it these tests need are
also written out below, each checked against the page so that neither drifts silently.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from crewlet_operator import metrics
from crewlet_operator.envtest import binaries

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
INSTALL = DOCS / "install.md"
VALUES = ROOT / "charts" / "crewlet-operator" / "values.yaml"
INSTALL_PAGE = DOCS / "contract" / "install-page.txt"

# Every page the install page names (and the library's, the repository's and the bench's),
# with its title.
PAGES: dict[str, str] = {
    "docs/install.md": "Installing the Operator",
    "docs/quickstart.md": "Quickstart",
    "docs/exposure-and-network-policy.md": "Exposure and network policy",
    "docs/backups.md": "Backups",
    "docs/versions-and-suspension.md": "Changes, versions and suspension",
    "docs/hosting-many-tenants.md": "Hosting many tenants on the operator",
    "docs/library.md": "Writing your own controller with crewlet_operator",
    "docs/metrics.md": "Metrics",
    "docs/scaling.md": "Scaling the operator",
    "docs/security.md": "Security: what the operator's token can do",
    "docs/tracing.md": "Tracing",
    "RELEASING.md": "Releasing",
    "CHANGELOG.md": "Changelog",
    "CONTRIBUTING.md": "Contributing",
    "bench/README.md": "Benchmarks",
    "bench/NOTES.md": "Bench notes",
}
# How the install page refers to each page it names.
PAGE_REFERENCES: dict[str, str] = {
    "RELEASING.md": "RELEASING.md",
    "docs/quickstart.md": "Quickstart",
    "docs/exposure-and-network-policy.md": "(Exposure and network policy)",
    "docs/backups.md": "(Backups)",
    "docs/versions-and-suspension.md": "(Changes, versions and suspension)",
    "docs/hosting-many-tenants.md": "(Hosting many tenants on the operator)",
}
# Sections the install page names, and the page that holds each.
SECTION_REFERENCES: dict[str, str] = {"Images from main": "docs/versions-and-suspension.md"}

# The install page's table "Values worth setting": each value, with the default it states.
INSTALL_VALUES: dict[str, Any] = {
    "manager.replicas": 2,
    "manager.resources": {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    },
    "metrics.enabled": True,
    "metrics.secure": True,
    "prometheus.enabled": False,
    "rbac.helpers.enabled": False,
    "tenantProvisioner.enabled": False,
    "tenantProvisioner.subjects": [],
}

IDENTITY_REGEXP = (
    "--certificate-identity-regexp "
    "'^https://github.com/crewlet/crewlet-operator/\\.github/workflows/release\\.yml@refs/tags/v'"
)
ISSUER = "--certificate-oidc-issuer https://token.actions.githubusercontent.com"
MAIN_IDENTITY = (
    "--certificate-identity "
    "'https://github.com/crewlet/crewlet/.github/workflows/main-image.yml@refs/heads/main'"
)
# The cosign commands of the install page, which install.md and RELEASING.md must show as they are.
COSIGN_COMMANDS = [
    f"cosign verify ghcr.io/crewlet/crewlet-operator/engine:v0.2.0 {IDENTITY_REGEXP} {ISSUER}",
    f"cosign verify ghcr.io/crewlet/crewlet:main {MAIN_IDENTITY} {ISSUER}",
]

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A reference link's definition, `[label]: target` on a line of its own (CHANGELOG.md's).
DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:\s+(\S+)", re.MULTILINE)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)


def install_page() -> str:
    return INSTALL_PAGE.read_text()


def documents() -> list[Path]:
    top = [ROOT / name for name in ("README.md", "RELEASING.md", "CHANGELOG.md", "CONTRIBUTING.md")]
    return [
        *top,
        *sorted(DOCS.glob("*.md")),
        ROOT / "bench" / "README.md",
        ROOT / "bench" / "NOTES.md",
    ]


def prose(markdown: str) -> str:
    """The text outside fenced code blocks."""
    return FENCE.sub("", markdown)


def squash(text: str) -> str:
    """Shell text with line continuations and runs of whitespace made single spaces."""
    return re.sub(r"\s+", " ", text.replace("\\\n", " ")).strip()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for match in HEADING.finditer(prose(markdown)):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def title(markdown: str) -> str:
    match = re.search(r"^# (.+)$", markdown, re.MULTILINE)
    return match.group(1).strip() if match else ""


# --- pages -----------------------------------------------------------------------------------


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_page_exists_with_its_title(page: str) -> None:
    path = ROOT / page
    assert path.is_file(), f"{page} is missing"
    assert title(path.read_text()) == PAGES[page]


def test_the_install_page_names_these_pages() -> None:
    page = install_page()
    for path, reference in PAGE_REFERENCES.items():
        assert reference in page, f"the install page no longer names {reference} ({path})"
    for section in SECTION_REFERENCES:
        assert f"({section})" in page


@pytest.mark.parametrize(("section", "page"), sorted(SECTION_REFERENCES.items()))
def test_sections_the_install_page_names_exist(section: str, page: str) -> None:
    assert slug(section) in anchors((ROOT / page).read_text())


# --- links -----------------------------------------------------------------------------------


def relative_links() -> list[tuple[Path, str]]:
    links = []
    for document in documents():
        text = prose(document.read_text())
        targets = [m.group(1) for m in LINK.finditer(text)]
        targets += [m.group(2) for m in DEFINITION.finditer(text)]
        for target in targets:
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                links.append((document, target))
    return links


def test_the_documents_have_relative_links() -> None:
    assert len(relative_links()) > 20


@pytest.mark.parametrize(
    ("document", "target"),
    relative_links(),
    ids=[f"{d.relative_to(ROOT)}->{t}" for d, t in relative_links()],
)
def test_every_relative_link_resolves(document: Path, target: str) -> None:
    path_part, _, anchor = target.partition("#")
    path = (document.parent / path_part).resolve() if path_part else document
    assert path.exists(), f"{document.relative_to(ROOT)} links to {target}: no such file"
    if anchor and path.suffix == ".md":
        assert anchor in anchors(path.read_text()), (
            f"{document.relative_to(ROOT)} links to {target}: {path.name} has no such heading"
        )


# --- the changelog ---------------------------------------------------------------------------

CHANGELOG = ROOT / "CHANGELOG.md"
# An entry under [Unreleased] is one line, at most this long, with a link to the section of the
# docs that explains it (CONTRIBUTING.md): what takes more words goes into that section.
ENTRY_MAX = 160
# A reference link, `[text][label]` or `[text][]`, resolved by a DEFINITION at the file's foot.
REFERENCE = re.compile(r"(?<!!)\[([^\]]+)\]\[([^\]]*)\]")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:")


def unreleased(markdown: str) -> list[str]:
    """The lines of the [Unreleased] section, up to the next version or the link definitions."""
    lines = markdown.splitlines()
    section: list[str] = []
    for line in lines[lines.index("## [Unreleased]") + 1 :]:
        if line.startswith("## ") or DEFINITION.match(line):
            break
        section.append(line)
    return section


def section_links(line: str, definitions: dict[str, str]) -> list[str]:
    """The targets of a line's links that name a section of a document in the repository."""
    targets = [m.group(1) for m in LINK.finditer(line)]
    labels = [(m.group(2) or m.group(1)).lower() for m in REFERENCE.finditer(line)]
    targets += [definitions.get(label, "") for label in labels]
    return [t for t in targets if "#" in t and not SCHEME.match(t)]


def changelog_problems(markdown: str) -> list[str]:
    """Each entry under [Unreleased] that is not one line with a link to a section, and why."""
    definitions = {m.group(1).lower(): m.group(2) for m in DEFINITION.finditer(markdown)}
    problems: list[str] = []
    entry = ""  # the entry the line before belongs to, if any
    for line in unreleased(markdown):
        if line.startswith("- "):
            entry = line
            if len(line) > ENTRY_MAX:
                problems.append(f"over {ENTRY_MAX} characters: {line}")
            if not section_links(line, definitions):
                problems.append(f"no link to a section of the docs: {line}")
        elif entry and line.strip() and not line.startswith("#"):
            problems.append(f"more than one line: {entry}")
            entry = ""  # said once an entry
        else:
            entry = ""
    return problems


def test_every_unreleased_entry_is_one_line_with_a_link() -> None:
    """Issue 49: entries ran to a median of 311 characters, and few said where to read on."""
    text = CHANGELOG.read_text()
    assert len([line for line in unreleased(text) if line.startswith("- ")]) > 10
    assert changelog_problems(text) == []


def test_the_changelog_rule_fails_what_breaks_it() -> None:
    sample = """## [Unreleased]

### Added

- Library: a line with a [link](docs/library.md#4-the-cache).
- Library: a line with a reference link ([Cache][]).
- Library: two lines ([Cache][]),
  the second one.
- Library: no link.
- Library: a link to a page, not to a section ([library](docs/library.md)).
- Library: a reference that nothing defines ([Nowhere][]).
- Library: {long} ([Cache][]).

[Cache]: docs/library.md#4-the-cache
""".replace("{long}", "x" * ENTRY_MAX)
    problems = [problem.split(":")[0] for problem in changelog_problems(sample)]
    assert problems == [
        "more than one line",
        "no link to a section of the docs",
        "no link to a section of the docs",
        "no link to a section of the docs",
        f"over {ENTRY_MAX} characters",
    ]


# --- the install page's values ---------------------------------------------------------------


def install_page_values(page: str) -> list[str]:
    """The value names of the install page's table (a row per line, tab-separated)."""
    lines = page.splitlines()
    start = lines.index("Value\tDefault\tWhy") + 1
    names: list[str] = []
    for line in lines[start:]:
        if "\t" not in line:
            break
        first = line.split("\t")[0]
        for written in (n.strip().strip("`") for n in first.split(",")):
            # ".subjects" continues the value before it: tenantProvisioner.subjects.
            relative = written.startswith(".") and names
            names.append(names[-1].split(".")[0] + written if relative else written)
    return names


def test_the_copied_table_is_the_install_pages() -> None:
    assert install_page_values(install_page()) == list(INSTALL_VALUES)


@pytest.mark.parametrize("value", list(INSTALL_VALUES))
def test_install_md_names_every_value_of_the_install_pages_table(value: str) -> None:
    assert f"`{value}`" in INSTALL.read_text()


@pytest.mark.parametrize(("value", "default"), list(INSTALL_VALUES.items()))
def test_every_value_of_the_table_has_the_stated_default(value: str, default: Any) -> None:
    node: Any = yaml.safe_load(VALUES.read_text())
    for part in value.split("."):
        assert isinstance(node, dict), value
        assert part in node, f"{value} is not in values.yaml"
        node = node[part]
    assert node == default


# --- metrics ---------------------------------------------------------------------------------


def exported_metrics() -> dict[str, tuple[str, ...]]:
    """Every metric of crewlet_operator.metrics, by the name it is exposed with, to its labels."""
    found: dict[str, tuple[str, ...]] = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            name = value._name + ("_total" if value._type == "counter" else "")
            found[name] = tuple(value._labelnames)
    return found


def test_the_metrics_module_has_metrics() -> None:
    """Every metric of the library's registry is one of crewlet_operator.metrics' (a daemon's
    own collectors, registered beside them, are not metric wrappers)."""
    wrappers = [c for c in metrics.REGISTRY._collector_to_names if isinstance(c, MetricWrapperBase)]
    assert len(exported_metrics()) == len(wrappers)


@pytest.mark.parametrize(("name", "labels"), sorted(exported_metrics().items()))
def test_every_metric_is_documented_with_its_labels(name: str, labels: tuple[str, ...]) -> None:
    rows = [
        line
        for line in (DOCS / "metrics.md").read_text().splitlines()
        if line.startswith(f"| `{name}` |")
    ]
    assert len(rows) == 1, f"docs/metrics.md has no table row for {name}"
    for label in labels:
        assert f"`{label}`" in rows[0], f"docs/metrics.md does not give {name} its label {label}"


# --- commands --------------------------------------------------------------------------------


def test_the_copied_cosign_commands_are_the_install_pages() -> None:
    page = squash(install_page())
    for command in COSIGN_COMMANDS:
        assert command in page


@pytest.mark.parametrize("document", ["docs/install.md", "RELEASING.md"])
def test_the_cosign_commands_are_shown_as_the_install_page_shows_them(document: str) -> None:
    text = squash((ROOT / document).read_text())
    for command in COSIGN_COMMANDS:
        assert command in text, f"{document} does not show `{command}`"


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+):", text, re.MULTILINE))


def test_every_make_target_the_documents_name_exists() -> None:
    targets = make_targets()
    named: set[str] = set()
    for document in documents():
        text = document.read_text()
        commands = re.findall(r"`make ([^`]+)`", text)  # inline code
        for block in FENCE.findall(text):
            commands += re.findall(r"^\s*make ([^#\n]+)", block, re.MULTILINE)
        for command in commands:  # targets come before the first variable (IMG=...)
            words = itertools.takewhile(lambda w: "=" not in w, command.split())
            named.update(w for w in words if not w.startswith("-"))
    assert named >= {"run", "test", "docker-build", "helm-deploy", "test-e2e-kind"}
    assert sorted(named - targets) == [], "the documents name make targets that do not exist"


def test_the_quickstart_marks_only_sh_blocks() -> None:
    text = (DOCS / "quickstart.md").read_text()
    markers = re.findall(r"<!--\s*run[^>]*-->\n(.*)\n", text)
    assert markers, "the Quickstart marks no runnable block"
    assert all(line == "```sh" for line in markers), markers


def test_the_quickstart_puts_the_kubectl_of_make_bins_on_the_path() -> None:
    text = (DOCS / "quickstart.md").read_text()
    directories = set(re.findall(r"\.cache/crewlet-operator/bin/(k8s-v[0-9.]+)", text))
    assert directories == {binaries.cache_dir().name}


def test_the_readme_taste_of_the_library_runs() -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) == 1
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # defines; runs nothing
    assert callable(namespace["main"])
    assert len(blocks[0].splitlines()) <= 25


LOG_LEVELS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})


def logged_events() -> set[str]:
    """Every event the library and the operator log: the first argument, a string, of a call
    of a structlog logger's level method."""
    found: set[str] = set()
    for path in [*(ROOT / "crewlet_operator").rglob("*.py"), *(ROOT / "reconcilers").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in LOG_LEVELS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.add(node.args[0].value)
    return found


def quoted_log_lines() -> list[tuple[str, str]]:
    """(where, event) of every log line the documents quote: ``"event": "..."`` in a page,
    ``logs "..."`` in the chart's NOTES."""
    quoted = [
        (str(path.relative_to(ROOT)), event)
        for path in [*DOCS.glob("*.md"), ROOT / "README.md"]
        for event in re.findall(r'`"event": "([^"]+)"', path.read_text())
    ]
    notes = ROOT / "charts" / "crewlet-operator" / "templates" / "NOTES.txt"
    quoted += [("NOTES.txt", e) for e in re.findall(r'logs "([^"]+)"', notes.read_text())]
    return quoted


def test_every_log_line_the_documents_quote_is_logged() -> None:
    """Issue 48: docs/install.md quoted a log line the daemon does not print."""
    quoted = quoted_log_lines()
    assert len(quoted) >= 4, quoted
    events = logged_events()
    assert [(where, event) for where, event in quoted if event not in events] == []
