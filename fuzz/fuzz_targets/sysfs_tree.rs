//! cargo-fuzz target `sysfs_tree`: the property lives in `topolet_fuzz::sysfs_tree` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz::sysfs_tree(data));
