//! The graph as one scan leaves it (inputs, users in fx order, graph order, the integer args
//! the rules read), what the table says of each node's class, and the fx edits the model
//! mirrors (`_update_args_kwargs`, erase, insert).

use super::*;

/// The graph as the scan has left it so far. Node ids are table positions; nodes a fork split
/// creates get the next ids.
pub(super) struct Model<'a> {
    pub(super) target_class: &'a [u32],
    pub(super) target_extra: &'a [u32],
    pub(super) cfg: Config,
    pub(super) op: Vec<u8>,
    pub(super) target: Vec<i32>,
    /// `meta["val"]` shape, None when it is not a tensor.
    pub(super) shapes: Vec<Option<Vec<i64>>>,
    pub(super) special: Vec<i32>,
    pub(super) inputs: Vec<Vec<usize>>,
    pub(super) users: Vec<Vec<usize>>,
    pub(super) iargs: Vec<Vec<i64>>,
    pub(super) form: Vec<u32>,
    pub(super) stale: Vec<bool>,
    pub(super) edits: Vec<Edit>,
    /// [`retrace`] bits per node (impure for the DCE, value kept by `ArmPass`).
    pub(super) retrace_bits: Vec<u8>,
    /// Erased from the graph (by an edit or the DCE).
    pub(super) erased: Vec<bool>,
    /// Args or value written by this scan's edits: what a re-trace recomputes first.
    pub(super) touched: Vec<bool>,
    /// Graph order as a linked list ([`NIL`] ends it).
    pub(super) prev: Vec<usize>,
    pub(super) next: Vec<usize>,
    pub(super) head: usize,
    pub(super) tail: usize,
}

pub(super) const NIL: usize = usize::MAX;

impl<'a> Model<'a> {
    /// The model of the exported graph; `retrace_bits` None: placeholders and the output are
    /// the only impure nodes (enough for one scan, which never runs the DCE).
    pub(super) fn new(inp: &ScanInput<'a>, cfg: Config, retrace_bits: Option<&[u8]>) -> Self {
        let t = inp.table;
        let n = t.len();
        let retrace_bits = match retrace_bits {
            Some(bits) => bits.to_vec(),
            None => (0..n)
                .map(|i| match t.op[i] {
                    op::PLACEHOLDER | op::OUTPUT => retrace::IMPURE,
                    _ => 0,
                })
                .collect(),
        };
        Model {
            target_class: t.target_class,
            target_extra: inp.target_extra,
            cfg,
            op: t.op.to_vec(),
            target: t.target.to_vec(),
            shapes: (0..n)
                .map(|i| (t.rank[i] >= 0).then(|| t.shape_row(i).to_vec()))
                .collect(),
            special: inp.special.to_vec(),
            inputs: (0..n)
                .map(|i| t.inputs(i).iter().map(|&j| j as usize).collect())
                .collect(),
            users: (0..n)
                .map(|i| t.users(i).iter().map(|&j| j as usize).collect())
                .collect(),
            iargs: (0..n).map(|i| t.iargs(i).to_vec()).collect(),
            // Opaque args are as unmodelled as an inexact form.
            form: (0..n)
                .map(|i| {
                    if t.has_flag(i, flag::OPAQUE_ARGS) {
                        inp.form[i] & !form::EXACT
                    } else {
                        inp.form[i]
                    }
                })
                .collect(),
            stale: vec![false; n],
            edits: Vec::new(),
            retrace_bits,
            erased: vec![false; n],
            touched: vec![false; n],
            prev: (0..n).map(|i| i.checked_sub(1).unwrap_or(NIL)).collect(),
            next: (0..n)
                .map(|i| if i + 1 < n { i + 1 } else { NIL })
                .collect(),
            head: if n > 0 { 0 } else { NIL },
            tail: n.checked_sub(1).unwrap_or(NIL),
        }
    }

    /// One stock scan over the graph as it is now: `for node in list(graph.nodes)`, skipping
    /// stale nodes and nodes without users; whether any walk modified the graph.
    pub(super) fn scan(&mut self) -> Step<bool> {
        let mut modified = false;
        for i in self.order() {
            if self.stale[i] || !self.is_scan_target(i) || self.users[i].is_empty() {
                continue;
            }
            if self.propagate(i)? {
                modified = true;
            }
        }
        Ok(modified)
    }
}

impl Model<'_> {
    // -- classes ---------------------------------------------------------------------------

    pub(super) fn cls(&self, i: usize) -> u32 {
        match self.target[i] {
            c if c < 0 => 0,
            c => self.target_class[c as usize],
        }
    }

    pub(super) fn extra(&self, i: usize) -> u32 {
        match self.target[i] {
            c if c < 0 => 0,
            c => self.target_extra[c as usize],
        }
    }

    pub(super) fn is_call(&self, i: usize) -> bool {
        self.op[i] == op::CALL_FUNCTION
    }

    pub(super) fn is_scan_target(&self, i: usize) -> bool {
        self.extra(i) & extra::SCAN_TARGET != 0
    }

    pub(super) fn is_permute(&self, i: usize) -> bool {
        self.cls(i) & class::PERMUTE != 0
    }

    pub(super) fn has(&self, i: usize, c: u32) -> bool {
        self.cls(i) & c != 0
    }

    pub(super) fn tosa_has(&self, i: usize, c: u32) -> bool {
        self.cfg.tosa && self.has(i, c)
    }

    pub(super) fn shape(&self, i: usize) -> Option<&[i64]> {
        self.shapes[i].as_deref()
    }

    pub(super) fn exact(&self, i: usize) -> Step<()> {
        if self.form[i] & form::EXACT == 0 {
            return decline("args form not modelled", i);
        }
        Ok(())
    }

    // -- edits on the model ----------------------------------------------------------------

    /// fx's `_update_args_kwargs`: the node leaves every input's users and is re-added at the
    /// end of each new input's users, inputs in first-appearance order.
    pub(super) fn set_inputs(&mut self, x: usize, new_inputs: Vec<usize>) {
        for &i in &self.inputs[x] {
            self.users[i].retain(|&u| u != x);
        }
        let mut deduped: Vec<usize> = Vec::with_capacity(new_inputs.len());
        for i in new_inputs {
            if !deduped.contains(&i) {
                deduped.push(i);
            }
        }
        for &i in &deduped {
            if !self.users[i].contains(&x) {
                self.users[i].push(x);
            }
        }
        self.inputs[x] = deduped;
        self.touched[x] = true;
    }

    /// `graph.erase_node(x)` of a node without users.
    pub(super) fn erase(&mut self, x: usize) {
        self.set_inputs(x, Vec::new());
        self.unlink(x);
        self.erased[x] = true;
    }

    // -- graph order -----------------------------------------------------------------------

    pub(super) fn order(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut i = self.head;
        while i != NIL {
            out.push(i);
            i = self.next[i];
        }
        out
    }

    pub(super) fn unlink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n] = p;
        }
        self.prev[x] = NIL;
        self.next[x] = NIL;
    }

    /// fx's `anchor.append(x)`: x (moved if linked) right after anchor.
    pub(super) fn insert_after(&mut self, x: usize, anchor: usize) {
        if x != anchor {
            self.unlink_if_linked(x);
            self.splice(x, anchor, self.next[anchor]);
        }
    }

    /// fx's `anchor.prepend(x)`: x (moved if linked) right before anchor.
    pub(super) fn insert_before(&mut self, x: usize, anchor: usize) {
        if x != anchor {
            self.unlink_if_linked(x);
            self.splice(x, self.prev[anchor], anchor);
        }
    }

    pub(super) fn unlink_if_linked(&mut self, x: usize) {
        if self.prev[x] != NIL || self.head == x {
            self.unlink(x);
        }
    }

    /// Links the unlinked `x` between neighbours `p` and `n` ([`NIL`] at an end).
    pub(super) fn splice(&mut self, x: usize, p: usize, n: usize) {
        self.prev[x] = p;
        self.next[x] = n;
        if p == NIL {
            self.head = x;
        } else {
            self.next[p] = x;
        }
        if n == NIL {
            self.tail = x;
        } else {
            self.prev[n] = x;
        }
    }

    pub(super) fn touch_args(&mut self, x: usize) {
        let same = self.inputs[x].clone();
        self.set_inputs(x, same);
    }

    pub(super) fn replace_input_with(&mut self, x: usize, old: usize, new: usize) {
        let mapped = self.inputs[x]
            .iter()
            .map(|&i| if i == old { new } else { i })
            .collect();
        self.set_inputs(x, mapped);
    }

    pub(super) fn mark_stale(&mut self, path: &[usize]) {
        let mut pending: Vec<usize> = path.to_vec();
        while let Some(cur) = pending.pop() {
            if self.stale[cur] {
                continue;
            }
            self.stale[cur] = true;
            pending.extend(self.users[cur].iter().copied());
        }
    }
}
