//! What every generated page shares: the note under its title, table cells, and the comparison
//! with the committed file (the binary's CLI page uses it too, through `#[path]`).

use std::path::PathBuf;

/// The first line under a generated page's title.
pub(crate) const GENERATED: &str =
    "<!-- Generated from the code by `cargo test -p topolet reference`; \
do not edit: `TOPOLET_BLESS=1 cargo test -p topolet reference` rewrites this file. -->";

/// Compares `text` with the committed `docs/src/reference/<name>`, or rewrites it under
/// `TOPOLET_BLESS=1`.
pub(crate) fn check_or_bless(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/src/reference")
        .join(name);
    if std::env::var_os("TOPOLET_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != text {
        let line = committed
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(text.lines().count()));
        panic!(
            "{} is not what the code generates (first difference at line {}): run \
             `TOPOLET_BLESS=1 cargo test -p topolet reference` and commit the result",
            path.display(),
            line + 1
        );
    }
}

/// A table cell of prose: no line breaks, `|` escaped, and outside code spans `<`, `>` and `*`
/// too (`/proc/<pid>`, `imagefs.*` stay text, not HTML or emphasis).
pub(crate) fn cell(text: &str) -> String {
    let text = text.replace('|', "\\|").replace('\n', " ");
    let mut out = String::with_capacity(text.len());
    for (i, part) in text.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        if i % 2 == 1 {
            out.push_str(part);
        } else {
            out.push_str(
                &part
                    .replace('<', "&lt;")
                    .replace('>', "&gt;")
                    .replace('*', "\\*"),
            );
        }
    }
    out
}
