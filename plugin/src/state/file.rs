//! The state file: topolet's only persisted data (the assignments), written atomically and
//! checksummed so that a crash at any moment leaves either the old or the new file, and a torn,
//! corrupt or foreign file is recognised and reported instead of trusted.
//!
//! Format: one header line of JSON
//! `{"format":"topolet-state","version":2,"length":N,"crc32":"xxxxxxxx"}` followed by exactly `N`
//! bytes of JSON payload whose CRC-32 (IEEE) is `crc32`. Writes go to a temporary file in the same
//! directory (mode 0600), which is fsynced, renamed over the target, and the directory fsynced. A
//! missing state directory is created 0700.
//!
//! A write that fails (disk full, read-only filesystem) leaves the previous file intact and no
//! temporary behind. The plugin keeps placing containers from memory, counts the failure
//! (`topolet_state_file_writes_total{result="error"}`), logs it once, and retries every second
//! until the write succeeds (`crate::state::persister`, which writes off the event path): the file only breaks ties at a
//! restart, where assignments come back from what the containers actually run on, so refusing
//! containers because it cannot be written would be the wrong trade.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Identifies our files; anything else is "foreign".
pub const FORMAT: &str = "topolet-state";
/// The payload schema version this build writes (and the newest it reads). Version 2 added each
/// assignment's `observed_devices`; a version-1 payload is a version-2 one without them, read as
/// is (and written back as version 2 at the next save).
pub const VERSION: u32 = 2;
/// The oldest payload schema version this build reads.
pub const OLDEST_READ: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("{path}: {op}: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("{path}: corrupt state file: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path}: not a topolet state file ({reason})")]
    Foreign { path: PathBuf, reason: String },
    #[error(
        "{path}: state file version {found} is not supported: this build reads version \
         {VERSION} and the earlier ones from {OLDEST_READ}{}",
        if *found > VERSION { " (the file was written by a newer topolet: after a rollback, \
         the assignments are rebuilt from the running containers at Synchronize)" } else { "" }
    )]
    Version { path: PathBuf, found: u32 },
}

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    length: usize,
    crc32: String,
}

/// Writes `payload` to `path` atomically (temp file, fsync, rename, fsync of the directory).
pub fn save<T: Serialize>(path: &Path, payload: &T) -> Result<(), StateFileError> {
    let io = |op: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |source| StateFileError::Io {
            path: p,
            op,
            source,
        }
    };
    let body = serde_json::to_vec(payload).map_err(|e| StateFileError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("cannot encode state: {e}"),
    })?;
    let header = Header {
        format: FORMAT.into(),
        version: VERSION,
        length: body.len(),
        crc32: format!("{:08x}", crc32(&body)),
    };
    let mut bytes = serde_json::to_vec(&header).map_err(|e| StateFileError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("cannot encode header: {e}"),
    })?;
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);

    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    // A missing state directory is created root-only (0700, whatever the umask); an existing one
    // is left as it is.
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io("create directory", dir))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".into());
    let tmp = dir.join(format!(".{file_name}.tmp.{}", std::process::id()));
    // `mode` applies only when the file is created: a leftover temporary file (a crash between
    // create and rename) would keep its mode, so it is removed first.
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io("create temporary file", &tmp))?;
    let written = f
        .write_all(&bytes)
        .and_then(|()| f.sync_all())
        .map_err(io("write temporary file", &tmp));
    drop(f);
    if let Err(e) = written {
        // Disk full or similar: leave the old file in place and no litter behind.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Err(e) = fs::rename(&tmp, path).map_err(io("rename into place", path)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync directory", dir))?;
    Ok(())
}

/// Reads `path`. A missing file is `Ok(None)`; anything that fails a check is an error that says
/// what is wrong, for the caller to report before rebuilding from the runtime's view.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StateFileError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StateFileError::Io {
                path: path.to_path_buf(),
                op: "read",
                source,
            })
        }
    };
    decode(path, &bytes).map(Some)
}

fn decode<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, StateFileError> {
    let corrupt = |reason: String| StateFileError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let foreign = |reason: String| StateFileError::Foreign {
        path: path.to_path_buf(),
        reason,
    };
    let Some(nl) = bytes.iter().position(|&b| b == b'\n') else {
        return Err(if bytes.is_empty() {
            corrupt("file is empty".into())
        } else {
            foreign("no header line".into())
        });
    };
    let header: Header = serde_json::from_slice(&bytes[..nl])
        .map_err(|e| foreign(format!("header is not a topolet header: {e}")))?;
    if header.format != FORMAT {
        return Err(foreign(format!("format is {:?}", header.format)));
    }
    if !(OLDEST_READ..=VERSION).contains(&header.version) {
        return Err(StateFileError::Version {
            path: path.to_path_buf(),
            found: header.version,
        });
    }
    let body = &bytes[nl + 1..];
    if body.len() != header.length {
        return Err(corrupt(format!(
            "payload is {} bytes, header says {} (truncated or appended)",
            body.len(),
            header.length
        )));
    }
    let sum = format!("{:08x}", crc32(body));
    if sum != header.crc32 {
        return Err(corrupt(format!(
            "checksum mismatch: payload crc32 {sum}, header says {}",
            header.crc32
        )));
    }
    serde_json::from_slice(body).map_err(|e| corrupt(format!("payload does not decode: {e}")))
}

/// Moves an unusable state file aside (`<name>.bad`) so it can be inspected, and returns where.
pub fn quarantine(path: &Path) -> Result<PathBuf, StateFileError> {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".bad");
    let aside = PathBuf::from(aside);
    fs::rename(path, &aside).map_err(|source| StateFileError::Io {
        path: path.to_path_buf(),
        op: "move aside",
        source,
    })?;
    Ok(aside)
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), bitwise: the state file is small and
/// written once per event, so a table is not worth its code.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    type Payload = BTreeMap<String, String>;

    fn sample() -> Payload {
        BTreeMap::from([("pod/a".to_string(), "2-3".to_string())])
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn round_trip_is_private_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/state.json");
        save(&path, &sample()).unwrap();
        assert_eq!(load::<Payload>(&path).unwrap(), Some(sample()));
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
    }

    #[test]
    fn missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load::<Payload>(&dir.path().join("nope")).unwrap(), None);
    }

    #[test]
    fn every_truncation_and_every_bit_flip_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        save(&path, &sample()).unwrap();
        let good = fs::read(&path).unwrap();
        for len in 0..good.len() {
            let r = decode::<Payload>(&path, &good[..len]);
            assert!(r.is_err(), "truncation to {len} bytes accepted");
        }
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                if let Ok(p) = decode::<Payload>(&path, &bad) {
                    // A flip inside the header's whitespace-free JSON can only be accepted if it
                    // leaves the same meaning; the payload must never change silently.
                    assert_eq!(
                        p,
                        sample(),
                        "flip at byte {i} bit {bit} changed the payload"
                    );
                }
            }
        }
    }

    #[test]
    fn foreign_and_future_files_are_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        fs::write(
            &path,
            "{\"policyName\":\"static\",\"defaultCpuSet\":\"0-3\"}\n{}",
        )
        .unwrap();
        let err = load::<Payload>(&path).unwrap_err();
        assert!(matches!(err, StateFileError::Foreign { .. }), "{err}");
        assert!(err.to_string().contains("state.json"));

        fs::write(
            &path,
            "{\"format\":\"topolet-state\",\"version\":9,\"length\":2,\"crc32\":\"00000000\"}\n{}",
        )
        .unwrap();
        assert!(matches!(
            load::<Payload>(&path).unwrap_err(),
            StateFileError::Version { found: 9, .. }
        ));
    }

    #[test]
    fn quarantine_moves_the_file_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        fs::write(&path, "garbage").unwrap();
        let aside = quarantine(&path).unwrap();
        assert!(!path.exists());
        assert_eq!(fs::read(aside).unwrap(), b"garbage");
    }
}
