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
/// An element's two links sit side by side: one cache line per element touched.
#[derive(Default, Debug)]
pub(crate) struct Links {
    /// (prev, next) per element.
    links: Vec<[u32; 2]>,
}

const PREV: usize = 0;
const NEXT: usize = 1;

impl Links {
    pub fn ensure(&mut self, n: usize) {
        if self.links.len() < n {
            self.links.resize(n, [NIL, NIL]);
        }
    }

    pub fn push_front(&mut self, l: &mut List, i: u32) {
        self.links[i as usize] = [NIL, l.head];
        if l.head != NIL {
            self.links[l.head as usize][PREV] = i;
        } else {
            l.tail = i;
        }
        l.head = i;
    }

    pub fn remove(&mut self, l: &mut List, i: u32) {
        let [p, n] = self.links[i as usize];
        if p != NIL {
            self.links[p as usize][NEXT] = n;
        } else {
            l.head = n;
        }
        if n != NIL {
            self.links[n as usize][PREV] = p;
        } else {
            l.tail = p;
        }
        self.links[i as usize] = [NIL, NIL];
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
            i = links.links[i as usize][NEXT];
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
