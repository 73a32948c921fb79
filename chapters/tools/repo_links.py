#!/usr/bin/env python3
"""mdBook preprocessor: links from a chapter page into the repository lead to the repository,
and the tildes KaTeX typesets stay out of Markdown's reach.

The chapter pages link the code they explain with relative paths (`../src/ch06_attention/`,
`../tests/ch06_attention.rs`, `../README.md`), which resolve on GitHub and in a clone. In the
built book those files do not exist, so this preprocessor rewrites every Markdown link whose
target lies outside the book's folder to `<git-repository-url>/blob/<branch>/<path>` (`tree/`
for a folder), keeping any `#fragment`. Links between pages and images inside the book are left
alone (mdBook turns `page.md` into `page.html` and copies `img/`). A link to a repository path
that does not exist is an error: the build stops and names the page and the link.

It runs after mdbook-katex and also writes each `~` that KaTeX typeset as an element's content
(`\\tilde X`) as `&#126;`: Markdown would read two of them as a strikethrough and break the formula
(mdbook-katex issue 123; the scan fails on such a formula).

It speaks mdBook's preprocessor protocol (0.5): `repo_links.py supports <renderer>` exits 0, and
otherwise it reads `[context, book]` as JSON on stdin and writes the book back on stdout. The
repository URL is `output.html.git-repository-url` in book.toml; the branch is
`preprocessor.repo-links.branch` (default `main`).

Python's standard library only: the main crate gains no dependency and nothing is compiled.
`python3 repo_links.py --self-test` checks the rewriting on planted pages.
"""

import json
import os
import posixpath
import re
import sys

# An inline link or image: `[text](target)` or `[text](target "title")`; group 1 is `!` for an
# image, group 2 the target. Link text with nested brackets is not used by the pages.
LINK = re.compile(r'(!?)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"\n]*")?\s*\)')
FENCE = re.compile(r"^\s*(```|~~~)")


def is_relative(target):
    return not (
        target.startswith("#")
        or target.startswith("/")
        or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target)
    )


def rewrite_target(target, page_dir, repo_root, book_root, base, branch, errors, where):
    """The new target for a relative link, or None to keep it."""
    path, sep, fragment = target.partition("#")
    if not path:
        return None
    resolved = posixpath.normpath(posixpath.join(page_dir, path))  # relative to the book root
    if not resolved.startswith("../") and resolved != "..":
        return None  # inside the book
    in_repo = posixpath.normpath(posixpath.join(book_root, resolved))  # relative to repo root
    if in_repo.startswith("../") or in_repo == "..":
        errors.append(f"{where}: {target} leaves the repository")
        return None
    on_disk = os.path.join(repo_root, in_repo)
    if not os.path.exists(on_disk):
        errors.append(f"{where}: {target} names {in_repo}, which does not exist")
        return None
    kind = "tree" if os.path.isdir(on_disk) else "blob"
    url = f"{base}/{kind}/{branch}" + ("" if in_repo == "." else f"/{in_repo}")
    return url + (sep + fragment if fragment else "")


CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)


def masked(text):
    """`text` with fenced code blocks and inline code spans blanked out (newlines kept), so the
    link pattern sees only Markdown outside code; offsets stay those of `text`."""
    out = list(text)
    offset = 0
    fenced = False
    for line in text.split("\n"):
        if FENCE.match(line) or fenced:
            if FENCE.match(line):
                fenced = not fenced
            out[offset : offset + len(line)] = " " * len(line)
        offset += len(line) + 1
    blanked = "".join(out)
    for m in CODE_SPAN.finditer(blanked):
        out[m.start() : m.end()] = [c if c == "\n" else "x" for c in m.group(0)]
    return "".join(out)


def rewrite_page(text, page_dir, repo_root, book_root, base, branch, errors, name):
    """`text` with its links into the repository rewritten; code blocks and spans untouched."""
    pieces = []
    last = 0
    for m in LINK.finditer(masked(text)):
        target = m.group(2)
        if m.group(1) == "!" or not is_relative(target):
            continue  # images stay in the book; other sites stay as they are
        where = f"{name}:{text.count(chr(10), 0, m.start()) + 1}"
        new = rewrite_target(target, page_dir, repo_root, book_root, base, branch, errors, where)
        if new is not None:
            pieces.append(text[last : m.start(2)])
            pieces.append(new)
            last = m.end(2)
    pieces.append(text[last:])
    return "".join(pieces)


def protect_katex_tildes(text):
    """`text` with each `~` that mdbook-katex typeset as an element's whole content (`\\tilde`
    gives `<mo>~</mo>` in the MathML and `<span …>~</span>` in the HTML) written `&#126;`, outside
    code. Left as it is, Markdown reads two of them as a strikethrough and cuts the formula's
    spans apart (mdbook-katex issue 123)."""
    hidden = masked(text)
    return "".join(
        "&#126;" if c == "~" and hidden[i] == "~" and text[i - 1 : i] == ">"
        and text[i + 1 : i + 2] == "<" else c
        for i, c in enumerate(text)
    )


def chapters(items):
    for item in items:
        if isinstance(item, dict) and "Chapter" in item:
            ch = item["Chapter"]
            yield ch
            yield from chapters(ch.get("sub_items", []))


def run(context, book):
    config = context["config"]
    base = config.get("output", {}).get("html", {}).get("git-repository-url", "").rstrip("/")
    if not base:
        raise SystemExit("repo-links: book.toml sets no output.html.git-repository-url")
    branch = config.get("preprocessor", {}).get("repo-links", {}).get("branch", "main")
    book_dir = context["root"]
    src = config.get("book", {}).get("src", "src")
    src_dir = os.path.normpath(os.path.join(book_dir, src))
    repo_root = os.path.normpath(os.path.join(book_dir, ".."))
    while repo_root != "/" and not os.path.exists(os.path.join(repo_root, ".git")):
        repo_root = os.path.dirname(repo_root)
    book_root = os.path.relpath(src_dir, repo_root).replace(os.sep, "/")
    errors = []
    items = book.get("items", book.get("sections", []))
    for ch in chapters(items):
        source = ch.get("source_path") or ch.get("path")
        if not source:
            continue
        page_dir = posixpath.dirname(source.replace(os.sep, "/"))
        ch["content"] = protect_katex_tildes(rewrite_page(
            ch["content"], page_dir, repo_root, book_root, base, branch, errors, source
        ))
    if errors:
        raise SystemExit("repo-links: links into the repository that resolve to nothing:\n"
                         + "\n".join(errors))
    return book


def self_test():
    import tempfile

    with tempfile.TemporaryDirectory() as repo:
        os.makedirs(os.path.join(repo, ".git"))
        os.makedirs(os.path.join(repo, "src", "ch06"))
        os.makedirs(os.path.join(repo, "chapters", "img"))
        open(os.path.join(repo, "src", "ch06", "mod.rs"), "w").close()
        open(os.path.join(repo, "README.md"), "w").close()
        page = (
            "See [`src/ch06/mod.rs`](../src/ch06/mod.rs#L3), [the folder](../src/ch06/) and\n"
            "[README](../README.md#two-commands), [next](ch07.md), [web](https://x.org/a),\n"
            "![plot](img/a.png), [top](#top)\n```\n[kept](../src/ch06/mod.rs)\n```\n"
            "and `[kept too](../README.md)`.\n"
            "a span `cargo x\n--y` ([`a`](../README.md)) and [`b`, `c`](../README.md)"
        )
        errors = []
        got = rewrite_page(page, "", repo, "chapters", "https://g/r", "main", errors, "p.md")
        want = (
            "See [`src/ch06/mod.rs`](https://g/r/blob/main/src/ch06/mod.rs#L3), "
            "[the folder](https://g/r/tree/main/src/ch06) and\n"
            "[README](https://g/r/blob/main/README.md#two-commands), [next](ch07.md), "
            "[web](https://x.org/a),\n"
            "![plot](img/a.png), [top](#top)\n```\n[kept](../src/ch06/mod.rs)\n```\n"
            "and `[kept too](../README.md)`.\n"
            "a span `cargo x\n--y` ([`a`](https://g/r/blob/main/README.md)) and "
            "[`b`, `c`](https://g/r/blob/main/README.md)"
        )
        assert errors == [], errors
        assert got == want, got
        # Planted: a link to a file the repository lacks is an error naming the page and line.
        errors = []
        rewrite_page("x\n[gone](../src/nope.rs) [`n`](../nope/)", "", repo, "chapters", "https://g/r", "main",
                     errors, "p.md")
        assert errors == [
            "p.md:2: ../src/nope.rs names src/nope.rs, which does not exist",
            "p.md:2: ../nope/ names nope, which does not exist",
        ], errors
        # KaTeX's typeset tildes are protected from Markdown; prose and code keep theirs.
        typeset = '<mo>~</mo> and <span class="x">~</span>, ~2 s and `>~<`'
        assert protect_katex_tildes(typeset) == (
            '<mo>&#126;</mo> and <span class="x">&#126;</span>, ~2 s and `>~<`'
        ), protect_katex_tildes(typeset)
    print("repo_links.py: self-test passed")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "supports":
        sys.exit(0)  # Markdown links mean the same to every renderer.
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        self_test()
        return
    context, book = json.load(sys.stdin)
    json.dump(run(context, book), sys.stdout)


if __name__ == "__main__":
    main()
