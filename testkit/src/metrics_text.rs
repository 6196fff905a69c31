//! A strict reader of the Prometheus text exposition format 0.0.4, for tests that scrape
//! topolet's `/metrics` (its unit tests and the end-to-end suites): every line must be a
//! `# HELP`/`# TYPE` header or a sample of a declared family, names and label values well formed.

use std::collections::{BTreeMap, BTreeSet};

/// One parsed sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    let ok_first = |c: char| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':');
    match chars.next() {
        Some(c) if ok_first(c) => {}
        _ => return false,
    }
    chars.all(|c| ok_first(c) || c.is_ascii_digit())
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse::<f64>().map_err(|e| format!("value {s:?}: {e}")),
    }
}

/// A strict parser of the text format 0.0.4, as Prometheus' own lexer reads it: every line is
/// a `# HELP`, a `# TYPE`, another comment, blank, or a sample; TYPE comes before the samples
/// of its family and at most once; label values are quoted with `\\`, `\"`, `\n` escapes;
/// histogram families have `_bucket` (with `le`), `_sum` and `_count` samples only.
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helped: BTreeSet<String> = BTreeSet::new();
    let mut samples = Vec::new();
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("text must end with a newline".into());
    }
    for (n, line) in text.lines().enumerate() {
        let err = |m: String| format!("line {}: {m}: {line:?}", n + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("HELP"), Some(name), _) => {
                    if !is_name(name, true) {
                        return Err(err("bad metric name".into()));
                    }
                    if !helped.insert(name.to_string()) {
                        return Err(err("second HELP".into()));
                    }
                }
                (Some("TYPE"), Some(name), Some(kind)) => {
                    if !is_name(name, true) {
                        return Err(err("bad metric name".into()));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(err(format!("unknown type {kind}")));
                    }
                    if samples
                        .iter()
                        .any(|s: &Sample| family_of(&s.name, &types) == name)
                    {
                        return Err(err("TYPE after samples".into()));
                    }
                    if types.insert(name.to_string(), kind.to_string()).is_some() {
                        return Err(err("second TYPE".into()));
                    }
                }
                _ => {}
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => return Err(err("no value".into())),
        };
        if !is_name(name, true) {
            return Err(err("bad metric name".into()));
        }
        let mut labels = BTreeMap::new();
        let rest = if let Some(mut r) = rest.strip_prefix('{') {
            loop {
                if let Some(after) = r.strip_prefix('}') {
                    r = after;
                    break;
                }
                let eq = r.find('=').ok_or_else(|| err("label without =".into()))?;
                let lname = &r[..eq];
                if !is_name(lname, false) {
                    return Err(err(format!("bad label name {lname:?}")));
                }
                r = r[eq + 1..]
                    .strip_prefix('"')
                    .ok_or_else(|| err("unquoted label value".into()))?;
                let mut value = String::new();
                let mut chars = r.char_indices();
                let end = loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, '\\')) => value.push('\\'),
                            Some((_, '"')) => value.push('"'),
                            Some((_, 'n')) => value.push('\n'),
                            _ => return Err(err("bad escape".into())),
                        },
                        Some((i, '"')) => break i,
                        Some((_, c)) => value.push(c),
                        None => return Err(err("unterminated label value".into())),
                    }
                };
                if labels.insert(lname.to_string(), value).is_some() {
                    return Err(err(format!("duplicate label {lname}")));
                }
                r = &r[end + 1..];
                if let Some(after) = r.strip_prefix(',') {
                    r = after;
                } else if !r.starts_with('}') {
                    return Err(err("expected , or }".into()));
                }
            }
            r
        } else {
            rest
        };
        let rest = rest
            .strip_prefix(' ')
            .ok_or_else(|| err("no space before value".into()))?;
        let mut fields = rest.split(' ');
        let value = parse_value(fields.next().unwrap_or("")).map_err(err)?;
        if let Some(ts) = fields.next() {
            ts.parse::<i64>().map_err(|_| err("bad timestamp".into()))?;
        }
        if fields.next().is_some() {
            return Err(err("trailing fields".into()));
        }
        let family = family_of(name, &types);
        if types.get(&family).map(String::as_str) == Some("histogram") {
            if name.ends_with("_bucket") && !labels.contains_key("le") {
                return Err(err("bucket without le".into()));
            }
            if name == family {
                return Err(err("bare sample in a histogram family".into()));
            }
        }
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(samples)
}

fn family_of(name: &str, types: &BTreeMap<String, String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if types.get(base).map(String::as_str) == Some("histogram") {
                return base.to_string();
            }
        }
    }
    name.to_string()
}

/// The value of the sample `name` whose labels include `labels`.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}
