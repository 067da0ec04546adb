//! Destructive wipes and their verification, over any [`BlockDev`] (an NVMe namespace, or a
//! file standing in for one on a simulated host).
//!
//! - `overwrite-verify`: the agent writes a pattern derived from a fresh seed over the whole
//!   device, then reads back samples and compares each with the pattern. A pattern rather than
//!   zeros, so that a device which silently drops writes (and reads back zeros) fails.
//! - `nvme-format-crypto`, `nvme-format`, `nvme-sanitize-block`: the controller does the
//!   work (nvme-cli on a real host; see [`nvme_argv`]); the agent samples blocks before and
//!   checks that every sample that held data no longer does.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The unit of sampling and of the overwrite pattern.
pub const BLOCK: usize = 4096;
/// Blocks read back by a verification (the first and last block, and spread between).
pub const SAMPLES: usize = 64;

pub trait BlockDev {
    fn size_bytes(&self) -> Result<u64, String>;
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), String>;
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), String>;
    fn sync(&self) -> Result<(), String>;
}

impl BlockDev for File {
    fn size_bytes(&self) -> Result<u64, String> {
        use std::io::{Seek, SeekFrom};
        // Block devices report 0 in metadata; seeking to the end works for both.
        let mut f = self;
        f.seek(SeekFrom::End(0)).map_err(|e| e.to_string())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        FileExt::read_exact_at(self, buf, offset).map_err(|e| format!("read at {offset}: {e}"))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), String> {
        FileExt::write_all_at(self, buf, offset).map_err(|e| format!("write at {offset}: {e}"))
    }
    fn sync(&self) -> Result<(), String> {
        self.sync_all().map_err(|e| format!("fsync: {e}"))
    }
}

/// The offsets verification reads: block 0, the last whole block, and [`SAMPLES`] − 2 spread
/// pseudo-randomly (by `seed`) between them.
pub fn sample_offsets(len: u64, seed: u64) -> Vec<u64> {
    let blocks = len / BLOCK as u64;
    if blocks == 0 {
        return Vec::new();
    }
    let mut offsets = vec![0, (blocks - 1) * BLOCK as u64];
    let mut state = seed;
    while offsets.len() < SAMPLES.min(blocks as usize) {
        let b = splitmix(&mut state) % blocks;
        let off = b * BLOCK as u64;
        if !offsets.contains(&off) {
            offsets.push(off);
        }
    }
    offsets.sort_unstable();
    offsets
}

/// One block as it was before a controller wipe.
#[derive(Clone, Debug)]
pub struct Sample {
    pub offset: u64,
    pub digest: [u8; 32],
    pub had_data: bool,
}

pub fn take_samples(dev: &dyn BlockDev, offsets: &[u64]) -> Result<Vec<Sample>, String> {
    let mut buf = vec![0u8; BLOCK];
    offsets
        .iter()
        .map(|&offset| {
            dev.read_at(&mut buf, offset)?;
            Ok(Sample {
                offset,
                digest: Sha256::digest(&buf).into(),
                had_data: buf.iter().any(|&b| b != 0),
            })
        })
        .collect()
}

/// The pattern block `overwrite` writes at `offset` for `seed`.
pub fn pattern_block(seed: u64, offset: u64, out: &mut [u8]) {
    let mut state = seed ^ offset.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for chunk in out.chunks_mut(8) {
        let v = splitmix(&mut state).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Writes the pattern for `seed` over the whole device and flushes it. `deadline` bounds the
/// time (a real 4 TB namespace takes hours; the operator chose this policy).
pub fn overwrite(dev: &dyn BlockDev, seed: u64, deadline: Duration) -> Result<(), String> {
    let len = dev.size_bytes()?;
    let started = Instant::now();
    const CHUNK_BLOCKS: u64 = 256;
    let mut buf = vec![0u8; BLOCK * CHUNK_BLOCKS as usize];
    let mut offset = 0;
    while offset < len {
        let blocks = ((len - offset) / BLOCK as u64).min(CHUNK_BLOCKS);
        let n = if blocks == 0 {
            (len - offset) as usize
        } else {
            blocks as usize * BLOCK
        };
        for (i, block) in buf[..n].chunks_mut(BLOCK).enumerate() {
            pattern_block(seed, offset + (i * BLOCK) as u64, block);
        }
        dev.write_at(&buf[..n], offset)?;
        offset += n as u64;
        if started.elapsed() > deadline {
            return Err(format!(
                "overwrite stopped after {} s at byte {offset} of {len}: past its time limit",
                deadline.as_secs()
            ));
        }
    }
    dev.sync()
}

/// What a verification expects to read back.
pub enum Expect<'a> {
    /// Exactly the pattern `overwrite` wrote with this seed.
    Pattern(u64),
    /// Anything but what these samples held (for controller wipes).
    Changed(&'a [Sample]),
}

/// Reads back the samples and compares. Returns how many blocks were read.
pub fn verify(dev: &dyn BlockDev, offsets: &[u64], expect: Expect<'_>) -> Result<u32, String> {
    if offsets.is_empty() {
        return Err("the device is smaller than one block; nothing to verify".into());
    }
    let mut buf = vec![0u8; BLOCK];
    let mut want = vec![0u8; BLOCK];
    for &offset in offsets {
        dev.read_at(&mut buf, offset)?;
        match &expect {
            Expect::Pattern(seed) => {
                pattern_block(*seed, offset, &mut want);
                if buf != want {
                    return Err(format!(
                        "verification failed: the block at byte {offset} does not hold what the wipe wrote"
                    ));
                }
            }
            Expect::Changed(before) => {
                let Some(s) = before.iter().find(|s| s.offset == offset) else {
                    return Err(format!("no sample was taken at byte {offset}"));
                };
                let digest: [u8; 32] = Sha256::digest(&buf).into();
                if s.had_data && digest == s.digest {
                    return Err(format!(
                        "verification failed: the block at byte {offset} still holds the tenant's data"
                    ));
                }
            }
        }
    }
    Ok(offsets.len() as u32)
}

/// The nvme-cli command line for a controller wipe of `namespace` (`nvme3n1`): fixed argv,
/// never a shell.
pub fn nvme_argv(method: &str, namespace: &str) -> Result<Vec<String>, String> {
    let controller = controller_of(namespace)?;
    Ok(match method {
        "nvme-format-crypto" => vec![
            "format".into(),
            format!("/dev/{namespace}"),
            "--ses=2".into(),
            "--force".into(),
        ],
        "nvme-format" => vec![
            "format".into(),
            format!("/dev/{namespace}"),
            "--ses=1".into(),
            "--force".into(),
        ],
        "nvme-sanitize-block" => vec![
            "sanitize".into(),
            format!("/dev/{controller}"),
            "--sanact=2".into(),
        ],
        other => return Err(format!("{other:?} is not a controller wipe")),
    })
}

/// The sanitize status poll: `nvme sanitize-log /dev/nvme3 --output-format=json`.
pub fn sanitize_log_argv(namespace: &str) -> Result<Vec<String>, String> {
    Ok(vec![
        "sanitize-log".into(),
        format!("/dev/{}", controller_of(namespace)?),
        "--output-format=json".into(),
    ])
}

/// Reads the sanitize log's status: `Ok(true)` once the last sanitize completed.
pub fn sanitize_done(log_json: &str) -> Result<bool, String> {
    let v: serde_json::Value =
        serde_json::from_str(log_json).map_err(|e| format!("unreadable sanitize log: {e}"))?;
    // nvme-cli prints one object per device, keyed by its name.
    let log = v.as_object().and_then(|o| o.values().next()).unwrap_or(&v);
    let sstat = log
        .get("sstat")
        .and_then(|s| s.as_u64())
        .ok_or("the sanitize log has no sstat")?;
    match sstat & 0x7 {
        0 | 1 => Ok(sstat & 0x7 == 1),
        2 => Ok(false),
        3 => Err("the controller reports the sanitize failed".into()),
        other => Err(format!("unexpected sanitize status {other}")),
    }
}

fn controller_of(namespace: &str) -> Result<String, String> {
    let (ctrl, ns) = namespace
        .strip_prefix("nvme")
        .and_then(|r| r.split_once('n'))
        .ok_or_else(|| format!("{namespace:?} is not an NVMe namespace name"))?;
    if ctrl.is_empty()
        || ns.is_empty()
        || !ctrl.chars().all(|c| c.is_ascii_digit())
        || !ns.chars().all(|c| c.is_ascii_digit())
    {
        return Err(format!("{namespace:?} is not an NVMe namespace name"));
    }
    Ok(format!("nvme{ctrl}"))
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A fresh seed for one wipe.
pub fn fresh_seed() -> u64 {
    u64::from_le_bytes(crate::random_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn device(name: &str, len: u64) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!("wipe-{name}-{}", std::process::id()));
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        // The tenant's data: something in every block.
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
        f.write_all_at(&data, 0).unwrap();
        (path, f)
    }

    #[test]
    fn overwrite_then_verify_reads_back_the_pattern() {
        let (path, dev) = device("ok", 1 << 20);
        let seed = fresh_seed();
        overwrite(&dev, seed, Duration::from_secs(60)).unwrap();
        let offsets = sample_offsets(1 << 20, seed);
        assert_eq!(offsets.len(), SAMPLES);
        assert_eq!(offsets[0], 0);
        assert_eq!(*offsets.last().unwrap(), (1 << 20) - BLOCK as u64);
        assert_eq!(verify(&dev, &offsets, Expect::Pattern(seed)), Ok(64));
        // Another seed's pattern is not what is on the device.
        assert!(verify(&dev, &offsets, Expect::Pattern(seed ^ 1)).is_err());
        let _ = std::fs::remove_file(path);
    }

    /// A device whose read-back of one block is corrupted (a flipped byte).
    struct Corrupting<'a> {
        dev: &'a File,
        at: u64,
        hits: Cell<u32>,
    }

    impl BlockDev for Corrupting<'_> {
        fn size_bytes(&self) -> Result<u64, String> {
            BlockDev::size_bytes(self.dev)
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), String> {
            BlockDev::read_at(self.dev, buf, offset)?;
            if offset == self.at {
                buf[17] ^= 0x40;
                self.hits.set(self.hits.get() + 1);
            }
            Ok(())
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), String> {
            BlockDev::write_at(self.dev, buf, offset)
        }
        fn sync(&self) -> Result<(), String> {
            BlockDev::sync(self.dev)
        }
    }

    #[test]
    fn a_corrupted_read_back_fails_the_wipe() {
        let (path, file) = device("corrupt", 1 << 20);
        let seed = 42;
        let offsets = sample_offsets(1 << 20, seed);
        let dev = Corrupting {
            dev: &file,
            at: offsets[5],
            hits: Cell::new(0),
        };
        overwrite(&dev, seed, Duration::from_secs(60)).unwrap();
        let e = verify(&dev, &offsets, Expect::Pattern(seed)).unwrap_err();
        assert_eq!(
            e,
            format!(
                "verification failed: the block at byte {} does not hold what the wipe wrote",
                offsets[5]
            )
        );
        assert_eq!(dev.hits.get(), 1);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_controller_wipe_that_left_data_fails() {
        let (path, dev) = device("ctrl", 256 * 1024);
        let offsets = sample_offsets(256 * 1024, 7);
        let before = take_samples(&dev, &offsets).unwrap();
        assert!(before.iter().all(|s| s.had_data));
        // Nothing happened: the tenant's data is still there.
        let e = verify(&dev, &offsets, Expect::Changed(&before)).unwrap_err();
        assert!(e.contains("still holds the tenant's data"), "{e}");
        // The controller zeroed the namespace.
        dev.write_all_at(&vec![0u8; 256 * 1024], 0).unwrap();
        assert_eq!(verify(&dev, &offsets, Expect::Changed(&before)), Ok(64));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn nvme_command_lines_are_fixed() {
        assert_eq!(
            nvme_argv("nvme-format-crypto", "nvme3n1").unwrap(),
            ["format", "/dev/nvme3n1", "--ses=2", "--force"]
        );
        assert_eq!(
            nvme_argv("nvme-sanitize-block", "nvme12n1").unwrap(),
            ["sanitize", "/dev/nvme12", "--sanact=2"]
        );
        assert_eq!(
            nvme_argv("nvme-format", "nvme0n2; rm -rf /").unwrap_err(),
            "\"nvme0n2; rm -rf /\" is not an NVMe namespace name"
        );
        assert!(nvme_argv("overwrite-verify", "nvme0n1").is_err());
        assert_eq!(
            sanitize_done(r#"{"nvme0":{"sprog":65535,"sstat":1}}"#),
            Ok(true)
        );
        assert_eq!(
            sanitize_done(r#"{"nvme0":{"sprog":1200,"sstat":2}}"#),
            Ok(false)
        );
        assert!(sanitize_done(r#"{"nvme0":{"sstat":3}}"#).is_err());
    }
}
