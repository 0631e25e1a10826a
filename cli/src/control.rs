//! The control thread: everything that is not serving traffic — watching the API server
//! or the files, translating, compiling configs, ACME orders — runs on a thread of its own
//! with a single-threaded runtime. A rebuild of 10,000 Ingresses then takes that thread,
//! never a data-plane worker, and requests keep being answered while it runs.

use std::future::Future;

use anyhow::Context;
use tokio::sync::oneshot;

/// Resolves when the control thread is asked to finish.
pub type Stop = oneshot::Receiver<()>;

/// The running control thread.
#[derive(Debug)]
pub struct Control {
    stop: oneshot::Sender<()>,
    ended: oneshot::Receiver<anyhow::Result<()>>,
}

impl Control {
    /// Starts the thread and runs the future `make` returns on it until that future ends.
    /// The future is handed a [`Stop`] to wait on; what it spawns runs on the same thread
    /// and is cancelled when it ends.
    pub fn spawn<F, Fut>(make: F) -> anyhow::Result<Control>
    where
        F: FnOnce(Stop) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let (stop, stop_rx) = oneshot::channel();
        let (ended_tx, ended) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the control thread's runtime")?;
        std::thread::Builder::new()
            .name("wharf-control".into())
            .spawn(move || {
                let result = runtime.block_on(make(stop_rx));
                let _ = ended_tx.send(result);
            })
            .context("cannot start the control thread")?;
        Ok(Control { stop, ended })
    }

    /// Waits until the control thread ends by itself: only on an error (a kubeconfig that
    /// cannot be used, say), which it returns.
    pub async fn failed(&mut self) -> anyhow::Error {
        match (&mut self.ended).await {
            Ok(Err(e)) => e,
            Ok(Ok(())) => anyhow::anyhow!("the control thread ended"),
            Err(_) => anyhow::anyhow!("the control thread stopped unexpectedly"),
        }
    }

    /// Asks the control thread to finish and waits until it has.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.ended.await.unwrap_or_else(|_| Err(anyhow::anyhow!("the control thread stopped unexpectedly")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn the_control_future_runs_on_its_own_thread_until_stopped() {
        let caller = std::thread::current().id();
        let (tx, rx) = oneshot::channel();
        let control = Control::spawn(move |stop| async move {
            let _ = tx.send((std::thread::current().id(), std::thread::current().name().map(str::to_owned)));
            let _ = stop.await;
            Ok(())
        })
        .unwrap();
        let (id, name) = rx.await.unwrap();
        assert_ne!(id, caller);
        assert_eq!(name.as_deref(), Some("wharf-control"));
        control.stop().await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_error_of_the_control_future_is_returned_by_failed() {
        let mut control = Control::spawn(|_stop| async { Err(anyhow::anyhow!("no kubeconfig")) }).unwrap();
        assert_eq!(control.failed().await.to_string(), "no kubeconfig");
    }
}
