//! Failures of the cache's background threads (the flushers, the readahead loader). A panic in
//! one is caught where the thread runs its loop, recorded here, said in the log, and returned
//! as an error by the next sync (`File::sync_data`, `File::sync_all`, `Cache::sync`); the
//! thread then runs its loop again, so background write-back never stops silently.

use crate::error::{Error, ErrorKind, Result};
use crate::sync::{self, Mutex};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The panics of background threads not yet reported to a sync.
#[derive(Default)]
pub(crate) struct BackgroundFailures {
    first: Mutex<Option<String>>,
}

impl BackgroundFailures {
    /// Runs `body` (a thread's loop, which returns when the cache stops) until it returns,
    /// recording each panic of it (`what` names the thread) and running it again.
    pub(crate) fn keep_running(&self, what: &str, mut body: impl FnMut()) {
        while let Err(panic) = catch_unwind(AssertUnwindSafe(&mut body)) {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            log::error!("the {what} thread panicked ({why}); it runs again");
            sync::lock(&self.first).get_or_insert_with(|| format!("the {what} thread panicked: {why}"));
        }
    }

    /// The first panic not yet reported, as an error; each is reported once.
    pub(crate) fn take(&self) -> Option<Error> {
        sync::lock(&self.first).take().map(|why| Error::new(ErrorKind::Internal, why))
    }

    /// `result`, or the first unreported panic if `result` is Ok.
    pub(crate) fn after(&self, result: Result<()>) -> Result<()> {
        result?;
        self.take().map_or(Ok(()), Err)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_recorded_once_and_the_loop_runs_again() {
        let failures = BackgroundFailures::default();
        let mut runs = 0;
        failures.keep_running("test", || {
            runs += 1;
            if runs < 3 {
                panic!("run {runs} failed");
            }
        });
        assert_eq!(runs, 3, "ran again after each panic, until it returned");
        let e = failures.after(Ok(())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal);
        assert!(e.to_string().contains("the test thread panicked: run 1 failed"), "{e}");
        assert!(failures.after(Ok(())).is_ok(), "reported once");
        let mut once = true;
        failures.keep_running("test", || {
            if std::mem::take(&mut once) {
                panic!("again")
            }
        });
        let e = failures.after(Err(Error::new(ErrorKind::Io, "the sync's own"))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io, "the sync's own error first");
        assert!(failures.take().is_some(), "the panic is kept for the next one");
    }
}
