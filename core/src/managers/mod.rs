//! The kubelet's resource managers, as the kubelet's `pkg/kubelet/cm` splits them: the CPU
//! manager ([`cpu`]: the `none`/`static` policy and the topology-aware allocator), the memory
//! manager ([`memory`]), the device hint provider of `[devices]` ([`devices`]), the devices a
//! container was really given and their hints ([`observed_devices`]) and the topology manager
//! ([`topology`]: hints, their merge under a policy, the admission step per scope). Each
//! provider owns its assignments; [`crate::placement`] drives them together.
pub mod cpu;
pub mod devices;
pub mod memory;
pub mod observed_devices;
pub mod topology;
