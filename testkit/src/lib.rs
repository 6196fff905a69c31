//! What topolet's tests share across crates (plugin tests, fuzz, integration).
//!
//! - [`sysfs`]: the machine trees tests discover topologies from — the synthetic ones generated
//!   at build time by `hack/gen-sysfs-fixtures.py`, the captured ones committed under
//!   `plugin/tests/fixtures/sysfs`.

pub mod sysfs;
