//! NRI event subscription: the [`EventMask`] a plugin declares and its fitting to
//! the runtime's NRI version: bit `1 << (event - 1)` of `ConfigureResponse.events`
//! (containerd/nri `pkg/api/event.go`), and no bit of an event the runtime's NRI version does not
//! know (a runtime on NRI v0.9 or older fails Configure for them).

use std::fmt;

use crate::api::Event;
use crate::version::NriVersion;

/// A set of NRI events; bit for event `e` is `1 << (e - 1)` as in `ConfigureResponse.events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventMask(u32);

impl EventMask {
    /// No events.
    pub const EMPTY: EventMask = EventMask(0);
    /// Events valid for NRI ≤ v0.9 (containerd ≤ 2.1): bits 0x07FF.
    pub const VALID_PRE_V0_10: EventMask = EventMask(0x07FF);
    /// Events valid for CRI-O 1.33's NRI pseudo-version (`NriVersion::V0_9_1_PSEUDO`, `Event.LAST`
    /// 14): UpdatePodSandbox and PostUpdatePodSandbox, no validation, bits 0x1FFF.
    pub const VALID_V0_9_1_PSEUDO: EventMask = EventMask(0x1FFF);
    /// Events valid for NRI ≥ v0.10: bits 0x3FFF.
    pub const VALID_V0_10: EventMask = EventMask(0x3FFF);
    /// Events that must never be sent to NRI ≤ v0.9.
    pub const NEW_IN_V0_10: EventMask = EventMask(0x3800);

    /// Mask with exactly the given events.
    pub fn of(events: &[Event]) -> EventMask {
        events.iter().fold(EventMask::EMPTY, |m, &e| m.with(e))
    }

    /// Builds a mask from raw bits (unknown bits are kept).
    pub const fn from_bits(bits: u32) -> EventMask {
        EventMask(bits)
    }

    /// Raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Bit of one event; 0 for UNKNOWN/LAST.
    pub fn bit(event: Event) -> u32 {
        let v = event as i32;
        if (1..(Event::LAST as i32)).contains(&v) {
            1 << (v - 1)
        } else {
            0
        }
    }

    /// This mask plus `event`.
    #[must_use]
    pub fn with(self, event: Event) -> EventMask {
        EventMask(self.0 | Self::bit(event))
    }

    /// Whether `event` is in the mask.
    pub fn contains(self, event: Event) -> bool {
        let b = Self::bit(event);
        b != 0 && self.0 & b == b
    }

    /// Whether the mask is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Set intersection.
    #[must_use]
    pub fn intersect(self, other: EventMask) -> EventMask {
        EventMask(self.0 & other.0)
    }

    /// Events a runtime speaking `version` accepts; `None` (unknown) is treated
    /// as the oldest behaviour.
    pub fn valid_for(version: Option<NriVersion>) -> EventMask {
        match version {
            Some(v) if v >= NriVersion::V0_10 => Self::VALID_V0_10,
            Some(v) if v >= NriVersion::V0_9_1_PSEUDO => Self::VALID_V0_9_1_PSEUDO,
            _ => Self::VALID_PRE_V0_10,
        }
    }

    /// The mask to answer Configure with: this mask restricted to what the runtime
    /// accepts, never 0 (0 would subscribe to everything). If nothing remains,
    /// REMOVE_POD_SANDBOX alone is used (a rare, notification-only event).
    pub fn for_runtime(self, version: Option<NriVersion>) -> EventMask {
        let m = self.intersect(Self::valid_for(version));
        if m.is_empty() {
            EventMask::of(&[Event::REMOVE_POD_SANDBOX])
        } else {
            m
        }
    }

    /// Mask as sent on the wire (`ConfigureResponse.events`).
    pub fn to_wire(self) -> i32 {
        // Only bits below LAST are ever meaningful; they fit in i32.
        (self.0 & 0x7FFF_FFFF) as i32
    }
}

impl fmt::Display for EventMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_event_numbers() {
        assert_eq!(EventMask::bit(Event::RUN_POD_SANDBOX), 0x1);
        assert_eq!(EventMask::bit(Event::CREATE_CONTAINER), 0x8);
        assert_eq!(EventMask::bit(Event::VALIDATE_CONTAINER_ADJUSTMENT), 0x2000);
        assert_eq!(EventMask::bit(Event::UNKNOWN), 0);
        assert_eq!(EventMask::bit(Event::LAST), 0);
    }

    #[test]
    fn fits_runtime_version() {
        let m = EventMask::of(&[Event::CREATE_CONTAINER, Event::UPDATE_POD_SANDBOX]);
        let old = m.for_runtime(Some(NriVersion::new(0, 8, 0)));
        assert_eq!(old.bits(), 0x8);
        assert_eq!(old.bits() & 0x3800, 0);
        assert_eq!(m.for_runtime(Some(NriVersion::new(0, 11, 0))).bits(), 0x808);
        assert_eq!(m.for_runtime(None).bits(), 0x8);
        let only_new = EventMask::of(&[Event::UPDATE_POD_SANDBOX]);
        assert_eq!(only_new.for_runtime(None).bits(), 0x4);
    }

    #[test]
    fn crio_133_gets_pod_sandbox_updates_but_no_validation() {
        let m = EventMask::of(&[
            Event::CREATE_CONTAINER,
            Event::UPDATE_POD_SANDBOX,
            Event::POST_UPDATE_POD_SANDBOX,
            Event::VALIDATE_CONTAINER_ADJUSTMENT,
        ]);
        let v = crate::version::infer_from_runtime("cri-o", "1.33.4");
        assert_eq!(m.for_runtime(v).bits(), 0x1808);
        assert_eq!(EventMask::valid_for(v).bits(), 0x1FFF);
        // 1.32 (v0.9.0) has neither; 1.34 (v0.10.0) has all three
        let old = crate::version::infer_from_runtime("cri-o", "1.32.3");
        assert_eq!(m.for_runtime(old).bits(), 0x8);
        let new = crate::version::infer_from_runtime("cri-o", "1.34.0");
        assert_eq!(m.for_runtime(new).bits(), 0x3808);
    }
}
