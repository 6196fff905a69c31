//! Log files (topolet's, containerd's): read, find lines by substring, wait for a line, read
//! `key=value` fields.

use std::path::Path;
use std::time::Duration;

use crate::wait;

/// Waits until a complete line after byte `after` of the file at `path` contains `pattern`;
/// returns it. On timeout the error shows the file's last lines.
pub fn wait_for_line(
    path: &Path,
    pattern: &str,
    after: usize,
    timeout: Duration,
) -> anyhow::Result<String> {
    let r = wait::until(
        &format!("{pattern:?} in {}", path.display()),
        timeout,
        || Ok(find_line(&read_lossy(path), after, pattern)),
    );
    r.map_err(|e| {
        e.context(format!(
            "last lines of {}:\n{}",
            path.display(),
            tail(&read_lossy(path), 30)
        ))
    })
}

/// Current length of the file (0 if missing): a mark for "only lines written after now".
pub fn mark(path: &Path) -> usize {
    read_lossy(path).len()
}

/// The file as text (lossy UTF-8; empty if missing).
pub fn read_lossy(p: &Path) -> String {
    std::fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Every line after byte `after` of `text` containing `pattern`.
pub fn lines_matching(text: &str, after: usize, pattern: &str) -> Vec<String> {
    let start = after.min(text.len());
    let slice = text.get(start..).unwrap_or(text);
    slice
        .lines()
        .map(strip_ansi)
        .filter(|l| l.contains(pattern))
        .collect()
}

/// The first complete line after byte `after` of `text` containing `pattern`.
pub fn find_line(text: &str, after: usize, pattern: &str) -> Option<String> {
    let start = after.min(text.len());
    let slice = text.get(start..).unwrap_or(text);
    // Only complete lines: the writer may be mid-line.
    let complete = match slice.rfind('\n') {
        Some(i) => &slice[..i],
        None => return None,
    };
    complete
        .lines()
        .map(strip_ansi)
        .find(|l| l.contains(pattern))
}

/// The value of `key=value` in a log line (value up to the next space; surrounding quotes
/// removed).
pub fn field(line: &str, key: &str) -> Option<String> {
    let needle = format!("{key}=");
    let mut search = line;
    loop {
        let i = search.find(&needle)?;
        let before_ok = i == 0 || search.as_bytes()[i - 1] == b' ';
        let rest = &search[i + needle.len()..];
        if before_ok {
            let v = if let Some(q) = rest.strip_prefix('"') {
                q.split('"').next().unwrap_or("")
            } else {
                rest.split(' ').next().unwrap_or("")
            };
            return Some(v.to_string());
        }
        search = rest;
    }
}

/// Removes ANSI escape sequences.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
