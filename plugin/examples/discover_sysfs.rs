//! Discovers the topology under a sysfs root and prints its shape and how long discovery took:
//! `cargo run --release -p topolet --example discover_sysfs -- [ROOT] [ITERATIONS]`
//! (default `/sys`, 1 iteration). A quick speed check, not a benchmark.

use std::path::PathBuf;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(args.next().unwrap_or_else(|| "/sys".into()));
    let iterations: u32 = args
        .next()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1)
        .max(1);
    let mut times = Vec::new();
    let mut topology = None;
    for _ in 0..iterations {
        let start = Instant::now();
        topology = Some(topolet::host::sysfs::discover(&root)?);
        times.push(start.elapsed());
    }
    times.sort();
    let start = Instant::now();
    let raw = topolet::host::sysfs::read_machine(&root)?;
    let read = start.elapsed();
    let start = Instant::now();
    topolet_core::machine::topology::Topology::build(&raw)?;
    println!("last run split: read {read:?}, build {:?}", start.elapsed());
    let t = topology.ok_or("no iteration ran")?;
    println!(
        "{}: {} cpus, {} cores, {} sockets, {} numa nodes, {} l3 groups, {} bytes, {} devices",
        root.display(),
        t.num_cpus(),
        t.num_cores(),
        t.socket_ids().count(),
        t.numa_ids().count(),
        t.num_l3(),
        t.memory_capacity(),
        t.devices().len()
    );
    println!(
        "discovery over {iterations} runs: min {:?}, median {:?}, max {:?}",
        times[0],
        times[times.len() / 2],
        times[times.len() - 1]
    );
    Ok(())
}
