#!/usr/bin/env python3
"""Scan a built mdBook (default: target/book) for what the reader would find broken.

Fails (exit status 1, one line per fault) on:
- Markdown's markup (`<del>`, `<em>`, …) inside a typeset formula: Markdown cut it apart;
- an element of class `katex-error` (mdbook-katex leaves one, with the raw TeX, for a formula
  KaTeX cannot parse: it only warns during the build);
- TeX left as text: a `$…$` or `$$` outside code, or any `$` at all (the pages write no bare
  dollar sign; a formula mdbook-katex skipped shows up here);
- a link to a page or file inside the book that does not exist, or to an anchor the page lacks;
- an image, stylesheet, script or font (`url(…)` in the book's CSS) that is missing;
- a book with no typeset math at all (mdbook-katex did not run);
- in the Markdown pages (default: the folder above this script, `chapters/`), a `$…$` holding two
  numbers that only spaces separate (inside TeX a space separates nothing: `(0 0 1 1)` typesets
  as `(0011)`; write a `pmatrix` or commas), or a number written `1e-6` (typeset as an italic
  "1e − 6"; write `10^{-6}`).

Python's standard library only. `scan_book.py --self-test` plants each fault in a small book and
checks that each is reported.
"""

import html.parser
import os
import re
import sys
import urllib.parse

SKIP_TEXT = {"code", "pre", "script", "style", "kbd", "samp", "svg", "math"}
# What Markdown makes and KaTeX never does: one inside a formula means Markdown cut it apart.
MARKDOWN_TAGS = {"del", "em", "strong", "a", "code", "p", "img"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []  # (tag, skips_text)
        self.ids = set()
        self.refs = []  # (kind, url, line)
        self.katex = 0
        self.katex_errors = []  # (line, text)
        self.mangled = []  # (line, tag): Markdown's markup inside a typeset formula
        self.text = []  # (line, visible text)
        self.base = None
        self.in_error = None

    def skipping(self):
        return any(skip for _, skip in self.stack)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        line = self.getpos()[0]
        classes = (a.get("class") or "").split()
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if tag == "base" and a.get("href"):
            self.base = a["href"]
        if tag == "a" and a.get("href"):
            self.refs.append(("link", a["href"], line))
        if tag == "img" and a.get("src") is not None:
            self.refs.append(("image", a["src"], line))
        if tag == "link" and a.get("href") and "stylesheet" in (a.get("rel") or ""):
            self.refs.append(("stylesheet", a["href"], line))
        if tag == "script" and a.get("src"):
            self.refs.append(("script", a["src"], line))
        if "katex" in classes or "katex-display" in classes:
            self.katex += 1
        if "katex-error" in classes:
            self.katex_errors.append([line, a.get("title", "")])
        in_formula = any(t == "katex" for t, _ in self.stack)
        if in_formula and tag in MARKDOWN_TAGS:
            self.mangled.append((line, tag))
        skip = tag in SKIP_TEXT or bool({"katex", "katex-display", "katex-error"} & set(classes))
        if tag not in VOID:
            self.stack.append(("katex" if "katex" in classes else tag, skip))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID and self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag or (self.stack[i][0] == "katex" and tag == "span"):
                del self.stack[i:]
                break

    def handle_data(self, data):
        if not self.skipping():
            self.text.append((self.getpos()[0], data))


def parse(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    page.close()
    return page


def local_target(book, page_rel, base, url):
    """(path inside the book, fragment) for a URL inside the book, or None for another site."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme or parts.netloc or url.startswith(("mailto:", "javascript:")):
        return None
    path = urllib.parse.unquote(parts.path)
    if not path:
        return (page_rel, parts.fragment)
    if path.startswith("/"):
        rel = path.lstrip("/")
    else:
        start = os.path.dirname(page_rel)
        if base is not None:
            start = base.lstrip("/") if base.startswith("/") else os.path.join(start, base)
        rel = os.path.join(start, path)
    rel = os.path.normpath(rel)
    if rel.startswith(".."):
        return (rel, parts.fragment)  # outside the book: reported as missing
    if os.path.isdir(os.path.join(book, rel)):
        rel = os.path.join(rel, "index.html")
    return (rel, parts.fragment)


DOLLARS = re.compile(r"\$\$|\$[^$\n]{1,200}?\$")
# In the Markdown: code (fenced or inline) is no math; math is `$$…$$` or `$…$` on one line.
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.S)
# Two numbers with nothing but spaces between them (a minus sign may open the second).
RUN_TOGETHER = re.compile(r"(?<![\w.\\])\d+(?:\.\d*)?[ \t\n]+[-−]?\d")
# A number in a program's scientific notation: 1e-6, 2.0e-8, 3E5.
E_NOTATION = re.compile(r"(?<![\w.\\])\d+(?:\.\d+)?[eE][-+−]?\d+(?!\w)")


def markdown_faults(src):
    """Faults of the typeset math in the Markdown pages of `src` (see the module's list)."""
    faults = []
    for name in sorted(os.listdir(src)):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(src, name), encoding="utf-8") as f:
            text = f.read()
        # Code is blanked, not removed, so that offsets still give the right line.
        blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))
        text = INLINE_CODE.sub(blank, FENCE.sub(blank, text))
        for m in MATH.finditer(text):
            tex = m.group(1) if m.group(1) is not None else m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            if RUN_TOGETHER.search(tex):
                faults.append(f"{name}:{line}: numbers run together in ${tex.strip()[:100]}$")
            if E_NOTATION.search(tex):
                faults.append(f"{name}:{line}: an exponent written 1e-6 in ${tex.strip()[:100]}$")
    return faults
CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]+)['\"]?\s*\)")


def scan(book, src=None):
    faults = markdown_faults(src) if src is not None else []
    pages = {}
    for dirpath, _, files in os.walk(book):
        for name in files:
            if name.endswith(".html"):
                rel = os.path.relpath(os.path.join(dirpath, name), book)
                pages[rel] = parse(os.path.join(book, rel))
    stats = {"pages": len(pages), "links": 0, "images": 0, "katex": 0, "fonts": 0}
    for rel, page in sorted(pages.items()):
        stats["katex"] += page.katex
        for line, tex in page.katex_errors:
            faults.append(f"{rel}:{line}: katex-error: {tex[:120]}")
        for line, tag in page.mangled:
            faults.append(f"{rel}:{line}: Markdown <{tag}> inside a formula")
        for line, data in page.text:
            for m in DOLLARS.finditer(data):
                faults.append(f"{rel}:{line}: TeX left as text: {m.group(0)[:120]}")
            if not DOLLARS.search(data) and "$" in data:
                faults.append(f"{rel}:{line}: a bare $ in the text: {data.strip()[:120]}")
        for kind, url, line in page.refs:
            target = local_target(book, rel, page.base, url)
            if target is None:
                continue
            path, fragment = target
            stats["images" if kind == "image" else "links"] += 1
            if not os.path.isfile(os.path.join(book, path)):
                faults.append(f"{rel}:{line}: {kind} {url}: no {path} in the book")
            elif fragment and path.endswith(".html"):
                other = pages.get(path)
                if other is not None and fragment not in other.ids:
                    faults.append(f"{rel}:{line}: {kind} {url}: {path} has no #{fragment}")
    for dirpath, _, files in os.walk(book):
        for name in files:
            if not name.endswith(".css"):
                continue
            css = os.path.join(dirpath, name)
            with open(css, encoding="utf-8") as f:
                for m in CSS_URL.finditer(f.read()):
                    url = m.group(1)
                    if url.startswith(("data:", "http:", "https:", "#")):
                        continue
                    stats["fonts"] += 1
                    target = os.path.normpath(os.path.join(dirpath, url.split("?")[0]))
                    if not os.path.isfile(target):
                        faults.append(f"{os.path.relpath(css, book)}: url({url}) is missing")
    if stats["katex"] == 0:
        faults.append("no typeset math anywhere: did mdbook-katex run?")
    return list(dict.fromkeys(faults)), stats


def self_test():
    import tempfile

    with tempfile.TemporaryDirectory() as book:
        os.makedirs(os.path.join(book, "img"))
        open(os.path.join(book, "img", "ok.png"), "wb").close()
        with open(os.path.join(book, "a.html"), "w") as f:
            f.write(
                '<html><body><h2 id="top">t</h2><span class="katex">x</span>\n'
                '<span class="katex-error" title="ParseError: bad">\\frac{</span>\n'
                "<p>raw $x^2$ here</p><p>price $5</p><code>$ok$</code>\n"
                '<a href="b.html">gone</a> <a href="a.html#top">ok</a> <a href="#nope">x</a>\n'
                '<img src="img/ok.png"><img src="img/missing.png">\n'
                '<a href="https://example.org/">web</a><a href="../outside.rs">out</a>\n'
                '<span class="katex"><span>a<del><span>~</span></span></del></span>\n'
                "</body></html>\n"
            )
        with open(os.path.join(book, "k.css"), "w") as f:
            f.write("@font-face{src:url(fonts/K.woff2) format('woff2')}")
        src = os.path.join(book, "src")
        os.makedirs(src)
        with open(os.path.join(src, "p.md"), "w") as f:
            f.write(
                "Fine: $\\begin{pmatrix}0 & 1 \\\\ 1 & 0\\end{pmatrix}$, $10^{-6}$, $3 - 1 = 2$,\n"
                "$(1.5, 1.1)$, $x_{1} 2$, $1.5\\ 2.5$, `$1 2$` and $e^{-x}$.\n"
                "| $W_V = (0 0 1 1; 1 1 0 0)$ | $Q = (1.5 1.1 -2.6)$ |\n"
                "```text\n$1 2$ and 1e-6\n```\n"
                "$\\epsilon = 1e-6$ and $\\sin(1) = 2.0e-8$\n"
            )
        faults, _ = scan(book, src)
        expected = [
            "p.md:3: numbers run together in $W_V = (0 0 1 1; 1 1 0 0)$",
            "p.md:3: numbers run together in $Q = (1.5 1.1 -2.6)$",
            "p.md:7: an exponent written 1e-6 in $\\epsilon = 1e-6$",
            "p.md:7: an exponent written 1e-6 in $\\sin(1) = 2.0e-8$",
            "a.html:2: katex-error",
            "a.html:3: TeX left as text: $x^2$",
            "a.html:3: a bare $",
            "a.html:4: link b.html: no b.html",
            "a.html:4: link #nope: a.html has no #nope",
            "a.html:5: image img/missing.png: no img/missing.png",
            "a.html:6: link ../outside.rs",
            "a.html:7: Markdown <del> inside a formula",
            "k.css: url(fonts/K.woff2) is missing",
        ]
        for want in expected:
            assert any(f.startswith(want) for f in faults), (want, faults)
        assert len(faults) == len(expected), faults
    print("scan_book.py: self-test passed (every planted fault reported)")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    book = sys.argv[1] if len(sys.argv) > 1 else "target/book"
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(here)
    if not os.path.isfile(os.path.join(book, "index.html")):
        sys.exit(f"scan_book.py: {book} holds no built book (run `mdbook build chapters`)")
    faults, stats = scan(book, src)
    for fault in faults:
        print(fault)
    print(
        f"scan_book.py: {stats['pages']} pages, {stats['katex']} typeset formulas, "
        f"{stats['links']} internal links, {stats['images']} images, "
        f"{stats['fonts']} CSS urls checked: {len(faults)} faults"
    )
    sys.exit(1 if faults else 0)


if __name__ == "__main__":
    main()
