//! Which module (executable or shared library) an address falls in: a
//! binary search over the header's module map, so naming every frame of a
//! log costs frames x log(modules), not frames x modules (a hostile header
//! may list 65,536 modules).

use heaptag_format::Module;

/// The module map sorted by start address. Where modules overlap (only in
/// damaged or hostile headers) the one with the lowest start wins, then the
/// shortest, then the first listed.
#[derive(Debug, Default, Clone)]
pub struct ModuleIndex {
    /// (start, end, index in the header's list), sorted, one per start.
    order: Vec<(u64, u64, usize)>,
}

impl ModuleIndex {
    /// Indexes `modules`.
    pub fn new(modules: &[Module]) -> ModuleIndex {
        let mut order: Vec<(u64, u64, usize)> = modules
            .iter()
            .enumerate()
            .map(|(i, md)| (md.start, md.end, i))
            .collect();
        order.sort_unstable();
        order.dedup_by_key(|e| e.0);
        ModuleIndex { order }
    }

    /// The index (in the header's list) of the module holding `addr`.
    pub fn find(&self, addr: u64) -> Option<usize> {
        let i = self.order.partition_point(|e| e.0 <= addr);
        let &(_, end, idx) = self.order.get(i.checked_sub(1)?)?;
        (addr < end).then_some(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(start: u64, end: u64) -> Module {
        Module {
            start,
            end,
            ..Module::default()
        }
    }

    #[test]
    fn finds_the_module_holding_an_address_and_nothing_between() {
        let idx = ModuleIndex::new(&[md(0x3000, 0x4000), md(0x1000, 0x2000)]);
        assert_eq!(idx.find(0x0fff), None);
        assert_eq!(idx.find(0x1000), Some(1));
        assert_eq!(idx.find(0x1fff), Some(1));
        assert_eq!(idx.find(0x2000), None);
        assert_eq!(idx.find(0x3abc), Some(0));
        assert_eq!(idx.find(0x4000), None);
        assert_eq!(ModuleIndex::new(&[]).find(5), None);
    }
}
