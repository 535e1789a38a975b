//! Reusing the keys and values of contexts seen before: the system prompt and worked
//! examples every sample shares, and a chain's previous turn (its next context is that
//! turn's context, the sampled ids and the observation). A new sequence whose context
//! starts with a cached one is prefilled from where the cached part ends.

use agentfly_model::model::KvCache;

struct Entry {
    tokens: Vec<u32>,
    kv: KvCache,
    last_used: u64,
}

/// Cached single-row KV caches by their token prefix, least recently used evicted first
/// beyond a budget of cached positions.
pub(crate) struct PrefixCache {
    entries: Vec<Entry>,
    capacity: usize,
    cached: usize,
    clock: u64,
    /// Lookups that found a prefix.
    pub hits: u64,
    /// Positions not recomputed thanks to them.
    pub reused: u64,
}

/// A found prefix shorter than this is not worth a separate prefill.
const MIN_PREFIX: usize = 16;

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("entries", &self.entries.len())
            .field("cached", &self.cached)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl PrefixCache {
    /// Keeps at most `capacity` cached positions in all.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: Vec::new(),
            capacity,
            cached: 0,
            clock: 0,
            hits: 0,
            reused: 0,
        }
    }

    /// The longest cached prefix of `context`, leaving at least one token to compute:
    /// its keys and values (one row) and its length.
    pub(crate) fn lookup(&mut self, context: &[u32]) -> Option<(KvCache, usize)> {
        let limit = context.len().saturating_sub(1);
        let (best, len) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, common_prefix(&e.tokens, context).min(limit)))
            .max_by_key(|&(_, len)| len)?;
        if len < MIN_PREFIX {
            return None;
        }
        self.clock += 1;
        let entry = &mut self.entries[best];
        entry.last_used = self.clock;
        self.hits += 1;
        self.reused += len as u64;
        Some((entry.kv.positions(0, len), len))
    }

    /// Caches `kv` (one row, no padding) as the keys and values of `tokens`. An entry that
    /// is a prefix of `tokens` is replaced; nothing is added when `tokens` is already
    /// covered by an entry.
    pub(crate) fn insert(&mut self, tokens: Vec<u32>, kv: KvCache) {
        if self.capacity == 0 || tokens.len() < MIN_PREFIX || tokens.len() > self.capacity {
            return;
        }
        if self
            .entries
            .iter()
            .any(|e| e.tokens.len() >= tokens.len() && e.tokens.starts_with(&tokens))
        {
            return;
        }
        let before = self.entries.len();
        self.entries
            .retain(|e| !(e.tokens.len() < tokens.len() && tokens.starts_with(&e.tokens)));
        if self.entries.len() != before {
            self.cached = self.entries.iter().map(|e| e.tokens.len()).sum();
        }
        self.clock += 1;
        self.cached += tokens.len();
        self.entries.push(Entry {
            tokens,
            kv,
            last_used: self.clock,
        });
        while self.cached > self.capacity {
            let oldest = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
                .expect("over capacity means not empty");
            let gone = self.entries.swap_remove(oldest);
            self.cached -= gone.tokens.len();
        }
    }

    /// Forgets everything (the weights changed).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.cached = 0;
    }
}
