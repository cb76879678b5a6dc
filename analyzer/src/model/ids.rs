//! Per-id figures in memory bounded by what the log defines: ids come from
//! the log, so a vector indexed by them would let one record with id 2^31
//! allocate gigabytes.

use heaptag_format::hash::MixMap;

/// Ids below this are always kept densely (a few hundred KiB at most).
const DENSE_BASE: usize = 4096;

/// Figures per id: a vector for ids below a bound that grows with the
/// number of definitions the log made (`DENSE_BASE` + definitions), a map
/// for any id above it. Lookups of the small, dense ids a real log uses
/// cost an index; memory is at most the bound's worth of entries plus one
/// per distinct id used.
#[derive(Clone, Debug)]
pub struct IdTable<T> {
    dense: Vec<T>,
    sparse: MixMap<u32, T>,
    bound: usize,
}

impl<T> Default for IdTable<T> {
    fn default() -> Self {
        IdTable {
            dense: Vec::new(),
            sparse: MixMap::default(),
            bound: DENSE_BASE,
        }
    }
}

impl<T: Default> IdTable<T> {
    /// The entry of `id`, if it has one.
    pub fn get(&self, id: u32) -> Option<&T> {
        match self.dense.get(id as usize) {
            Some(v) => Some(v),
            None => self.sparse.get(&id),
        }
    }

    /// The entry of `id`, created when missing.
    #[inline]
    pub(crate) fn entry(&mut self, id: u32) -> &mut T {
        let i = id as usize;
        if i < self.dense.len() {
            return &mut self.dense[i];
        }
        self.entry_slow(id)
    }

    /// An id beyond the vector: grow it (up to the bound) or use the map.
    #[cold]
    #[inline(never)]
    fn entry_slow(&mut self, id: u32) -> &mut T {
        let i = id as usize;
        if i < self.bound {
            self.grow(i);
            return &mut self.dense[i];
        }
        self.sparse.entry(id).or_default()
    }

    fn grow(&mut self, i: usize) {
        let len = (i + 1).max(self.dense.len() * 2).min(self.bound);
        let from = self.dense.len();
        self.dense.resize_with(len, T::default);
        if !self.sparse.is_empty() {
            for id in from..len {
                if let Some(v) = self.sparse.remove(&(id as u32)) {
                    self.dense[id] = v;
                }
            }
        }
    }

    /// One more id was defined: the dense bound grows by one.
    pub(crate) fn defined(&mut self) {
        self.bound = self.bound.saturating_add(1);
    }

    /// Every entry, by id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        let mut sparse: Vec<(u32, &T)> = self.sparse.iter().map(|(id, v)| (*id, v)).collect();
        sparse.sort_unstable_by_key(|e| e.0);
        self.dense
            .iter()
            .enumerate()
            .map(|(id, v)| (id as u32, v))
            .chain(sparse)
    }

    /// Every entry, mutably, in no particular order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.dense.iter_mut().chain(self.sparse.values_mut())
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_ids_go_to_the_map_and_iterate_in_order() {
        let mut t: IdTable<u64> = IdTable::default();
        *t.entry(u32::MAX) += 1;
        *t.entry(7) += 2;
        *t.entry(1 << 22) += 3;
        assert!(t.dense.len() <= DENSE_BASE);
        let got: Vec<(u32, u64)> = t.iter().filter(|e| *e.1 > 0).map(|(i, v)| (i, *v)).collect();
        assert_eq!(got, vec![(7, 2), (1 << 22, 3), (u32::MAX, 1)]);
        assert_eq!(t.get(u32::MAX), Some(&1));
    }

    #[test]
    fn an_id_moves_from_the_map_into_the_vector_when_the_bound_grows() {
        let mut t: IdTable<u64> = IdTable::default();
        let id = DENSE_BASE as u32 + 10;
        *t.entry(id) = 5;
        for _ in 0..20 {
            t.defined();
        }
        *t.entry(id) += 1;
        assert_eq!(t.get(id), Some(&6));
        assert_eq!(t.iter().filter(|e| *e.1 > 0).count(), 1);
    }
}
