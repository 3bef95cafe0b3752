//! Recording off the response path: finished steps and decision events go through a bounded
//! queue to one thread that masks them for storage and appends them to the lake writer, so a
//! keep-alive connection is free for its next request as soon as the reply is sent.
//!
//! Nothing is dropped: when the queue is full (by count, or by the bytes of text it holds) the
//! caller waits for room, which slows it down rather than losing the record, and keeps the
//! order; when the thread is gone the job is done on the caller's thread. A panic while
//! recording one step is caught and counted; the thread goes on. A call's decision event is
//! queued before the call is forwarded and its step after it ends, so the log has them in
//! that order. (Appending decision events on the request path instead was measured: the
//! write-ahead log's lock, shared with the recording thread, tripled the p99 at 2,000
//! calls/s.)

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use atdp_schema::AuditEvent;

use crate::record::{StepEnd, StepStart};
use crate::state::State;
use crate::wire::RequestView;

/// Jobs waiting at most.
const QUEUE: usize = 4_096;
/// Bytes of conversation text waiting at most (requests can be 8 MiB, replies larger).
const QUEUE_BYTES: usize = 256 << 20;
/// While calls keep coming the thread looks for jobs this often instead of sleeping on the
/// queue: a job sent to a sleeping thread costs the sender a wake-up system call on the
/// response path (measured: 6% of the proxy threads' time at 2,000 calls/s).
const POLL: Duration = Duration::from_millis(1);
/// After this long without a job the thread sleeps on the queue until the next one.
const IDLE: Duration = Duration::from_millis(50);

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
    /// Text bytes of the queued steps.
    queued: Arc<AtomicUsize>,
}

/// The receiving side, for [`run`].
pub struct Jobs {
    rx: Receiver<Job>,
    queued: Arc<AtomicUsize>,
}

/// A new queue.
pub fn channel() -> (Recorder, Jobs) {
    let (tx, rx) = sync_channel(QUEUE);
    let queued = Arc::new(AtomicUsize::new(0));
    (
        Recorder {
            tx,
            queued: queued.clone(),
        },
        Jobs { rx, queued },
    )
}

/// About how many bytes of text a job holds.
fn size(job: &Job) -> usize {
    let Job::Step(step) = job else { return 0 };
    let (_, request, end) = &**step;
    let message = |m: &atdp_schema::Message| {
        m.content.as_ref().map_or(0, String::len)
            + m.tool_calls
                .iter()
                .map(|c| c.arguments.len())
                .sum::<usize>()
    };
    request.messages.iter().map(message).sum::<usize>()
        + end
            .response
            .as_ref()
            .and_then(|r| r.message.as_ref())
            .map_or(0, message)
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
                state.metrics.record_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %error, "Could not record an audit event.");
            }
        }
        Job::Barrier(done) => {
            let _ = done.send(());
        }
    }
}

/// The next job: polled every [`POLL`] while busy, waited for once idle; `None` once every
/// sender is gone.
fn next(jobs: &Jobs, idle_since: &mut Option<Instant>) -> Option<Job> {
    loop {
        match jobs.rx.try_recv() {
            Ok(job) => {
                *idle_since = None;
                return Some(job);
            }
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {
                if idle_since.get_or_insert_with(Instant::now).elapsed() < IDLE {
                    std::thread::sleep(POLL);
                } else {
                    *idle_since = None;
                    return jobs.rx.recv().ok();
                }
            }
        }
    }
}

/// The recording thread's loop; ends when every sender is gone or the state is.
pub fn run(state: Weak<State>, jobs: Jobs) {
    let mut idle_since = None;
    while let Some(job) = next(&jobs, &mut idle_since) {
        jobs.queued.fetch_sub(size(&job), Ordering::SeqCst);
        let Some(state) = state.upgrade() else { break };
        if catch_unwind(AssertUnwindSafe(|| perform(&state, job))).is_err() {
            state.metrics.record_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!("Recording a call panicked; it is not recorded, recording goes on.");
        }
    }
}

impl Recorder {
    /// Queues a job, waiting for room when the queue is full; does it on this thread when
    /// the recording thread is gone.
    pub fn submit(&self, state: &State, job: Job) {
        let bytes = size(&job);
        // Over the byte budget: wait for the thread to catch up (a rare, short wait).
        while bytes > 0 && self.queued.load(Ordering::SeqCst) + bytes > QUEUE_BYTES {
            if self.queued.load(Ordering::SeqCst) == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.queued.fetch_add(bytes, Ordering::SeqCst);
        let job = match self.tx.try_send(job) {
            Ok(()) => return,
            Err(TrySendError::Full(job)) => match self.tx.send(job) {
                Ok(()) => return,
                Err(error) => error.0,
            },
            Err(TrySendError::Disconnected(job)) => job,
        };
        self.queued.fetch_sub(bytes, Ordering::SeqCst);
        perform(state, job);
    }

    /// Waits until everything queued so far is recorded (before the writer is shut down).
    pub fn drain(&self) {
        let (done, wait) = sync_channel(1);
        if self.tx.send(Job::Barrier(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}
