//! A segment tree over `len` slots holding `f64` values (`-inf` until set): add a value to a
//! range of slots, set one slot, and read the largest value with its leftmost slot, each in
//! O(log len). [`rate_history::gcra_excess`](super::rate_history::gcra_excess) walks a
//! history with it.

/// See the module doc.
pub(crate) struct MaxTree {
    len: usize,
    /// Per node: the largest value below it (its pending adds included) and its leftmost slot.
    max: Vec<f64>,
    arg: Vec<usize>,
    /// Per node: an add not yet pushed to its children.
    pending: Vec<f64>,
}

impl MaxTree {
    /// `len` slots, each `-inf`.
    pub(crate) fn new(len: usize) -> MaxTree {
        let nodes = 4 * len.max(1);
        let mut t = MaxTree {
            len: len.max(1),
            max: vec![f64::NEG_INFINITY; nodes],
            arg: vec![0; nodes],
            pending: vec![0.0; nodes],
        };
        t.build(1, 0, t.len);
        t
    }

    fn build(&mut self, node: usize, lo: usize, hi: usize) {
        self.arg[node] = lo;
        if hi - lo > 1 {
            let mid = (lo + hi) / 2;
            self.build(2 * node, lo, mid);
            self.build(2 * node + 1, mid, hi);
        }
    }

    /// The largest value and its leftmost slot.
    pub(crate) fn max(&self) -> (f64, usize) {
        (self.max[1], self.arg[1])
    }

    /// Adds `v` to every slot in `from..to` (`-inf` stays `-inf`).
    pub(crate) fn add(&mut self, from: usize, to: usize, v: f64) {
        if from < to.min(self.len) {
            self.add_in(1, 0, self.len, (from, to.min(self.len)), v);
        }
    }

    /// Sets slot `at` to `v`.
    pub(crate) fn set(&mut self, at: usize, v: f64) {
        if at < self.len {
            self.set_in(1, 0, self.len, at, v);
        }
    }

    fn apply(&mut self, node: usize, v: f64) {
        self.max[node] += v;
        self.pending[node] += v;
    }

    fn push(&mut self, node: usize) {
        let v = std::mem::take(&mut self.pending[node]);
        if v != 0.0 {
            self.apply(2 * node, v);
            self.apply(2 * node + 1, v);
        }
    }

    fn pull(&mut self, node: usize) {
        let (l, r) = (2 * node, 2 * node + 1);
        // Ties go left: the leftmost slot of the largest value.
        let best = if self.max[l] >= self.max[r] { l } else { r };
        self.max[node] = self.max[best];
        self.arg[node] = self.arg[best];
    }

    fn add_in(&mut self, node: usize, lo: usize, hi: usize, (from, to): (usize, usize), v: f64) {
        if to <= lo || hi <= from {
            return;
        }
        if from <= lo && hi <= to {
            self.apply(node, v);
            return;
        }
        self.push(node);
        let mid = (lo + hi) / 2;
        self.add_in(2 * node, lo, mid, (from, to), v);
        self.add_in(2 * node + 1, mid, hi, (from, to), v);
        self.pull(node);
    }

    fn set_in(&mut self, node: usize, lo: usize, hi: usize, at: usize, v: f64) {
        if hi - lo == 1 {
            self.max[node] = v;
            self.pending[node] = 0.0;
            return;
        }
        self.push(node);
        let mid = (lo + hi) / 2;
        if at < mid {
            self.set_in(2 * node, lo, mid, at, v);
        } else {
            self.set_in(2 * node + 1, mid, hi, at, v);
        }
        self.pull(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_and_sets_agree_with_a_plain_array() {
        let mut rng = fastrand::Rng::with_seed(7);
        for len in [1, 2, 3, 7, 64, 100] {
            let mut tree = MaxTree::new(len);
            let mut plain = vec![f64::NEG_INFINITY; len];
            for _ in 0..500 {
                if rng.bool() {
                    let at = rng.usize(..len);
                    let v = f64::from(rng.i32(-100..100));
                    tree.set(at, v);
                    plain[at] = v;
                } else {
                    let from = rng.usize(..len);
                    let to = rng.usize(from..=len);
                    let v = f64::from(rng.i32(-5..5));
                    tree.add(from, to, v);
                    plain[from..to].iter_mut().for_each(|p| *p += v);
                }
                let best = plain.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let (max, at) = tree.max();
                assert_eq!(max, best);
                if best > f64::NEG_INFINITY {
                    let first = plain.iter().position(|&p| p == best).unwrap();
                    assert_eq!(at, first, "{plain:?}");
                }
            }
        }
    }
}
