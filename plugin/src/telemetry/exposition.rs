//! The Prometheus text exposition format 0.0.4, written: family headers, samples with escaped
//! label values, and the format's float spelling. Knows nothing of topolet's metrics
//! (`crate::telemetry::metrics` owns those); the strict reader tests check the output with is
//! `topolet_testkit::metrics_text`.

use std::fmt::Write as _;

/// Prometheus' float formatting: integers without a fraction, `+Inf`/`-Inf`/`NaN` spelled out.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
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
/// requires.
#[derive(Default)]
pub struct Writer {
    out: String,
}

impl Writer {
    /// The text written so far.
    pub fn finish(self) -> String {
        self.out
    }

    /// The family's `# HELP` and `# TYPE` lines.
    pub fn header(&mut self, family: &Family) {
        let help = family.help.replace('\\', "\\\\").replace('\n', "\\n");
        let (name, kind) = (family.name, family.kind.as_str());
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, String)], value: f64) {
        self.sample_slice(name, labels, value)
    }

    pub fn sample_slice(&mut self, name: &str, labels: &[(&str, String)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_float(value));
    }

    /// A family of one sample without labels (a gauge or a counter).
    pub fn single(&mut self, family: &Family, value: f64) {
        self.header(family);
        self.sample_slice(family.name, &[], value);
    }
}
