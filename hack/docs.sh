#!/usr/bin/env bash
# hack/docs.sh — the manual (docs/, mdBook layout): its links checked, and the site built when
# mdBook is installed.
#
# Usage: hack/docs.sh [links|install|build]     (default: links, then build if mdbook is installed)
#
#   links  checks every relative link of README.md and docs/src/**/*.md: the file exists and, for
#          `file.md#anchor` or `#anchor`, the file has a heading with that anchor (GitHub's and
#          mdBook's spelling: lowercase, punctuation dropped, spaces as hyphens); every page of
#          docs/src is listed in docs/src/SUMMARY.md. Links inside code are not links. Python 3,
#          no network, well under a second (hack/test.sh runs it).
#   install  installs mdBook $MDBOOK_VERSION into $TOPOLET_CACHE/mdbook-<version> (outside the
#          clone, so a fresh CI clone reuses it; `cargo install --locked --debug`, used only if its
#          --version names that version) and links it as .deps/cargo/bin/mdbook, the way
#          hack/deny.sh installs cargo-deny. hack/test.sh runs it in the background.
#   build  `mdbook build docs` into target/book, with the installed mdBook (else one on PATH):
#          fails on a page SUMMARY.md names that does not exist (create-missing = false) or a page
#          mdBook cannot render. hack/test.sh runs it; the reference pages are checked by the unit
#          tests, the links above.
#
# Environment:
#   MDBOOK_VERSION  mdBook to install (default 0.5.4)
#   TOPOLET_CACHE   the cache directory (hack/lib/common.sh)
#
# The reference pages (docs/src/reference/) are generated from the code: a unit test fails when
# they differ; `TOPOLET_BLESS=1 cargo test -p topolet reference` rewrites them.
set -euo pipefail
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

links() {
    python3 - "$REPO_ROOT" <<'PY'
import os, re, sys

root = sys.argv[1]
docs = os.path.join(root, "docs", "src")
pages = [os.path.join(root, "README.md")]
for d, _, names in os.walk(docs):
    pages += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]

LINK = re.compile(r"\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text):
    """The text without fenced blocks and inline code."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line))
    return out


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"`", "", s)
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


anchors = {}


def anchors_of(path):
    if path not in anchors:
        found = set()
        for line in prose(open(path, encoding="utf-8").read()):
            m = re.match(r"^#{1,6} (.*)", line)
            if m:
                base, n = slug(m.group(1)), 0
                while (base if n == 0 else f"{base}-{n}") in found:
                    n += 1
                found.add(base if n == 0 else f"{base}-{n}")
        anchors[path] = found
    return anchors[path]


bad = []
for page in pages:
    rel_page = os.path.relpath(page, root)
    for no, line in enumerate(prose(open(page, encoding="utf-8").read()), 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(dest):
                bad.append(f"{rel_page}:{no}: {target}: no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                bad.append(f"{rel_page}:{no}: {target}: no heading with that anchor")

summary = open(os.path.join(docs, "SUMMARY.md"), encoding="utf-8").read()
listed = {os.path.normpath(os.path.join(docs, t)) for t in re.findall(r"\]\(([^)#]+)\)", summary)}
for page in pages[1:]:
    if not page.endswith("SUMMARY.md") and page not in listed:
        bad.append(f"{os.path.relpath(page, root)}: not in docs/src/SUMMARY.md")

for b in bad:
    print(b, file=sys.stderr)
print(f"docs: {len(pages)} pages, {'%d broken' % len(bad) if bad else 'every link resolves'}")
sys.exit(1 if bad else 0)
PY
}

MDBOOK_VERSION="${MDBOOK_VERSION:-0.5.4}"
MDBOOK_ROOT="$TOPOLET_CACHE/mdbook-$MDBOOK_VERSION"
MDBOOK="$DEPS/cargo/bin/mdbook"

install_mdbook() {
    cargo_tool_install mdbook "$MDBOOK_VERSION" "$MDBOOK_ROOT" "mdbook v$MDBOOK_VERSION" "$MDBOOK"
}

mdbook_bin() {
    if [[ -x "$MDBOOK" ]]; then echo "$MDBOOK"; else command -v mdbook; fi
}

build() {
    local bin
    bin="$(mdbook_bin)" || die "mdbook is not installed (hack/docs.sh install)"
    "$bin" build "$REPO_ROOT/docs"
    say "site: $REPO_ROOT/target/book/index.html"
}

case "${1:-all}" in
    links) links ;;
    install) install_mdbook ;;
    build) build ;;
    all)
        links
        if mdbook_bin >/dev/null; then build; else say "mdbook not installed: links checked, site not built"; fi
        ;;
    *) die "usage: hack/docs.sh [links|install|build]" ;;
esac
