//! `docs/src/reference/metrics.md`: every metric family of the catalogue.

use crate::reference::{cell, GENERATED};
use crate::telemetry::family::CATALOGUE;

/// The page.
pub(super) fn render() -> String {
    let mut out = format!(
        "# Metrics\n\n{GENERATED}\n\n\
         Every family `topolet run` serves on `/metrics` (`[metrics]`, Prometheus text format \
         0.0.4; see [Observability](../observability.md)), as the metrics catalogue \
         (`plugin/src/telemetry/family.rs`) declares it: the exposition's `# HELP` and `# TYPE` \
         lines are written from the same table. A family whose label values have not been seen yet is exposed with no \
         samples. Histograms also carry the `le` label of their buckets.\n\n\
         | family | type | labels | help |\n|---|---|---|---|\n"
    );
    let mut families: Vec<_> = CATALOGUE.iter().collect();
    families.sort_by_key(|f| f.name);
    for f in families {
        let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            f.name,
            f.kind.as_str(),
            if labels.is_empty() {
                "–".to_string()
            } else {
                labels.join(", ")
            },
            cell(f.help)
        ));
    }
    out
}
