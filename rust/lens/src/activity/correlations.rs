//! A bounded table keyed by correlation id, for the launch join. MSPTI numbers API calls with one
//! process-wide counter, so the ids the join sees are nearly dense and increasing: a slot per id
//! modulo a power of two finds an entry with one indexed load and a compare, where a hash map
//! hashed every id several times per launch and kept a second queue to bound itself. An id
//! takes the slot of the id `capacity` before it: the table keeps the last `capacity` ids' entries,
//! as the queue kept the last `capacity` entries (more, where ids are skipped: API calls that
//! are not launches also take ids), and says which entry it replaced.

pub struct ByCorrelation<T> {
    /// Allocated on the first insert (a collector whose join never runs holds nothing).
    slots: Vec<Option<(u64, T)>>,
    capacity: usize,
}

impl<T: Copy> ByCorrelation<T> {
    /// `capacity`: a power of two.
    pub fn new(capacity: usize) -> ByCorrelation<T> {
        assert!(capacity.is_power_of_two(), "a correlation table's capacity is a power of two");
        ByCorrelation { slots: Vec::new(), capacity }
    }

    #[inline]
    fn slot(&self, id: u64) -> usize {
        // Truncation is the point: the low bits of the id pick the slot.
        (id as usize) & (self.capacity - 1)
    }

    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let i = self.slot(id);
        match self.slots.get_mut(i) {
            Some(Some((k, v))) if *k == id => Some(v),
            _ => None,
        }
    }

    /// The slot of `id`: it holds `id`'s entry, another id's, or nothing (for a caller that
    /// looks and then writes with one lookup).
    #[inline]
    pub fn slot_mut(&mut self, id: u64) -> &mut Option<(u64, T)> {
        if self.slots.is_empty() {
            self.slots.resize(self.capacity, None);
        }
        let i = self.slot(id);
        &mut self.slots[i]
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|s| s.as_mut().map(|(_, v)| v))
    }
}

#[cfg(test)]
mod tests {
    use super::ByCorrelation;

    #[test]
    fn an_id_finds_its_entry_and_takes_the_slot_of_the_id_capacity_before_it() {
        let mut t = ByCorrelation::new(8);
        assert_eq!(t.get_mut(3), None);
        for id in 1..=8u64 {
            assert_eq!(t.slot_mut(id).replace((id, id * 10)), None);
        }
        assert_eq!(t.get_mut(3), Some(&mut 30));
        // Id 11 maps to id 3's slot: the slot says who holds it, and 3 is gone once 11 takes it.
        assert_eq!(*t.slot_mut(11), Some((3, 30)));
        assert_eq!(t.get_mut(11), None, "the slot's id is checked");
        t.slot_mut(11).replace((11, 110));
        assert_eq!(t.get_mut(3), None);
        assert_eq!(t.get_mut(11), Some(&mut 110));
        *t.get_mut(11).unwrap() += 1;
        assert_eq!(t.get_mut(11), Some(&mut 111));
        assert_eq!(t.get_mut(19), None);
        assert_eq!(t.values_mut().count(), 8);
    }
}
