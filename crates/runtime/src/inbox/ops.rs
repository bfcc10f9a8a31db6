//! The inbox changes an activation has not written yet (`Dirty::inbox`),
//! kept so that a batch never names one seq twice.

use troupe_storage::{InboxEntry, InboxOp};

use crate::activation::Inner;

/// Records `op` among the actor's unwritten changes; an append not yet
/// written and its removal cancel out (the batch never names a seq twice).
pub(super) fn push_op(inner: &mut Inner, op: InboxOp) -> usize {
    let dirty = inner.dirty.get_or_insert_with(Default::default);
    let seq = match &op {
        InboxOp::Append(e) => return push_append(&mut dirty.inbox, e.clone()),
        InboxOp::Remove { seq } => *seq,
        InboxOp::DeadLetter(d) => d.key.seq,
    };
    let appended = dirty
        .inbox
        .iter()
        .position(|o| matches!(o, InboxOp::Append(e) if e.seq == seq));
    match (appended, op) {
        (Some(i), InboxOp::Remove { .. }) => {
            dirty.inbox.remove(i);
        }
        (Some(i), op) => dirty.inbox[i] = op,
        (None, op) => dirty.inbox.push(op),
    }
    0
}

fn push_append(ops: &mut Vec<InboxOp>, entry: InboxEntry) -> usize {
    let bytes = entry.data.len();
    ops.push(InboxOp::Append(entry));
    bytes
}

/// Puts the inbox ops of a failed write back before the ones recorded
/// since. An append the failed write carried that was removed or
/// dead-lettered since is dropped (the later op is idempotent whether or not
/// the failed write landed), so no batch names a seq twice.
pub(crate) fn restore_ops(current: &mut Vec<InboxOp>, failed: Vec<InboxOp>) {
    let later = std::mem::take(current);
    let superseded = |seq: u64| {
        later.iter().any(|o| match o {
            InboxOp::Remove { seq: s } => *s == seq,
            InboxOp::DeadLetter(d) => d.key.seq == seq,
            InboxOp::Append(_) => false,
        })
    };
    current.extend(
        failed
            .into_iter()
            .filter(|op| !matches!(op, InboxOp::Append(e) if superseded(e.seq))),
    );
    current.extend(later);
}
