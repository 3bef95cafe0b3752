//! Recording off the response path: finished steps and decision events go through a bounded
//! queue to one thread that masks them for storage and appends them to the lake writer, so a
//! keep-alive connection is free for its next request as soon as the reply is sent.
//!
//! Nothing is dropped: when the queue is full (or the thread is gone) the job is done on the
//! caller's thread instead, which slows that caller down rather than losing the record. The
//! order of one call's records (its decision event, then its step) is kept because both go
//! through the same queue.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use atdp_schema::AuditEvent;

use crate::record::{StepEnd, StepStart};
use crate::state::State;
use crate::wire::RequestView;

/// Jobs waiting at most.
const QUEUE: usize = 16_384;

/// Something to record.
pub enum Job {
    /// A finished call.
    Step(Box<(StepStart, RequestView, StepEnd)>),
    /// A decision event.
    Audit(Box<AuditEvent>),
    /// Answers once every job sent before it is done.
    Barrier(SyncSender<()>),
}

/// The sending side, held by the state.
#[derive(Debug)]
pub struct Recorder {
    tx: SyncSender<Job>,
}

/// A new queue and its receiving end (for [`run`]).
pub fn channel() -> (Recorder, Receiver<Job>) {
    let (tx, rx) = sync_channel(QUEUE);
    (Recorder { tx }, rx)
}

/// Does one job now.
fn perform(state: &State, job: Job) {
    match job {
        Job::Step(step) => {
            let (start, request, end) = *step;
            crate::pump::store_step(state, &start, &request, end);
        }
        Job::Audit(event) => {
            if let Err(error) = state.writer.append_audit(*event) {
                state
                    .metrics
                    .record_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!(error = %error, "Could not record an audit event.");
            }
        }
        Job::Barrier(done) => {
            let _ = done.send(());
        }
    }
}

/// The recording thread's loop; ends when every sender is gone.
pub fn run(state: Arc<State>, rx: Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        perform(&state, job);
    }
}

impl Recorder {
    /// Queues a job, or does it on this thread when the queue is full.
    pub fn submit(&self, state: &State, job: Job) {
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => perform(state, job),
        }
    }

    /// Waits until everything queued so far is recorded (before the writer is shut down).
    pub fn drain(&self) {
        let (done, wait) = sync_channel(1);
        if self.tx.send(Job::Barrier(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}
