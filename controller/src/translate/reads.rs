//! The lookups translating a part makes, recorded so that the part is translated again
//! when one of the objects it read changes.

use std::cell::RefCell;

use crate::changes::Read;

/// Records the objects looked up while it is on.
#[derive(Debug, Default)]
pub(super) struct Recorder(RefCell<Option<Vec<Read>>>);

impl Recorder {
    /// Records the lookup `read` makes, when recording.
    pub(super) fn read(&self, read: impl FnOnce() -> Read) {
        if let Some(reads) = self.0.borrow_mut().as_mut() {
            reads.push(read());
        }
    }

    pub(super) fn start(&self) {
        *self.0.borrow_mut() = Some(Vec::new());
    }

    pub(super) fn stop(&self) -> Vec<Read> {
        self.0.borrow_mut().take().unwrap_or_default()
    }
}
