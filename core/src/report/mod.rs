//! What the node reports about itself, derived from the machine and a placement snapshot: the
//! [`status`] report (`topolet status`, the admin socket) and the [`nrt`] NodeResourceTopology
//! content the scheduler plugin reads.
pub mod device_inventory;
pub mod nrt;
pub mod status;
