"""The documentation: README.md and docs/*.md.

Every relative link resolves (the file exists and a `#anchor` names a heading
of it under GitHub's slug rules), the README stays short, keeps the set-up
commands as they are, runs the tests the way CI does (`.ci/run`) and lists
every page under docs/. Pure text: no TensorFlow, no network.
"""

import os
import re
import shlex
from urllib.parse import unquote

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
README_MAX_BYTES = 12 * 1024

SETUP_LINES = (
    'pip install -e ".[test]" && python demo/run_demo.py        # install, run the demo, print the report',
    "python -m pytest -q tests                                   # run the tests",
)


def markdown_files():
    files = [README]
    for directory, _subdirs, names in os.walk(DOCS):
        files.extend(os.path.join(directory, name) for name in names if name.endswith(".md"))
    return sorted(files)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# --- Markdown, as far as links and headings need it -------------------------

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                and not line.strip()[len(match.group(1)):].strip():
            fence = None


CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
INLINE_LINK = re.compile(
    r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]"            # [text], one level of nested brackets
    r"\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"  # (target
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)",  # "title")
    re.S)
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
HTML_ANCHOR = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")


def without_code_spans(text):
    return CODE_SPAN.sub(lambda m: m.group(2), text)


def links(text):
    """(line number, target) of every link and image outside code."""
    blocks, block = [], []
    for number, line in prose_lines(text):
        if line.strip() and block and number == block[-1][0] + 1:
            block.append((number, line))
        else:
            if block:
                blocks.append(block)
            block = [(number, line)] if line.strip() else []
    if block:
        blocks.append(block)
    out = []
    for block in blocks:  # a paragraph at a time, so that a link's text may wrap
        start = block[0][0]
        joined = "\n".join(line for _number, line in block)
        joined = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), joined)
        for pattern in (INLINE_LINK, REFERENCE_DEFINITION, HTML_LINK):
            for match in pattern.finditer(joined):
                target = match.group(match.lastindex).strip()
                if target.startswith("<") and target.endswith(">"):
                    target = target[1:-1]
                out.append((start + joined.count("\n", 0, match.start()), target))
    return out


def heading_text(raw):
    """A heading as GitHub renders it to text: markup gone, content kept."""
    text = without_code_spans(raw)
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", text)  # links, images
    text = re.sub(r"<[^>]+>", "", text)                                          # HTML tags
    text = re.sub(r"(?<![\w])_{1,2}(?=\S)(.+?)(?<=\S)_{1,2}(?![\w])", r"\1", text)  # _emphasis_
    return text


def slug(text):
    """GitHub's anchor for a heading's text (github-slugger, without the dedup)."""
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(text):
    """Every anchor a page defines: its headings' slugs (duplicates get -1, -2,
    ...) and explicit HTML ids and names."""
    found, seen = set(), {}
    previous = ""
    for _number, line in prose_lines(text):
        heading = None
        atx = ATX_HEADING.match(line)
        if atx:
            heading = atx.group(2) or ""
        elif SETEXT_UNDERLINE.match(line) and previous.strip() \
                and not re.match(r"^ {0,3}([-*+]\s|\d+[.)]\s|\||>|#)", previous):
            heading = previous.strip()
        if heading is not None:
            base = slug(heading_text(heading))
            anchor, n = base, seen.get(base, 0)
            while anchor in found:
                n += 1
                anchor = f"{base}-{n}"
            seen[base] = n
            found.add(anchor)
        found.update(HTML_ANCHOR.findall(line))
        previous = line
    return found


def broken_links(path):
    """Messages for every relative link of the markdown file at ``path`` that
    does not resolve."""
    text = read(path)
    problems = []
    for number, target in links(text):
        if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            continue  # an absolute URL (https:, mailto:): not checked here
        where = f"{os.path.relpath(path, ROOT)}:{number}: {target!r}"
        file_part, _, anchor = target.partition("#")
        file_part = unquote(file_part.split("?", 1)[0])
        if not file_part:
            resolved = path
        elif file_part.startswith("/"):
            resolved = os.path.normpath(os.path.join(ROOT, file_part.lstrip("/")))
        else:
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        if os.path.relpath(resolved, ROOT).startswith(".."):
            problems.append(f"{where}: points outside the repository")
            continue
        if not os.path.exists(resolved):
            problems.append(f"{where}: no such file {os.path.relpath(resolved, ROOT)}")
            continue
        if anchor:
            if not resolved.endswith(".md"):
                problems.append(f"{where}: an anchor into a file that is not markdown")
            elif unquote(anchor) not in anchors(read(resolved)):
                problems.append(f"{where}: no heading in {os.path.relpath(resolved, ROOT)} "
                                f"makes the anchor #{unquote(anchor)}")
    return problems


# --- The checks -------------------------------------------------------------


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_resolve(path):
    problems = broken_links(path)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_readme_is_short():
    size = os.path.getsize(README)
    assert size < README_MAX_BYTES, f"README.md is {size} bytes; keep it under {README_MAX_BYTES} (move detail to docs/)"


def test_readme_keeps_the_setup_commands():
    lines = read(README).split("\n")
    for command in SETUP_LINES:
        assert command in lines, f"README.md lost the set-up line {command!r}"


def ci_test_command():
    commands = []
    for line in read(os.path.join(ROOT, ".ci", "run")).split("\n"):
        line = line.strip()
        if line.startswith("#"):
            continue
        if line.startswith("python -m pytest"):
            commands.append(shlex.split(line, comments=True))
    assert len(commands) == 1, f".ci/run should run pytest once, found {commands}"
    return commands[0]


def test_readme_test_command_is_the_one_ci_runs():
    ci = ci_test_command()
    readme = [shlex.split(line, comments=True) for _n, line in code_lines(read(README))
              if line.lstrip().startswith("python -m pytest")]
    assert readme, "README.md shows no `python -m pytest` command"
    assert ci in readme, f"README.md runs {readme}, .ci/run runs {ci}"


def code_lines(text):
    """(line number, line) inside fenced code blocks."""
    outside = {number for number, _line in prose_lines(text)}
    return [(n, line) for n, line in enumerate(text.split("\n"), 1)
            if n not in outside and line.strip() and not FENCE.match(line)]


def test_readme_lists_every_docs_page():
    linked = {os.path.normpath(os.path.join(ROOT, unquote(target.partition("#")[0])))
              for _number, target in links(read(README))}
    pages = [path for path in markdown_files() if path != README]
    assert pages, "docs/ has no pages"
    missing = [os.path.relpath(p, ROOT) for p in pages if p not in linked]
    assert missing == [], f"README.md's Documentation list lacks {missing}"


# --- The checker itself -----------------------------------------------------


def test_slugs_follow_github():
    page = "\n".join([
        "# Remote logdirs (S3, GCS, ...)",
        "## In `model.fit`",
        "## tb-leak compare",
        "## What tb-leak cannot see (and how to widen its view)",
        "## Options",
        "## Options",
        "Options",
        "-------",
        "```",
        "# not a heading",
        "```",
        "### A [linked](x.md) *heading* with `snake_case`",
    ])
    assert anchors(page) == {
        "remote-logdirs-s3-gcs-", "in-modelfit", "tb-leak-compare",
        "what-tb-leak-cannot-see-and-how-to-widen-its-view",
        "options", "options-1", "options-2", "a-linked-heading-with-snake_case",
    }


def test_checker_finds_broken_links(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "ROOT", str(tmp_path))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Part two\n")
    readme = tmp_path / "README.md"
    readme.write_text("\n".join([
        "[ok](docs/page.md) [ok](docs/page.md#part-two) [ok](#top) [web](https://example.com/x#y)",
        "# Top",
        "[gone](docs/nope.md) and [bad anchor](docs/page.md#part-three)",
        "[wrapped",
        "text](#nowhere)",
        "`[in code](docs/nope.md)`",
        "```",
        "[in a block](docs/nope.md)",
        "```",
    ]))
    problems = broken_links(str(readme))
    assert len(problems) == 3, problems
    assert "docs/nope.md" in problems[0] and "part-three" in problems[1] and "#nowhere" in problems[2]
