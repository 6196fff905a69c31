//! The container runtime, over NRI: the [`handlers`] (the `Plugin` the stub calls and the state
//! it guards), what NRI shows of a container ([`view`]), the messages sent back ([`adjust`]),
//! one [`records`] entry per managed container, the [`outbox`] of updates still to deliver,
//! when the background work is next due ([`schedule`]) and the oom_score_adj floor the runtime
//! can apply ([`oom_floor`]).
pub mod adjust;
pub mod handlers;
pub mod oom_floor;
pub mod outbox;
pub mod records;
pub mod schedule;
pub mod view;
