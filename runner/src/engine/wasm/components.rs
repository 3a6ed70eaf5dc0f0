//! The compiled components a caller keeps in memory: [`ComponentCache`], an object its owner
//! makes and drops (the runner CLI one per process, the desktop relay one for its compiled
//! graphs), never a process-wide map.
//!
//! Compiling a component takes seconds of CPU and a compiled one holds its code in memory
//! (about 20 MB for the guest), so the cache keeps at most a bounded number, dropping the least
//! recently used first; one dropped is loaded again from the disk cache (`cache.rs`) when next
//! asked for. A component is compiled once however many callers ask for it at the same time
//! (the others wait for the first), while components under different keys compile in parallel.

use std::collections::HashMap;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use sha2::Digest;

use super::cache::default_cache_dir;
use super::engines::{EngineSettings, engine_for};
use super::snapshot::{blank_key, build_blank};
use super::{GUEST_SHA256, GUEST_WASM, Loaded, Source, WasmEngine, WasmError, WasmLimits};

/// Compiled components a cache keeps in memory unless its owner says otherwise.
pub const DEFAULT_MAX_COMPONENTS: usize = 16;

/// Compiled components kept in memory by their owner, bounded, the least recently used
/// dropped first. Cloning gives another handle on the same cache; every [`WasmEngine`] it gives
/// holds one, so the components it loads ([`crate::engine::Engine::for_component`], nested
/// graphs' `.wasm` files) land in the same cache.
#[derive(Clone)]
pub struct ComponentCache {
    shared: Arc<Shared>,
}

struct Shared {
    /// The disk cache of compiled artifacts, if any.
    dir: Option<PathBuf>,
    components: OnceLru<ComponentKey, Arc<Loaded>, WasmError>,
}

/// What splits the cache: the component (its SHA-256, or the generic guest's key) and the
/// engine settings it is compiled for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ComponentKey {
    hash: String,
    settings: EngineSettings,
}

impl std::fmt::Debug for ComponentCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentCache")
            .field("dir", &self.shared.dir)
            .field("max", &self.shared.components.max)
            .field("len", &self.len())
            .finish()
    }
}

impl ComponentCache {
    /// A cache keeping at most `max_components` (at least 1) compiled components in memory,
    /// over the disk cache in [`default_cache_dir`].
    pub fn new(max_components: usize) -> Self {
        Self::with_disk_cache(max_components, default_cache_dir())
    }

    /// A cache keeping at most `max_components` (at least 1) in memory, over the disk cache in
    /// `dir` (none: a component not in memory is compiled).
    pub fn with_disk_cache(max_components: usize, dir: Option<PathBuf>) -> Self {
        Self {
            shared: Arc::new(Shared {
                dir,
                components: OnceLru::new(max_components),
            }),
        }
    }

    /// How many compiled components it holds now.
    pub fn len(&self) -> usize {
        self.shared.components.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The generic guest with `limits`, pre-initialized with wizer (boa's intrinsics created and
    /// the prelude evaluated in the snapshot, so a run only parses and evaluates its own
    /// script). When the snapshot cannot be taken, the plain guest, with a warning.
    pub fn generic(&self, limits: WasmLimits) -> Result<WasmEngine, WasmError> {
        match self.load_generic(limits) {
            Ok((engine, _)) => Ok(engine),
            Err(e) => {
                tracing::warn!(
                    "cannot pre-initialize the generic guest ({e}); runs start without the snapshot"
                );
                self.load(GUEST_WASM, GUEST_SHA256, limits).map(|(e, _)| e)
            }
        }
    }

    /// The pre-initialized generic guest (see [`Self::generic`]), from this cache, the disk
    /// cache, or built now (a snapshot and two compilations: seconds), saying which.
    pub fn load_generic(&self, limits: WasmLimits) -> Result<(WasmEngine, Source), WasmError> {
        self.load_with(&blank_key(), limits, &mut build_blank)
    }

    /// The built component `bytes` (`runner build` output) with `limits`.
    pub fn component(&self, bytes: &[u8], limits: WasmLimits) -> Result<WasmEngine, WasmError> {
        let hash = hex(&sha2::Sha256::digest(bytes));
        self.load(bytes, &hash, limits).map(|(engine, _)| engine)
    }

    /// The component `bytes`, whose SHA-256 is `hash`, from this cache, the disk cache, or
    /// compiled now, saying which.
    pub fn load(
        &self,
        bytes: &[u8],
        hash: &str,
        limits: WasmLimits,
    ) -> Result<(WasmEngine, Source), WasmError> {
        self.load_with(hash, limits, &mut || Ok(bytes.to_vec()))
    }

    /// Like [`Self::load`], with the component's bytes produced only when they must be compiled.
    fn load_with(
        &self,
        hash: &str,
        limits: WasmLimits,
        bytes: &mut dyn FnMut() -> Result<Vec<u8>, WasmError>,
    ) -> Result<(WasmEngine, Source), WasmError> {
        let key = ComponentKey {
            hash: hash.to_owned(),
            settings: EngineSettings::of(limits),
        };
        let mut source = Source::Memory;
        let loaded = self.shared.components.get_or_make(&key, || {
            let engine = engine_for(limits)?;
            let (loaded, from) = Loaded::compile(engine, hash, self.shared.dir.as_deref(), bytes)?;
            source = from;
            Ok(Arc::new(loaded))
        })?;
        Ok((WasmEngine::of(loaded, limits, self.clone()), source))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Values by key, each made once: the first caller of a key makes it while later callers of
/// that key wait for it, and callers of other keys go on. At most `max` are kept, the least
/// recently used dropped first (a caller still holding a dropped value keeps it). A value that
/// could not be made is not kept: the callers that waited for it get the same error, the next
/// caller tries again.
struct OnceLru<K, V, E> {
    max: usize,
    state: Mutex<Slots<K, V, E>>,
}

struct Slots<K, V, E> {
    slots: HashMap<K, Slot<V, E>>,
    /// Counts uses, for [`Slot::used`].
    uses: u64,
}

struct Slot<V, E> {
    cell: Arc<OnceLock<Result<V, E>>>,
    /// When it was last asked for (a count of uses): the smallest goes first.
    used: u64,
}

impl<K: Eq + Hash + Clone, V: Clone, E: Clone> OnceLru<K, V, E> {
    fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            state: Mutex::new(Slots {
                slots: HashMap::new(),
                uses: 0,
            }),
        }
    }

    fn len(&self) -> usize {
        lock(&self.state).slots.len()
    }

    /// The value under `key`, made by `make` unless it is kept or being made.
    fn get_or_make(&self, key: &K, make: impl FnOnce() -> Result<V, E>) -> Result<V, E> {
        let cell = self.cell(key);
        // Only this key's callers wait here; the map's lock is not held while `make` runs.
        let value = cell.get_or_init(make).clone();
        if value.is_err() {
            let mut state = lock(&self.state);
            if state
                .slots
                .get(key)
                .is_some_and(|slot| Arc::ptr_eq(&slot.cell, &cell))
            {
                state.slots.remove(key);
            }
        }
        value
    }

    /// The cell of `key`, marked as used now; a new one, making room for it, if there is none.
    fn cell(&self, key: &K) -> Arc<OnceLock<Result<V, E>>> {
        let mut state = lock(&self.state);
        state.uses += 1;
        let used = state.uses;
        if let Some(slot) = state.slots.get_mut(key) {
            slot.used = used;
            return slot.cell.clone();
        }
        while state.slots.len() >= self.max {
            let oldest = state
                .slots
                .iter()
                .min_by_key(|(_, slot)| slot.used)
                .map(|(key, _)| key.clone());
            let Some(oldest) = oldest else { break };
            state.slots.remove(&oldest);
        }
        let cell = Arc::new(OnceLock::new());
        state.slots.insert(
            key.clone(),
            Slot {
                cell: cell.clone(),
                used,
            },
        );
        cell
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// How long a test waits for another thread before it fails (not a timing assertion: a
    /// correct cache answers at once, a broken one would wait forever).
    const STUCK: Duration = Duration::from_secs(60);

    #[test]
    fn at_most_max_are_kept_and_the_least_recently_used_goes_first() {
        let lru: OnceLru<&str, u32, ()> = OnceLru::new(2);
        let made = AtomicUsize::new(0);
        let get = |key: &'static str| {
            lru.get_or_make(&key, || {
                made.fetch_add(1, Ordering::SeqCst);
                Ok(key.len() as u32)
            })
        };
        assert_eq!(get("a"), Ok(1));
        assert_eq!(get("bb"), Ok(2));
        assert_eq!(get("a"), Ok(1), "a is kept, and now used after bb");
        assert_eq!(made.load(Ordering::SeqCst), 2);
        assert_eq!(get("ccc"), Ok(3));
        assert_eq!(lru.len(), 2);
        // bb was the least recently used: it went, a stayed.
        assert_eq!(get("a"), Ok(1));
        assert_eq!(made.load(Ordering::SeqCst), 3);
        assert_eq!(get("bb"), Ok(2));
        assert_eq!(made.load(Ordering::SeqCst), 4, "bb was made again");
        assert_eq!(lru.len(), 2);
    }

    #[test]
    fn a_value_that_could_not_be_made_is_tried_again() {
        let lru: OnceLru<u8, u8, String> = OnceLru::new(4);
        assert_eq!(lru.get_or_make(&1, || Err("no".into())), Err("no".into()));
        assert_eq!(lru.len(), 0);
        assert_eq!(lru.get_or_make(&1, || Ok(7)), Ok(7));
        assert_eq!(lru.get_or_make(&1, || Ok(8)), Ok(7));
    }

    /// Callers of one key at once: one makes the value, the others wait and get it.
    #[test]
    fn one_key_is_made_once_for_callers_at_the_same_time() {
        let lru: &OnceLru<u8, usize, ()> = &OnceLru::new(4);
        let made = &AtomicUsize::new(0);
        let (started, first_started) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let maker = scope.spawn(move || {
                lru.get_or_make(&1, || {
                    made.fetch_add(1, Ordering::SeqCst);
                    started.send(()).expect("the test waits");
                    released.recv_timeout(STUCK).expect("released");
                    Ok(42)
                })
            });
            first_started
                .recv_timeout(STUCK)
                .expect("the first caller makes it");
            let waiters: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(move || {
                        lru.get_or_make(&1, || Ok(made.fetch_add(1, Ordering::SeqCst)))
                    })
                })
                .collect();
            release.send(()).expect("the maker waits");
            assert_eq!(maker.join().expect("no panic"), Ok(42));
            for waiter in waiters {
                assert_eq!(waiter.join().expect("no panic"), Ok(42));
            }
        });
        assert_eq!(made.load(Ordering::SeqCst), 1, "made once");
    }

    /// Two keys made at the same time: neither waits for the other (each `make` waits until the
    /// other one has started, which a cache making one value at a time would never let happen).
    #[test]
    fn different_keys_are_made_in_parallel() {
        let lru: &OnceLru<u8, u8, ()> = &OnceLru::new(4);
        let (a_started, a_seen) = mpsc::channel();
        let (b_started, b_seen) = mpsc::channel();
        std::thread::scope(|scope| {
            let a = scope.spawn(move || {
                lru.get_or_make(&1, || {
                    a_started.send(()).expect("b waits");
                    b_seen.recv_timeout(STUCK).map(|()| 1).map_err(drop)
                })
            });
            let b = scope.spawn(move || {
                lru.get_or_make(&2, || {
                    b_started.send(()).expect("a waits");
                    a_seen.recv_timeout(STUCK).map(|()| 2).map_err(drop)
                })
            });
            assert_eq!(a.join().expect("no panic"), Ok(1));
            assert_eq!(b.join().expect("no panic"), Ok(2));
        });
    }
}
