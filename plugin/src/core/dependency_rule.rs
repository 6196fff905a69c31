//! The core's one dependency rule, checked: nothing under `plugin/src/core` names the
//! configuration file's module (`crate::config`) or the shell (`crate::shell`). The core owns its
//! settings types; `config` maps the file into them and the shell does the I/O.
//!
//! A test, not a build step: it reads the core's sources and fails naming every `file:line` that
//! breaks the rule (comments are not code and are skipped).

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The module paths the core must not name.
    const FORBIDDEN: [&str; 2] = ["config", "shell"];

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }

    /// The forbidden module `line` names, if any: `crate::config…`, `super::super::shell…`, or
    /// either inside a `use crate::{…}` group.
    pub(super) fn names_forbidden(line: &str) -> Option<&'static str> {
        let code = line.trim_start();
        if code.starts_with("//") {
            return None;
        }
        let code = code.split("//").next().unwrap_or(code);
        let squeezed: String = code.chars().filter(|c| !c.is_whitespace()).collect();
        FORBIDDEN.into_iter().find(|m| {
            let word_at = |prefix: &str| {
                squeezed.match_indices(prefix).any(|(i, _)| {
                    let rest = &squeezed[i + prefix.len()..];
                    rest.strip_prefix(m).is_some_and(|after| {
                        !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
                    })
                })
            };
            word_at("crate::")
                || word_at("super::super::")
                || word_at("crate::{")
                || (squeezed.contains("crate::{") && word_at(","))
        })
    }

    #[test]
    fn core_names_neither_config_nor_shell() {
        let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
        let mut files = Vec::new();
        rust_files(&core, &mut files);
        files.sort();
        assert!(
            files.len() > 10,
            "found only {files:?} under {}",
            core.display()
        );
        let mut broken = Vec::new();
        // This file spells the forbidden imports in its own test strings.
        let this = core.join("dependency_rule.rs");
        for file in files.iter().filter(|f| **f != this) {
            let text =
                std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for (n, line) in text.lines().enumerate() {
                if let Some(m) = names_forbidden(line) {
                    broken.push(format!(
                        "{}:{}: the core names crate::{m}: {}",
                        file.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
        assert!(broken.is_empty(), "\n{}", broken.join("\n"));
    }

    /// The check itself can fail: every spelling of a forbidden import is caught.
    #[test]
    fn every_spelling_is_caught_and_comments_are_not() {
        for bad in [
            "use crate::config::Config;",
            "use crate::config;",
            "    let c = crate::config::Config::default();",
            "use crate::shell::nri_view::ContainerView;",
            "use crate::{config, core};",
            "use crate::{core::pod::Pod, shell::sysfs};",
            "use super::super::config::Config;",
        ] {
            assert!(names_forbidden(bad).is_some(), "{bad}");
        }
        for fine in [
            "//! `crate::config` maps the file into these",
            "/// see crate::shell::status_table",
            "use super::config_key::Key;",
            "use crate::core::configured::X;",
            "let shell_count = 1; // crate::shell",
        ] {
            assert_eq!(names_forbidden(fine), None, "{fine}");
        }
    }
}
