//! The pure core: values in, decisions out. No I/O, no clock, no globals, no async.
pub mod cpuset;
pub mod topology;
pub mod hints;
