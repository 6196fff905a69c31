//! cargo-fuzz target `sysfs_tree`: the property lives in `topolet_fuzz_props::sysfs_tree` (testkit/fuzz-props/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz_props::sysfs_tree(data));
