"""The documentation holds together: every relative link in README.md and docs/ names a file
(and a heading) that exists, every setting is on the settings page, and no file of the
project points at a document the repository does not hold (a design note, the articles the
defaults came from, tracker issue numbers, work-item names)."""

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# Pointers to documents the repository does not hold; written in parts, so that this file
# does not match itself.
_POINTER = re.compile(
    "|".join(
        [
            r"DESIGN" + r"\.md",
            r"\bseeds? ?0" + r"[0-9]",
            r"\bissue ?#?" + r"[0-9]+",
            r"\bC1" + r"[0-9]\b",
        ]
    ),
    re.I,
)


def _prose(text: str) -> str:
    """The text outside code blocks and code spans (a link there is an example, not a link)."""
    return _CODE.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = _CODE.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in _HEADING.findall(_FENCE.sub("", page.read_text()))}


def broken_links(page: Path) -> list[str]:
    """The relative links of a Markdown page whose file, or heading, does not exist."""
    broken = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.is_file():
            broken.append(target)
            continue
        if anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## A part\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#a-part) [ok](#here) [web](https://example.com/x)\n"
        "`[code](nowhere.md)`\n\n## Here\n\n"
        "[gone](nowhere.md) [gone](nowhere.md#x) [no anchor](other.md#nope)\n"
    )
    assert broken_links(page) == ["nowhere.md", "nowhere.md#x", "other.md#nope"]


def test_readme_links_into_docs() -> None:
    links = _LINK.findall(_prose((ROOT / "README.md").read_text()))
    assert any(link.startswith("docs/") for link in links)


def test_every_setting_is_documented() -> None:
    read = set()
    for module in ("config/settings.py", "config/http_protocol.py"):
        text = (ROOT / module).read_text()
        read |= set(re.findall(r"environ(?:\.get)?[\[(]\s*\"(SLUICE_\w+)\"", text))
    documented = set(re.findall(r"`(SLUICE_\w+)`", (ROOT / "docs" / "settings.md").read_text()))
    assert read, "no settings found: the pattern no longer matches config/settings.py"
    assert sorted(read - documented) == []


def _project_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def test_no_pointer_to_documents_the_repository_does_not_hold() -> None:
    found = []
    for path in _project_files():
        data = path.read_bytes()
        if b"\0" in data:  # images and other binaries
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if _POINTER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert found == []


@pytest.mark.parametrize(
    "line",
    [
        "see DESIGN" + ".md",
        "(se" + "ed 003)",
        "se" + "eds 000, 001",
        "Iss" + "ue 13's pages",
        "(iss" + "ue #9)",
        "owner C1" + "3",
    ],
)
def test_pointer_pattern_catches(line: str) -> None:
    assert _POINTER.search(line)
