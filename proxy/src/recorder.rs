//! Recording off the response path: finished steps and decision events go through a queue
//! to one thread that masks them for storage and appends them to the lake writer, so a
//! keep-alive connection is free for its next request as soon as the reply is sent.
//!
//! The queue is bounded by the bytes of the whole jobs it holds (every variable-length field
//! of a step: messages, tool calls, tools, parameters, the reply, token ids), not by their
//! number alone. A caller waits for room asynchronously: its task yields, the Pingora worker
//! thread serves other connections, and nothing is dropped. Order is kept (the semaphore is
//! fair). While the queue is nearly full the proxy answers new calls as under lake
//! back-pressure (`on_backpressure`). When the thread is gone the job is done on the caller's
//! thread. A panic while recording one job is caught and counted; the thread goes on. A
//! call's decision event is queued before the call is forwarded and its step after it ends,
//! so the log has them in that order.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel as unbounded};
use std::time::{Duration, Instant};

use atdp_schema::AuditEvent;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::stages::record::{StepEnd, StepStart};
use crate::wire::RequestView;

/// Bytes the queued jobs may hold at most, in [`UNIT`]s: 256 MiB.
const QUEUE_UNITS: usize = 256 << 10;
/// The unit the queue counts in: 1 KiB. Every job takes at least one, so the count of jobs is
/// bounded too.
const UNIT: usize = 1 << 10;
/// What a job holds besides its variable-length fields (ids, times, names), about.
const FIXED_BYTES: usize = 512;
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
    Barrier(oneshot::Sender<()>),
}

/// What does the jobs: the proxy's state, seen from here only through this trait.
pub trait Sink: Send + Sync {
    /// Records one job (on the recording thread).
    fn perform(&self, job: Job);
}

/// A queued job and the room it holds in the queue until it is done.
type Queued = (Job, Option<OwnedSemaphorePermit>);

/// The sending side, held by the state.
#[derive(Debug)]
pub struct Recorder {
    tx: Sender<Queued>,
    room: Arc<Semaphore>,
    /// The queue's size in units.
    capacity: usize,
}

/// The receiving side, for [`run`].
#[derive(Debug)]
pub struct Jobs {
    rx: Receiver<Queued>,
}

/// A new queue.
pub fn channel() -> (Recorder, Jobs) {
    channel_of(QUEUE_UNITS)
}

/// A new queue of `capacity` units.
fn channel_of(capacity: usize) -> (Recorder, Jobs) {
    let (tx, rx) = unbounded();
    let room = Arc::new(Semaphore::new(capacity));
    (Recorder { tx, room, capacity }, Jobs { rx })
}

/// The bytes a job holds, about: every variable-length field of a step.
pub fn size(job: &Job) -> usize {
    let Job::Step(step) = job else {
        return FIXED_BYTES;
    };
    let (start, request, end) = &**step;
    let message = |m: &atdp_schema::Message| {
        m.role.len()
            + m.content.as_ref().map_or(0, String::len)
            + m.name.as_ref().map_or(0, String::len)
            + m.tool_call_id.as_ref().map_or(0, String::len)
            + m.tool_calls
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len() + 16)
                .sum::<usize>()
            + 32
    };
    let tools: usize = request
        .tools
        .iter()
        .map(|t| {
            t.kind.len()
                + t.name.len()
                + t.description.as_ref().map_or(0, String::len)
                + t.parameters.as_ref().map_or(0, String::len)
                + 32
        })
        .sum();
    let reply = end.response.as_ref().map_or(0, |r| {
        r.message.as_ref().map_or(0, message)
            + r.token_ids.as_ref().map_or(0, |ids| ids.len() * 4)
            + r.logprobs.as_ref().map_or(0, |lp| lp.len() * 4)
            + r.model.as_ref().map_or(0, String::len)
    });
    FIXED_BYTES
        + start
            .tags
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
        + request.messages.iter().map(message).sum::<usize>()
        + tools
        + request.params.as_ref().map_or(0, String::len)
        + request.extra.as_ref().map_or(0, String::len)
        + request
            .offers
            .iter()
            .map(|o| o.entity.len() + o.field.len())
            .sum::<usize>()
        + reply
        + end.error.as_ref().map_or(0, String::len)
}

/// Units of a queue of `capacity` a job of `bytes` takes (a job bigger than the queue takes
/// all of it).
fn units(bytes: usize, capacity: usize) -> u32 {
    let units = bytes.div_ceil(UNIT).clamp(1, capacity);
    u32::try_from(units).unwrap_or(u32::MAX)
}

/// The next job: polled every [`POLL`] while busy, waited for once idle; `None` once every
/// sender is gone.
fn next(jobs: &Jobs, idle_since: &mut Option<Instant>) -> Option<Queued> {
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

/// The recording thread's loop; ends when every sender is gone or the sink is.
pub fn run(sink: std::sync::Weak<dyn Sink>, jobs: Jobs) {
    let mut idle_since = None;
    while let Some((job, room)) = next(&jobs, &mut idle_since) {
        let Some(sink) = sink.upgrade() else { break };
        if catch_unwind(AssertUnwindSafe(|| sink.perform(job))).is_err() {
            tracing::error!("Recording a call panicked; it is not recorded, recording goes on.");
        }
        // The job's room is given back once it is done, not when it leaves the queue.
        drop(room);
    }
}

impl Recorder {
    /// Queues a job, waiting (asynchronously) for room; does it on this thread when the
    /// recording thread is gone.
    pub async fn submit(&self, sink: &dyn Sink, job: Job) {
        let room = self
            .room
            .clone()
            .acquire_many_owned(units(size(&job), self.capacity))
            .await
            .ok();
        if let Err(error) = self.tx.send((job, room)) {
            let (job, _) = error.0;
            sink.perform(job);
        }
    }

    /// Whether the queue is nearly full (less than a sixteenth free): new calls are then
    /// answered as under lake back-pressure.
    pub fn full(&self) -> bool {
        self.room.available_permits() < self.capacity / 16
    }

    /// Bytes of room left in the queue.
    pub fn room_bytes(&self) -> usize {
        self.room.available_permits() * UNIT
    }

    /// Waits until everything queued so far is recorded.
    pub async fn drain(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send((Job::Barrier(done), None)).is_ok() {
            let _ = wait.await;
        }
    }

    /// [`Recorder::drain`] for a thread outside the runtime (the shutdown).
    pub fn drain_blocking(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send((Job::Barrier(done), None)).is_ok() {
            let _ = wait.blocking_recv();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    use atdp_schema::Message;

    use super::*;

    /// Holds every job until released, and counts what it recorded.
    #[derive(Default)]
    struct Gate {
        open: AtomicBool,
        done: Mutex<Vec<usize>>,
    }

    impl Sink for Gate {
        fn perform(&self, job: Job) {
            while !self.open.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            match job {
                Job::Barrier(done) => {
                    let _ = done.send(());
                }
                job => self.done.lock().unwrap().push(size(&job)),
            }
        }
    }

    fn step(text_bytes: usize, token_ids: usize) -> Job {
        let start = StepStart {
            step_id: "s".into(),
            trajectory_id: "t".into(),
            parent_step_id: None,
            turn_index: 0,
            tenant_id: "x".into(),
            agent_id: "a".into(),
            started_at: 0,
            api: "openai.chat",
            upstream: "u".into(),
            upstream_trust: crate::config::Trust::External,
            consent: None,
            model_requested: "m".into(),
            tags: Default::default(),
            sent_masked: Default::default(),
        };
        let request = RequestView {
            messages: vec![Message {
                role: "user".into(),
                content: Some("x".repeat(text_bytes)),
                ..Message::default()
            }],
            tools: vec![atdp_schema::Tool {
                kind: "function".into(),
                name: "f".into(),
                description: None,
                parameters: Some("p".repeat(text_bytes)),
            }],
            ..RequestView::default()
        };
        let end = StepEnd {
            status: "ok",
            error: None,
            response: Some(crate::wire::ResponseView {
                token_ids: Some(vec![0; token_ids]),
                ..Default::default()
            }),
            policy_version: None,
            restored_glued: Vec::new(),
        };
        Job::Step(Box::new((start, request, end)))
    }

    #[test]
    fn a_job_counts_every_field_of_the_step() {
        // Tool schemas and token ids count, not only message text.
        let small = size(&step(10, 0));
        let big = size(&step(100_000, 0));
        assert!(big >= small + 190_000, "{small} {big}");
        assert!(size(&step(10, 50_000)) >= small + 190_000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_makes_the_sender_wait_without_blocking_its_thread() {
        let gate = Arc::new(Gate::default());
        // A queue of 64 KiB, filled by one job bigger than it (the sink holds that job, so
        // its room is not given back).
        let (recorder, jobs) = channel_of(64);
        let recorder = Arc::new(recorder);
        let sink: Arc<dyn Sink> = gate.clone();
        let weak = Arc::downgrade(&sink);
        std::thread::spawn(move || run(weak, jobs));
        recorder.submit(&*sink, step(100 << 10, 0)).await;
        assert!(recorder.full());
        assert_eq!(recorder.room_bytes(), 0);
        // The next submission waits; meanwhile this runtime still runs other tasks.
        let waiting = {
            let (recorder, sink) = (recorder.clone(), sink.clone());
            tokio::spawn(async move { recorder.submit(&*sink, step(10, 0)).await })
        };
        let ticks = tokio::spawn(async {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            true
        });
        assert!(
            ticks.await.unwrap(),
            "other tasks run while the sender waits"
        );
        assert!(!waiting.is_finished(), "the sender waits for room");
        gate.open.store(true, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap()
            .unwrap();
        recorder.drain().await;
        assert_eq!(gate.done.lock().unwrap().len(), 2, "nothing is dropped");
        assert!(!recorder.full());
    }
}
