//! Opening a store: the data dir's lock, the collector id, and recovery
//! (unfinished flushes dropped, the WAL replayed, checkpoints restored).

use super::*;

/// Takes the data dir's exclusive lock (released by the OS when the
/// process dies, so a kill -9 never leaves it stuck) and writes our pid in
/// it for the error the next opener sees.
fn lock_data_dir(root: &Path) -> Result<fs::File, StoreError> {
    use std::io::{Read, Seek, Write};
    let path = root.join("LOCK");
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StoreError::io("opening", &path, e))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            return Err(StoreError::InUse {
                path: root.to_path_buf(),
                pid: pid.trim().to_string(),
            });
        }
        Err(fs::TryLockError::Error(e)) => return Err(StoreError::io("locking", &path, e)),
    }
    let _ = f.set_len(0);
    let _ = f.seek(std::io::SeekFrom::Start(0));
    let _ = write!(f, "{}", std::process::id());
    Ok(f)
}

fn mkdir(p: &Path) -> Result<(), StoreError> {
    fs::create_dir_all(p).map_err(|e| StoreError::io("creating directory", p, e))
}

/// `[store] collector_id`, else the id kept in `data_dir/COLLECTOR_ID`,
/// else a new one (`<hostname>-<8 random hex>`) written there.
fn collector_id(cfg: &StoreConfig, root: &Path) -> Result<String, StoreError> {
    use std::hash::{BuildHasher, Hasher};
    if let Some(id) = &cfg.collector_id {
        if !objects::valid_collector_id(id) {
            return Err(StoreError::Config(format!(
                "collector_id {id:?} must be 1-64 letters, digits, '-', '_' or '.'"
            )));
        }
        return Ok(id.clone());
    }
    let path = root.join("COLLECTOR_ID");
    match fs::read_to_string(&path) {
        Ok(s) if objects::valid_collector_id(s.trim()) => return Ok(s.trim().to_string()),
        Ok(s) => {
            return Err(StoreError::Config(format!(
                "{} holds {:?}, not a collector id",
                path.display(),
                s.trim()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::io("reading", &path, e)),
    }
    let host: String = fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(40)
        .collect();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(now_us() as u128 ^ u128::from(std::process::id()) << 64);
    let rand = h.finish() as u32;
    let id = if host.is_empty() {
        format!("overtime-{rand:08x}")
    } else {
        format!("{host}-{rand:08x}")
    };
    let tmp = root.join("COLLECTOR_ID.tmp");
    fs::write(&tmp, format!("{id}\n")).map_err(|e| StoreError::io("writing", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| StoreError::io("renaming", &tmp, e))?;
    wal::sync_dir(root)?;
    Ok(id)
}

impl Store {
    /// Opens (or creates) the store in `cfg.data_dir` and recovers: drops
    /// Parquet files of unfinished flushes, replays every WAL segment not
    /// yet flushed into the memtable (a torn last record is detected by
    /// its CRC and cut off), and restores checkpoints.
    pub fn open(cfg: StoreConfig) -> Result<Store, StoreError> {
        if cfg.memtable_bytes == 0 {
            return Err(StoreError::Config("memtable_bytes must be > 0".into()));
        }
        if cfg.segment_seconds <= 0 {
            return Err(StoreError::Config("segment_seconds must be > 0".into()));
        }
        mkdir(&cfg.data_dir)?;
        let root = fs::canonicalize(&cfg.data_dir)
            .map_err(|e| StoreError::io("resolving", &cfg.data_dir, e))?;
        let lock = lock_data_dir(&root)?;
        let wal_dir = root.join("wal");
        mkdir(&wal_dir)?;
        let parquet_dirs = Table::ALL.map(|t| root.join("parquet").join(t.as_str()));
        let mut manifest = Manifest::load(&root)?;
        let wal_seqs = wal::list_segments(&wal_dir)?;
        let (bucket, collector_id) = match &cfg.url {
            None => {
                for d in &parquet_dirs {
                    mkdir(d)?;
                }
                (None, String::new())
            }
            Some(url) => (
                Some(Arc::new(Bucket::open(url)?)),
                collector_id(&cfg, &root)?,
            ),
        };

        // The manifest published in the bucket is written first: when it
        // is the later one, a crash came between the two (published.rs).
        let published = match &bucket {
            Some(b) => published::read_one(b, &collector_id)?,
            None => None,
        };
        if let Some(m) = &published
            && m.flushed_through > manifest.flushed_through
        {
            manifest = m.clone();
        }

        let mut files: [Vec<Arc<SegmentFile>>; 4] = Default::default();
        // Our own objects: a file past the manifest is an unfinished flush
        // (its rows are replayed from the WAL, or read again from Kafka),
        // which no other collector reads either. Without a published
        // manifest (files of an older version), numbers past every
        // segment we hold are a previous data_dir's, kept. Numbers are
        // never reused.
        let mut max_own_seq = 0;
        // The newest of our objects that is kept (the WAL is still replayed
        // from the manifest's sequence).
        let mut kept_through = manifest.flushed_through;
        if let Some(b) = &bucket {
            let last_wal = wal_seqs.last().copied().unwrap_or(0);
            for (key, size) in b.list()? {
                let Some(p) = parse_key(b.prefix(), &key) else {
                    continue;
                };
                if p.collector != collector_id {
                    continue;
                }
                max_own_seq = max_own_seq.max(p.seq);
                let unfinished =
                    p.seq > manifest.flushed_through && (published.is_some() || p.seq <= last_wal);
                if unfinished {
                    b.delete(&key)?;
                    continue;
                }
                kept_through = kept_through.max(p.seq);
                let obj = ObjectReader {
                    bucket: b.clone(),
                    key: key.into(),
                    size,
                };
                files[idx(p.table)].push(Arc::new(segment::open_object(
                    p.table,
                    obj,
                    Some(p.collector),
                )?));
            }
            // Every object kept is ours and read: the bucket's manifest
            // must say so too (files of an older version had none).
            if published
                .as_ref()
                .is_none_or(|m| m.flushed_through < kept_through)
            {
                let m = Manifest {
                    flushed_through: kept_through,
                    checkpoints: manifest.checkpoints.clone(),
                };
                published::publish(b, &collector_id, &m)?;
            }
        }
        for t in Table::ALL {
            if bucket.is_some() {
                break;
            }
            for p in segment::list_files(&parquet_dirs[idx(t)])? {
                let unfinished = p.extension().is_some_and(|x| x == "tmp")
                    || segment::parse_seq(&p).is_none_or(|s| s > manifest.flushed_through);
                if unfinished {
                    fs::remove_file(&p).map_err(|e| StoreError::io("removing", &p, e))?;
                    continue;
                }
                files[idx(t)].push(Arc::new(segment::open_segment(t, &p)?));
            }
        }

        let mut active = Memtable::default();
        let mut checkpoints = manifest.checkpoints.clone();
        let mut live = Vec::new();
        for seq in wal_seqs {
            let path = wal::segment_path(&wal_dir, seq);
            if seq <= manifest.flushed_through {
                fs::remove_file(&path).map_err(|e| StoreError::io("removing", &path, e))?;
                continue;
            }
            let (records, good) = wal::read_segment(&path)?;
            let len = fs::metadata(&path)
                .map_err(|e| StoreError::io("stat", &path, e))?
                .len();
            if good < len {
                wal::truncate_segment(&path, good)?;
            }
            for r in records {
                if let Some(c) = r.checkpoint {
                    checkpoints.insert(c.source, c.position);
                }
                if r.batch.num_rows() > 0 {
                    active.push(r.table, r.batch, r.encoded_len as u64);
                }
            }
            live.push((seq, good));
        }
        let wal = Wal::open_after(&wal_dir, live, cfg.fsync, max_own_seq)?;
        let reserved = AtomicU64::new(active.bytes());
        let inner = Arc::new(Inner {
            root,
            parquet_dirs,
            bucket,
            collector_id,
            listed: Mutex::new(None),
            wal,
            gate: RwLock::new(()),
            state: RwLock::new(State {
                active,
                frozen: None,
                files,
                flushed_checkpoints: manifest.checkpoints.clone(),
                checkpoints,
                flushed_through: kept_through,
            }),
            reserved,
            flush_lock: Mutex::new(()),
            orphans: Mutex::new(Vec::new()),
            manifests: Default::default(),
            backpressure: AtomicU64::new(0),
            files_scanned: AtomicU64::new(0),
            footers: crate::provider::footer_cache(),
            read_cache: crate::read_cache::read_cache(cfg.read_cache_bytes),
            flushes: AtomicU64::new(0),
            last_flush_error: Mutex::new(None),
            last_write_error: Mutex::new(None),
            write_failing: Default::default(),
            kick: (Mutex::new(Kick::default()), Condvar::new()),
            cfg,
        });
        let flusher = (inner.cfg.flush_interval_ms > 0).then(|| {
            let i = inner.clone();
            std::thread::Builder::new()
                .name("overtime-store-flush".into())
                .spawn(move || flusher_loop(&i))
                .expect("spawning the flush thread")
        });
        Ok(Store {
            inner,
            flusher,
            _lock: lock,
        })
    }
}
