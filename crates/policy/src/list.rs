//! Intrusive doubly linked lists over dense `u32` indices.
//!
//! The engine keeps several recency orders (idle instances, each function's idle
//! instances, disk and network snapshots). Storing the links in flat vectors keeps
//! every move O(1) without allocation, which is what lets the simulator replay
//! millions of invocations per second.

pub(crate) const NIL: u32 = u32::MAX;

/// One list: `head` is the most recently pushed element, `tail` the oldest.
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    pub head: u32,
    pub tail: u32,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
        }
    }
}

impl List {
    pub fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }
    pub fn back(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }
}

/// Link storage shared by any number of lists whose elements are disjoint.
#[derive(Default, Debug)]
pub(crate) struct Links {
    prev: Vec<u32>,
    next: Vec<u32>,
}

impl Links {
    pub fn ensure(&mut self, n: usize) {
        if self.prev.len() < n {
            self.prev.resize(n, NIL);
            self.next.resize(n, NIL);
        }
    }

    pub fn push_front(&mut self, l: &mut List, i: u32) {
        let iu = i as usize;
        self.prev[iu] = NIL;
        self.next[iu] = l.head;
        if l.head != NIL {
            self.prev[l.head as usize] = i;
        } else {
            l.tail = i;
        }
        l.head = i;
    }

    pub fn remove(&mut self, l: &mut List, i: u32) {
        let iu = i as usize;
        let (p, n) = (self.prev[iu], self.next[iu]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            l.head = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        } else {
            l.tail = p;
        }
        self.prev[iu] = NIL;
        self.next[iu] = NIL;
    }

    /// Moves `i` (already in `l`) to the front: a "touch" in LRU terms.
    pub fn touch(&mut self, l: &mut List, i: u32) {
        if l.head != i {
            self.remove(l, i);
            self.push_front(l, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(links: &Links, l: &List) -> Vec<u32> {
        let mut v = vec![];
        let mut i = l.head;
        while i != NIL {
            v.push(i);
            i = links.next[i as usize];
        }
        v
    }

    #[test]
    fn push_remove_touch_keep_order() {
        let mut links = Links::default();
        links.ensure(4);
        let mut l = List::default();
        for i in 0..4 {
            links.push_front(&mut l, i);
        }
        assert_eq!(collect(&links, &l), vec![3, 2, 1, 0]);
        links.touch(&mut l, 0);
        assert_eq!(collect(&links, &l), vec![0, 3, 2, 1]);
        links.remove(&mut l, 2);
        assert_eq!(collect(&links, &l), vec![0, 3, 1]);
        assert_eq!(l.back(), Some(1));
        links.remove(&mut l, 1);
        links.remove(&mut l, 0);
        links.remove(&mut l, 3);
        assert_eq!(l.front(), None);
        assert_eq!(l.back(), None);
    }
}
