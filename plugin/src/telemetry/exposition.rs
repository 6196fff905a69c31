//! The Prometheus text exposition format 0.0.4, written: family headers, samples with escaped
//! label values, and the format's float spelling. Knows nothing of topolet's metrics
//! (`crate::telemetry::metrics` owns those); the strict reader tests check the output with is
//! `topolet_testkit::metrics_text`.

use std::fmt::Write as _;

/// Prometheus' float formatting: integers without a fraction, `+Inf`/`-Inf`/`NaN` spelled out.
pub fn format_float(v: f64) -> String {
    let mut s = String::new();
    write_float(&mut s, v);
    s
}

/// [`format_float`] written into `out`, with no allocation of its own.
pub fn write_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{v}");
    }
}

/// `text` with `\\` and newlines escaped (and `"` too when `quote`: a label value), as the format
/// requires, written into `out` a run of plain characters at a time.
fn write_escaped(out: &mut String, text: &str, quote: bool) {
    let mut plain = 0;
    for (i, c) in text.char_indices() {
        let escaped = match c {
            '\\' => "\\\\",
            '\n' => "\\n",
            '"' if quote => "\\\"",
            _ => continue,
        };
        out.push_str(&text[plain..i]);
        out.push_str(escaped);
        plain = i + c.len_utf8();
    }
    out.push_str(&text[plain..]);
}

/// A metric family's type, as its `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// The name the `# TYPE` line uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family as the exposition declares it: name, type, the names of its labels (a
/// histogram's `le` aside) and help text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

/// Writes one exposition: `# HELP`/`# TYPE` lines and samples, labels escaped as the format
/// requires, into one buffer with no allocation per sample.
#[derive(Default)]
pub struct Writer {
    out: String,
}

impl Writer {
    /// A writer whose buffer starts with room for `bytes` (the last exposition's size: the
    /// buffer then grows rarely, if at all).
    pub fn with_capacity(bytes: usize) -> Writer {
        Writer {
            out: String::with_capacity(bytes),
        }
    }

    /// The text written so far.
    pub fn finish(self) -> String {
        self.out
    }

    /// The family's `# HELP` and `# TYPE` lines.
    pub fn header(&mut self, family: &Family) {
        let (name, kind) = (family.name, family.kind.as_str());
        let _ = write!(self.out, "# HELP {name} ");
        write_escaped(&mut self.out, family.help, false);
        let _ = writeln!(self.out, "\n# TYPE {name} {kind}");
    }

    /// One sample: `name`, its labels (values escaped) and value.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.sample_of(name, "", labels, value)
    }

    /// One sample of a series whose name is `name` + `suffix` (a histogram's `_bucket`, `_sum`,
    /// `_count`), written without putting the two together first.
    pub fn sample_of(&mut self, name: &str, suffix: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        self.out.push_str(suffix);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                write_escaped(&mut self.out, v, true);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        write_float(&mut self.out, value);
        self.out.push('\n');
    }

    /// A family of one sample without labels (a gauge or a counter).
    pub fn single(&mut self, family: &Family, value: f64) {
        self.header(family);
        self.sample(family.name, &[], value);
    }
}
