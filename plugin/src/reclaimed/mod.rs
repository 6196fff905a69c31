//! Reclaimed CPU, the shell's half: the suppress loop ([`suppress_loop`]), the readings it
//! takes ([`sampler`]) and what it drives of the NRI handlers ([`batch_control`]).

pub mod batch_control;
pub mod sampler;
pub mod suppress_loop;

pub use suppress_loop::{
    ReclaimedLoop, LOST_AFTER, NOT_BATCH_REASON, NO_API, STARVED_REASON, SUPPRESSED_REASON,
    WAITING_SYNC,
};
